"""Backend for a local transformers causal LM, optionally quantised to 4-bit NF4.

Sampling is a short loop of our own instead of ``model.generate``: it draws from a
`torch.Generator` (``generate`` samples from torch's global generator), which keeps every
answer a function of the seed alone. The `n` answers to one prompt are sampled as one batch
of `n` identical rows, so no padding is involved.
"""

from __future__ import annotations

import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

from .core import Completion, LLMError


def load(path: str | os.PathLike, quantization: str | None = None, device: str = "cpu"):
    """Model and tokenizer from a local directory; ``quantization="nf4"`` loads 4-bit weights."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"hf backend: model directory {path} (path) does not exist")
    if quantization not in (None, "nf4"):
        raise ValueError(f"hf backend: quantization must be null or 'nf4', got {quantization!r}")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.chat_template is None:
        raise ValueError(f"hf backend: the tokenizer in {path} has no chat template")
    options = {}
    if quantization == "nf4":
        options["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
        )
        options["device_map"] = {"": device}  # 4-bit weights are quantised where they load
    model = AutoModelForCausalLM.from_pretrained(path, **options)
    if quantization is None:
        model = model.to(device)
    else:
        keep_cpu_4bit_layout(model)
    return model.eval(), tokenizer


def keep_cpu_4bit_layout(model) -> None:
    """Turn off bitsandbytes' CPU repacking of 4-bit weights on the first no-grad forward.

    On CPUs with AVX512-BF16 it rewrites the weights in place for a faster kernel and never
    undoes it: it fails on layers whose width is not a multiple of 32 (small models), later
    training gets wrong gradients or crashes, and answers would depend on the CPU model.
    """
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


class HFBackend:
    """Chat completions from a local model, seeded per backend (and per request when asked)."""

    name = "hf"

    def __init__(self, model, tokenizer, model_name: str, seed: int = 0):
        self.lm = model
        self.tokenizer = tokenizer
        self.model = model_name
        self._generator = torch.Generator().manual_seed(seed)
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos = torch.tensor(sorted({tokenizer.eos_token_id, *eos} - {None}))

    def generate(
        self, messages: list[dict], n: int, temperature: float, max_tokens: int, seed: int | None, **constraint
    ) -> Completion:
        if constraint:
            raise LLMError(f"the hf backend cannot constrain decoding ({', '.join(constraint)}); use backend: local")
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        room = self.lm.config.max_position_embeddings - len(prompt)
        if room < 1:
            raise ValueError(
                f"hf backend: prompt of {len(prompt)} tokens does not fit the model's "
                f"{self.lm.config.max_position_embeddings} positions"
            )
        generator = self._generator if seed is None else torch.Generator().manual_seed(seed)
        tokens = sample(self.lm, torch.tensor([prompt] * n), min(max_tokens, room), temperature, self.eos, generator)
        texts, used = [], 0
        for row in tokens.tolist():
            end = next((i for i, t in enumerate(row) if t in self.eos), None)
            used += len(row) if end is None else end + 1
            texts.append(self.tokenizer.decode(row[:end], skip_special_tokens=True))
        return Completion(texts, len(prompt), used)


@torch.inference_mode()
def sample(model, prompt: torch.Tensor, max_tokens: int, temperature: float, eos: torch.Tensor,
           generator: torch.Generator) -> torch.Tensor:
    """Sample up to `max_tokens` tokens per row with a KV cache; temperature 0 is greedy.

    Returns ``(rows, steps)`` token ids; a row that has emitted EOS keeps emitting EOS.
    """
    out = model(input_ids=prompt.to(model.device), use_cache=True)
    done = torch.zeros(prompt.shape[0], dtype=torch.bool)
    steps = []
    for _ in range(max_tokens):
        logits = out.logits[:, -1].float().cpu()
        if temperature == 0:
            token = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        token = torch.where(done, eos[0], token)
        steps.append(token)
        done |= torch.isin(token, eos)
        if done.all():
            break
        out = model(input_ids=token[:, None].to(model.device), cache=out.cache, use_cache=True)
    return torch.stack(steps, 1)
