"""Speed of the `hf` backend's seeded sampling loop versus ``model.generate`` (the reference,
measured in the same run) on a tiny Qwen2-shaped model: n answers to one chat prompt.

Both sample with the same temperature and a KV cache; `generate` draws from torch's global
generator, our loop from a per-backend `torch.Generator` (why we have the loop). The ratio
should stay near 1 (no slower than `generate`). Run:

    .venv/bin/python benchmarks/llm_sampling.py [--n 8] [--tokens 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from llmtraffic.llm.hf import HFBackend
from llmtraffic.llm.tiny import TinySpec, build_tiny

CORPUS = ["Queue on north approach: 12 vehicles. Choose the next phase.", "<signal>2</signal>"] * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = build_tiny(CORPUS, TinySpec(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256))
    # an end token would stop rows early: make it unlikely so both sample `tokens` tokens
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] = -1.0
    backend = HFBackend(model, tokenizer, "tiny", seed=0)
    messages = [{"role": "user", "content": CORPUS[0]}]
    prompt = torch.tensor([tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)] * args.n)

    def ours():
        backend.generate(messages, args.n, 1.0, args.tokens, seed=1)

    def reference():
        model.generate(prompt, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=args.tokens,
                       min_new_tokens=args.tokens, pad_token_id=tokenizer.pad_token_id)

    times = {}
    for name, fn in (("model.generate", reference), ("hf backend", ours)):
        fn()  # warm-up
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs)
    ref = times["model.generate"]
    for name, t in times.items():
        print(f"{name:15s} {t * 1e3:8.1f} ms for n={args.n} x {args.tokens} tokens  ratio {t / ref:5.2f}")


if __name__ == "__main__":
    main()
