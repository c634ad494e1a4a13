"""GPU memory and speed of OracleTSC's PPO step for an 8B-shaped backbone (issue 7, paper profile).

Builds LLaMA3-8B and Qwen3-8B from their published configs with random weights (enough for
speed and memory), loads them through ``load_policy_model`` with a 4-bit NF4 base and wraps
them in ``LMPolicy`` (LoRA r = 16 on all linear layers, value head of A.2), exactly as the
paper profile does. Then it measures

- seconds per decision: G = 8 answers of up to ``--answer-tokens`` tokens to a prompt of
  ``--prompt-tokens`` tokens in one batched ``generate`` (Alg. 1);
- seconds per update: ``LMPolicy.update`` on a buffer of ``--buffer`` exchanges (400 s of
  10-s decisions = 40, §4.1.3), scoring included, minibatches of ``--minibatch``;
- peak GPU memory (allocated and reserved) of each phase, and whether the peak reserved memory
  plus ``--context-gb`` for the CUDA context fits ``--limit-gb`` (the paper's one 48-GB GPU).

Random weights rarely emit the end token, so answers run to full length (the worst case). The
prompt is random token ids (the real A.4/A.5 prompt is ~600–900 tokens with Qwen's tokenizer).
Without CUDA it prints why it cannot run and exits with status 0 (so ``make bench`` goes on).

    .venv/bin/python benchmarks/gpu_ppo.py [--models llama3-8b qwen3-8b] [--decisions 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig, load_policy_model

PUBLISHED = {
    # meta-llama/Meta-Llama-3-8B-Instruct config.json
    "llama3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128009),
    # Qwen/Qwen3-8B config.json
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                     tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645),
}
GiB = 1024**3


class IdTokenizer:
    """The tokenizer interface ``LMPolicy`` uses, over prompts written as space-separated ids
    (random weights need no vocabulary)."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = self.pad_token_id = eos_token_id

    def __call__(self, text: str, return_tensors: str = "pt", add_special_tokens: bool = False):
        return SimpleNamespace(input_ids=torch.tensor([[int(t) for t in text.split()]]))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


def random_model_dir(name: str, folder: str, shape: dict | None = None) -> int:
    """Save a randomly initialised bf16 model of the published config into ``folder``; returns
    its end-token id. ``shape`` overrides config fields (a tiny model for a CPU check)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {**PUBLISHED[name], **(shape or {})}
    config = AutoConfig.for_model(**fields)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    return fields["eos_token_id"]


def peaks(device: str) -> dict[str, float]:
    if device != "cuda":
        return {"allocated_gib": float("nan"), "reserved_gib": float("nan")}
    torch.cuda.synchronize()
    return {"allocated_gib": torch.cuda.max_memory_allocated() / GiB, "reserved_gib": torch.cuda.max_memory_reserved() / GiB}


def reset_peaks(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def measure(name: str, args: argparse.Namespace, device: str = "cuda", shape: dict | None = None) -> dict:
    """Load the 4-bit policy, time ``args.decisions`` decisions and one update; peak memory of each."""
    with tempfile.TemporaryDirectory() as folder:
        eos = random_model_dir(name, folder, shape)
        if device == "cuda":
            torch.cuda.empty_cache()
        reset_peaks(device)
        model = load_policy_model(folder, load_in_4bit=True, device=device)
    cfg = PPOConfig(group_size=args.group, max_new_tokens=args.answer_tokens, minibatch_size=args.minibatch)
    policy = LMPolicy(model, IdTokenizer(eos), cfg)
    row = {"model": name, "G": args.group, "prompt_tokens": args.prompt_tokens, "answer_tokens_max": args.answer_tokens,
           "buffer": args.buffer, "minibatch": args.minibatch, **{f"load_{k}": v for k, v in peaks(device).items()}}

    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompt = " ".join(str(i) for i in rng.integers(0, vocab - 1000, size=args.prompt_tokens))
    policy.sample(prompt)  # warm-up (kernels, allocator)
    reset_peaks(device)
    start = time.perf_counter()
    sampled = [policy.sample(prompt)[1] for _ in range(args.decisions)]
    if device == "cuda":
        torch.cuda.synchronize()
    row["s_per_decision"] = (time.perf_counter() - start) / args.decisions
    row["answer_tokens_mean"] = float(np.mean([len(ex.answer_ids) for ex in sampled]))
    row.update({f"decision_{k}": v for k, v in peaks(device).items()})

    # A full 400-s buffer would take `buffer` decisions to sample; copies of the sampled ones
    # cost the update the same (it scores every exchange afresh).
    buffer = [replace(sampled[i % len(sampled)], reward=float(rng.normal())) for i in range(args.buffer)]
    policy.pending = list(buffer)
    reset_peaks(device)
    start = time.perf_counter()
    policy.update(buffer)
    if device == "cuda":
        torch.cuda.synchronize()
    row["s_per_update"] = time.perf_counter() - start
    row.update({f"update_{k}": v for k, v in peaks(device).items()})
    peak = max(row[f"{phase}_reserved_gib"] for phase in ("load", "decision", "update"))
    row["peak_reserved_gib"] = peak
    row["fits_limit"] = bool(peak + args.context_gb <= args.limit_gb)
    del policy, model
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(PUBLISHED), choices=list(PUBLISHED))
    parser.add_argument("--group", type=int, default=8, help="G answers per decision")
    parser.add_argument("--prompt-tokens", type=int, default=900)
    parser.add_argument("--answer-tokens", type=int, default=512, help="max_new_tokens (PPOConfig default)")
    parser.add_argument("--decisions", type=int, default=3, help="timed decisions")
    parser.add_argument("--buffer", type=int, default=40, help="exchanges per update (400 s / 10 s)")
    parser.add_argument("--minibatch", type=int, default=8)
    parser.add_argument("--limit-gb", type=float, default=48.0, help="GPU memory to fit, GiB")
    parser.add_argument("--context-gb", type=float, default=1.0, help="allowance for the CUDA context, GiB")
    parser.add_argument("--out", help="also write the rows as JSON here")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gpu_ppo.py: no CUDA device here, nothing measured. It needs a GPU (the paper "
              "profile's one 48-GB card or larger) to time an 8B-shaped 4-bit policy.", file=sys.stderr)
        sys.exit(0)
    print(f"device: {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / GiB:.0f} GiB)")
    rows = []
    for name in args.models:
        row = measure(name, args)
        rows.append(row)
        print(f"{name}: load {row['load_reserved_gib']:.1f} GiB; decision (G={args.group}, "
              f"{row['answer_tokens_mean']:.0f} answer tokens) {row['s_per_decision']:.1f} s, peak "
              f"{row['decision_reserved_gib']:.1f} GiB; update ({args.buffer} exchanges) {row['s_per_update']:.1f} s, "
              f"peak {row['update_reserved_gib']:.1f} GiB -> "
              f"{'fits' if row['fits_limit'] else 'does NOT fit'} {args.limit_gb:.0f} GiB "
              f"(peak reserved + {args.context_gb:.0f} GiB context)", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
