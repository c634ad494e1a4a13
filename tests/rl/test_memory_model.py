"""The GPU plan's memory model (rl/llm_ppo/memory.py) against what autograd really keeps."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig, torch_threads
from llmtraffic.rl.llm_ppo.memory import CPU_FP32, GPU_NF4, Shape, Work, fitting_micro_batch, gpu_peak, predict_memory, saved_per_token

SMALL = {  # LLaMA and Qwen3 layers in miniature (grouped-query attention, untied and tied heads)
    "llama": dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False, eos_token_id=1),
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24, vocab_size=300, tie_word_embeddings=True, eos_token_id=1),
}


class _Tok:
    pad_token_id, eos_token_id = None, 1


def _saved_bytes(fields: dict, layers: int, tokens: int, rows: int, padded: bool = False) -> int:
    """Bytes of distinct non-parameter tensors autograd saves in one PPO forward (peft path)."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(**{**fields, "num_hidden_layers": layers})
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    policy = LMPolicy(model, _Tok(), PPOConfig(lora_rank=4, max_new_tokens=4))
    params = {p.untyped_storage().data_ptr() for p in [*policy.model.parameters(), *policy.value_head.parameters()]}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 300, (tokens - 4 - 6 * (padded and k > 0),), generator=g) for k in range(rows)]
    answers = [torch.randint(2, 300, (4,), generator=g) for _ in range(rows)]
    with torch_threads(1), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        policy._evaluate(prompts, answers)
    return sum(seen.values())


@pytest.mark.parametrize("arch, padded", [("llama", False), ("qwen3", False), ("llama", True)])
def test_saved_bytes_per_token_per_layer_are_what_autograd_keeps(arch, padded):
    """One decoder layer more adds exactly ``saved_per_token`` bytes per (padded) token, counted over
    the storages autograd saves (fp32; without padding the fused attention groups keys and values,
    with it they are repeated to every head and each layer keeps the mask)."""
    fields, rows, tokens = SMALL[arch], 2, 40
    grown = _saved_bytes(fields, 2, tokens, rows, padded) - _saved_bytes(fields, 1, tokens, rows, padded)
    expected = saved_per_token(Shape.from_config(fields), CPU_FP32, rank=4, padded=padded, context=tokens)
    assert grown / (rows * tokens) == expected


def test_checkpointing_and_micro_batches_shrink_the_update_and_the_fit_is_named():
    shape = Shape.from_config(dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                   tie_word_embeddings=True))
    full = Work(prompt_tokens=2950, answer_tokens=512, micro_batch=8, checkpointing=False)
    ckpt = Work(prompt_tokens=2950, answer_tokens=512, micro_batch=8, checkpointing=True)
    gib = 1024**3
    # the count at Qwen3-0.6B: ~91 KiB per token per layer kept without checkpointing, 2 KiB with it
    assert 85 * 1024 < saved_per_token(shape, GPU_NF4) < 100 * 1024
    assert predict_memory(shape, full).activations > 60 * gib > predict_memory(shape, ckpt).activations
    fit = fitting_micro_batch(shape, full, 48 * gib)
    assert fit == 3 and gpu_peak(predict_memory(shape, Work(2950, 512, micro_batch=fit, checkpointing=False))) <= 48 * gib
    assert gpu_peak(predict_memory(shape, Work(2950, 512, micro_batch=fit + 1, checkpointing=False))) > 48 * gib
    assert fitting_micro_batch(shape, full, 1 * gib) is None
