"""Tiny causal language models for CPU: a byte-level BPE tokenizer trained in-process on a
small corpus (with a ChatML chat template) and a Qwen2-shaped model built from a config.

No download is involved, so tests and the CPU stand-in for a pretrained LLM (the signal
study's surrogate) run anywhere. The weights are random until someone trains them; what is
real is the machinery: tokenizer, chat template, KV cache, sampling, saving and loading,
4-bit quantisation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The ChatML layout Qwen models use; the answer ends with ``<|im_end|>`` (the EOS token)."""


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny model and its tokenizer."""

    vocab_size: int = 384
    """Target BPE vocabulary (256 byte symbols + merges + 3 special tokens); fewer if the
    corpus has too few merges."""
    hidden: int = 32
    """Hidden size."""
    layers: int = 2
    """Decoder layers."""
    heads: int = 4
    """Attention heads (must divide `hidden`)."""
    kv_heads: int = 2
    """Key/value heads (grouped-query attention as in Qwen2; must divide `heads`)."""
    intermediate: int = 64
    """MLP width."""
    max_positions: int = 1024
    """Longest sequence (prompt + answer) in tokens."""
    seed: int = 0
    """Seed of the weight initialisation."""


def tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 384, pad: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `corpus`, with the ChatML template.

    Byte-level means any text encodes (unseen characters fall back to bytes), so prompts
    need not be in the corpus; the corpus only decides which merges make them short.
    Normaliser and pre-tokeniser are Qwen2's (digits split one by one): a saved tiny model
    reloads through ``AutoTokenizer`` as a ``Qwen2Tokenizer``, which rebuilds exactly these.
    ``pad=False`` leaves the pad token unset, as LLaMA-3-Instruct's tokenizer does.
    """
    model = Tokenizer(models.BPE())
    model.normalizer = normalizers.NFC()
    model.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, eos_token=IM_END, pad_token=PAD if pad else None)
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_model(tokenizer: PreTrainedTokenizerFast, spec: TinySpec = TinySpec()) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2-shaped causal LM sized for `tokenizer`, seeded by `spec.seed`."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=spec.max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,  # None when the tokenizer has no pad token
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    # Module initialisers draw from torch's global generator; fork it so the seed stays local.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    return model.eval()


def build_tiny(corpus: Iterable[str], spec: TinySpec = TinySpec()) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """Tokenizer trained on `corpus` and a model of shape `spec` for it."""
    tokenizer = tiny_tokenizer(corpus, spec.vocab_size)
    return tiny_model(tokenizer, spec), tokenizer
