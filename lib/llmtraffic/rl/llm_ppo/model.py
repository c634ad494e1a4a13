"""The networks and tokens of a language-model policy: the value head (A.2), loading a causal LM
(optionally with a 4-bit NF4 base through bitsandbytes), thread control, and the tokens that
pad and end an answer."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn


class ValueHead(nn.Module):
    """V_phi on the last hidden state: Linear(h, 2h) -> LeakyReLU(0.01) -> Linear(2h, 1) (A.2)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.LeakyReLU(0.01), nn.Linear(2 * hidden, 1))

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h).squeeze(-1)


def disable_cpu_repacking(model: nn.Module) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference; returns layers touched.

    bitsandbytes 0.50 on CPUs with AVX512-BF16 converts a ``Linear4bit`` weight into an
    inference-only layout on its first no-grad forward (as in ``generate``) and never converts
    back, so a later training forward crashes (layers with bias) or computes wrong gradients.
    """
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def is_4bit(model: nn.Module) -> bool:
    import bitsandbytes as bnb

    return any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())


def load_policy_model(source, load_in_4bit: bool = False, device: str | None = None):
    """A causal LM from a path (or an in-memory model), optionally with a 4-bit NF4 base.

    An in-memory model is saved to a temporary folder first, because bitsandbytes quantises
    while loading weights.
    """
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, PreTrainedModel

    if isinstance(source, PreTrainedModel) and not load_in_4bit:
        return source.to(device) if device else source
    if isinstance(source, PreTrainedModel):
        with tempfile.TemporaryDirectory() as tmp:
            source.save_pretrained(tmp)
            return load_policy_model(tmp, load_in_4bit, device)
    if not Path(source).exists():
        raise FileNotFoundError(f"policy model path {source} does not exist")
    quant = None
    if load_in_4bit:
        compute = torch.bfloat16 if device and device.startswith("cuda") else torch.float32
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(source, quantization_config=quant, device_map=device or "cpu")
    if load_in_4bit:
        disable_cpu_repacking(model)
    return model


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch CPU threads. Tiny models are fastest on one: on a shared 2-core
    machine more threads mostly spin and wait (measured ~100x slower per small forward)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def shared_prefix_cache(model, prompt_ids: Tensor, g: int):
    """The KV cache of a prompt but its last token, computed once and repeated for the ``g`` rows
    of a decision (they share the whole prompt), for ``generate`` to continue from (it then
    pre-fills one token per row, not G prompts); the forward keeps the logits of the last
    position only, never a prompt x vocabulary block. None for a one-token prompt."""
    if prompt_ids.shape[1] < 2:
        return None
    cache = model(input_ids=prompt_ids[:, :-1], use_cache=True, logits_to_keep=1).cache
    cache.batch_repeat_interleave(g)
    return cache


def pad_token_id(tokenizer) -> int:
    """The id that fills padded positions: the tokenizer's pad token, else its EOS.

    LLaMA-3-Instruct's tokenizer has no pad token. Padded positions are masked out of attention
    and of every loss, so any valid id will do; EOS is always one.
    """
    for pad in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if pad is not None:
            return int(pad)
    raise ValueError("the tokenizer has neither a pad nor an EOS token: cannot pad or end answers")


def stop_token_ids(model, tokenizer) -> list[int]:
    """Token ids that end an answer: the tokenizer's EOS and the model's generation-config EOS
    ids (LLaMA-3-Instruct ends a turn with ``<|eot_id|>``, not its tokenizer's EOS)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = eos if isinstance(eos, list) else [eos]
    ids = [tokenizer.eos_token_id, *eos]
    out = list(dict.fromkeys(int(i) for i in ids if i is not None))
    if not out:
        raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
    return out


class StopText:
    """Which answers have just written ``text`` (a :data:`small_decoder.Stop`), and where an
    answer ends by it. Only a token that holds the text's last character can end it, so the
    rows' tails are decoded only after such a token."""

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text = tokenizer, text
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.closing = torch.tensor([text[-1] in piece for piece in pieces])
        self.tail = len(tokenizer(text, add_special_tokens=False).input_ids) + 2
        """Tokens decoded to look for the text (its own tokenization, and a little more)."""

    def __call__(self, out: Tensor) -> Tensor:
        ended = torch.zeros(len(out), dtype=torch.bool)
        for row in self.closing[out[:, -1].clamp(max=len(self.closing) - 1)].nonzero()[:, 0].tolist():
            ended[row] = self.text in self.tokenizer.decode(out[row, -self.tail:])
        return ended

    def end(self, answer: Tensor) -> int | None:
        """Tokens of ``answer`` up to the end of the first occurrence of the text, or None."""
        for at in self.closing[answer.clamp(max=len(self.closing) - 1)].nonzero()[:, 0].tolist():
            if self.text in self.tokenizer.decode(answer[max(0, at + 1 - self.tail) : at + 1]):
                return at + 1
        return None
