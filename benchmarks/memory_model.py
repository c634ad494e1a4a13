"""The GPU plan's memory model against a measurement on the CPU: shrunk Qwen3-0.6B and LLaMA3-8B.

Each case builds a model from the published config of a Table 1 backbone with fewer decoder
layers (real layer shapes and vocabulary, random fp32 weights, nothing downloaded), wraps it as
the paper profile does (LoRA r = 16 on every linear layer, the value head of A.2) through
``LMPolicy``, and runs one PPO forward and backward of a micro-batch (``LMPolicy._evaluate``, the
adapter-wrapped path a GPU takes, logits of the answer tokens only) in a fresh process. The
measured peak is the rise of the process's resident set (VmHWM after resetting it, glibc told to
return every large block) over the model at rest; the prediction is
:func:`llmtraffic.rl.llm_ppo.memory.predict_memory` at fp32 for the same sizes (activations kept
for the backward pass, logits or the recomputed layer, gradients of the trainable parameters).
Prompts of one length need no padding mask, so the CPU's fused attention runs as on a GPU.

    .venv/bin/python benchmarks/memory_model.py [--cases qwen3-off qwen3-on llama3-off]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys

BENCH_TIMEOUT_S = 1500  # five cases in fresh processes (~9 min on 2 loaded cores); a LLaMA3-8B layer is ~5 GB of fp32 weights

CASES = {
    # name: (backbone, layers, micro-batch, prompt tokens, answer tokens, checkpointing)
    "qwen3-off": ("Qwen3-0.6B", 4, 2, 1200, 64, False),
    "qwen3-on": ("Qwen3-0.6B", 4, 2, 1200, 64, True),
    "qwen3-logits": ("Qwen3-0.6B", 2, 2, 400, 256, True),
    "llama3-off": ("LLaMA3-8B", 1, 1, 900, 64, False),
    "llama3-on": ("LLaMA3-8B", 2, 1, 900, 64, True),
}
MiB = 1024**2


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def measure(name: str) -> dict:
    """Build, run and measure one case (in this process)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig
    from llmtraffic.rl.llm_ppo.memory import CPU_FP32, Shape, Work, predict_memory
    from llmtraffic.signal.backbones import PUBLISHED_CONFIGS

    backbone, layers, micro, prompt, answer, checkpointing = CASES[name]
    torch.set_num_threads(1)
    fields = {**PUBLISHED_CONFIGS[backbone], "num_hidden_layers": layers}
    config = AutoConfig.for_model(**fields)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    cfg = PPOConfig(gradient_checkpointing=checkpointing, max_new_tokens=answer, minibatch_size=micro)
    policy = LMPolicy(model, _Tok(fields["eos_token_id"]), cfg)
    policy.model.train()
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 1000, (prompt,), generator=gen) for _ in range(micro)]
    answers = [torch.randint(0, 1000, (answer,), generator=gen) for _ in range(micro)]
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc_trim(0)
    base = _status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # VmHWM := VmRSS
    logp, values, mask = policy._evaluate(prompts, answers)
    (logp.sum() + values.sum()).backward()
    measured = _status("VmHWM:") - base
    shape = Shape.from_config(fields)
    work = Work(prompt_tokens=prompt, answer_tokens=answer, minibatch=micro, checkpointing=checkpointing, padded=False)
    m = predict_memory(shape, work, CPU_FP32)
    grads = 4 * sum(p.numel() for p in [*policy.actor_params, *policy.value_head.parameters()])
    predicted = m.activations + max(m.logits, m.recompute) + grads
    return {"case": name, "backbone": backbone, "layers": layers, "micro_batch": micro, "prompt": prompt,
            "answer": answer, "checkpointing": checkpointing, "measured_mib": measured / MiB,
            "predicted_mib": predicted / MiB, "activations_mib": m.activations / MiB, "logits_mib": m.logits / MiB,
            "recompute_mib": m.recompute / MiB, "error": predicted / measured - 1}


class _Tok:
    """The tokenizer interface ``LMPolicy`` reads (random weights need no vocabulary)."""

    pad_token_id = None

    def __init__(self, eos: int):
        self.eos_token_id = eos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--one", choices=list(CASES), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    rows = []
    print("| case | backbone (layers kept) | micro-batch × (prompt + answer) | grad. ckpt | predicted MiB | measured MiB | error |")
    print("|---|---|---|---|---|---|---|")
    for name in args.cases:
        out = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True)
        if out.returncode:
            why = [line for line in out.stderr.strip().splitlines() if "Error" in line] or ["exit status %d" % out.returncode]
            print(f"| {name} | failed: {why[-1]} | | | | | |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"| {name} | {r['backbone']} ({r['layers']}) | {r['micro_batch']} × ({r['prompt']} + {r['answer']}) | "
              f"{'on' if r['checkpointing'] else 'off'} | {r['predicted_mib']:.0f} | {r['measured_mib']:.0f} | "
              f"{100 * r['error']:+.1f} % |", flush=True)
    worst = max((abs(r["error"]) for r in rows), default=float("nan"))
    print(f"\nlargest |error|: {100 * worst:.1f} % (fp32 on the CPU, resident-set rise of a fresh process)")


if __name__ == "__main__":
    main()
