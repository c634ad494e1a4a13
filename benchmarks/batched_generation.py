"""generate's path (the GPU's) on the CPU: a decision's G answers from one shared prompt prefix, and
K checkpoints answering in one batch as mixed adapters, against the unbatched ways.

A small LLaMA-shaped model with random weights (nothing downloaded) wrapped by ``LMPolicy`` with
LoRA on every linear layer, sampling through ``generate`` on the adapter-wrapped model (as on a
GPU or over a 4-bit base): (1) one decision of G answers pre-filled once and repeated from its KV
cache, against G full pre-fills; (2) one held-out decision for each of K checkpoints, as mixed
adapters in one ``generate``, against loading each checkpoint and sampling alone. Random weights
rarely end an answer, so every answer runs to ``--new`` tokens.

    .venv/bin/python benchmarks/batched_generation.py [--checkpoints 8] [--group 8] [--prompt 600] [--new 24]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

BENCH_TIMEOUT_S = 600


class _Tok:
    """Prompts written as space-separated token ids (random weights need no vocabulary)."""

    pad_token_id = None

    def __init__(self, eos: int):
        self.eos_token_id = eos

    def __call__(self, text: str, return_tensors: str = "pt", add_special_tokens: bool = False):
        from types import SimpleNamespace

        return SimpleNamespace(input_ids=torch.tensor([[int(t) for t in text.split()]]))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


def policy(args):
    from transformers import AutoConfig, AutoModelForCausalLM

    from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig

    config = AutoConfig.for_model(model_type="llama", hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=4000, eos_token_id=1)
    torch.manual_seed(0)
    p = LMPolicy(AutoModelForCausalLM.from_config(config), _Tok(1),
                 PPOConfig(group_size=args.group, max_new_tokens=args.new, temperature=1.0))
    p.merge_sampler = False  # generate on the adapter-wrapped model, as on a GPU
    return p


def timed(fn, repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--new", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from llmtraffic.rl.llm_ppo import policy as policy_module

    pol = policy(args)
    rng = np.random.default_rng(0)
    prompt = " ".join(str(i) for i in rng.integers(2, 4000, size=args.prompt))
    shared = timed(lambda: pol.sample(prompt, record=False))
    real = policy_module.shared_prefix_cache
    policy_module.shared_prefix_cache = lambda *a: None
    full = timed(lambda: pol.sample(prompt, record=False))
    policy_module.shared_prefix_cache = real
    print(f"one decision, G = {args.group}, prompt {args.prompt} + {args.new} new tokens: "
          f"{shared:.2f} s with the prefix pre-filled once, {full:.2f} s with G pre-fills ({full / shared:.1f}x)")

    prompts = [" ".join(str(i) for i in rng.integers(2, 4000, size=args.prompt)) for _ in range(args.checkpoints)]
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for k in range(args.checkpoints):
            with torch.no_grad():
                for name, p in pol.model.named_parameters():
                    if "lora_B" in name:
                        p.normal_(0, 0.02, generator=torch.Generator().manual_seed(k))
            paths.append(Path(folder) / f"c{k}.pt")
            pol.save(paths[-1])

        def alone():
            for path, p in zip(paths, prompts):
                pol.load(path)
                pol.sample(p, 1, record=False)

        one_by_one = timed(alone, repeat=1)
        mixed = pol.checkpoints_decoder(paths)
        rngs = [np.random.default_rng(k) for k in range(args.checkpoints)]
        together = timed(lambda: pol.sample_each(prompts, rngs, mixed), repeat=1)
        mixed.close()
    print(f"one held-out decision of {args.checkpoints} checkpoints ({args.prompt} + {args.new} tokens each): "
          f"{together:.2f} s as mixed adapters in one generate, {one_by_one:.2f} s one checkpoint after the other "
          f"({one_by_one / together:.1f}x)")
    print("(CPU, 1 thread, hidden 256, 4 layers: the ratio, not the seconds, carries over to a GPU, where a decoding "
          "step is bound by per-layer latency rather than arithmetic)")


if __name__ == "__main__":
    main()
