"""GPU memory and seconds per PPO update of OracleTSC's policy, at the paper's prompt length.

One command, under 10 minutes on one GPU, fills the memory table of docs/performance.md (On a GPU):

1. **Prompts of the real length** (CPU): the paper's chat prompt (A.4 system prompt, A.5 states,
   the two most recent state–action pairs) built by the project's prompt code for Cologne1 and
   Hangzhou 1x1 along an episode of the max-queue heuristic; the longest one counts. Tokens are
   counted with the backbone's own tokenizer when it is in the local Hugging Face cache, else
   from the characters at an assumed ratio (printed with each length).
2. **Per backbone** (GPU): a model of the published config with random weights (enough for memory
   and speed) loaded as the paper profile does (4-bit NF4 base, LoRA r = 16 on all linear
   layers, value head of A.2) through ``LMPolicy``; one decision (G answers of up to
   ``--answer-tokens`` tokens, one batched ``generate``) and one PPO update on a 400-s buffer
   (40 exchanges) per scenario, without and with gradient checkpointing. Random weights rarely
   emit the end token, so answers run to full length (the worst case).

It prints a table of peak reserved memory and seconds per update (and per decision). Without
CUDA it prints the prompt lengths, says that nothing was measured, and exits with status 0.

    .venv/bin/python benchmarks/gpu_ppo.py [--models qwen3-0.6b llama3-8b] [--checkpointing off on] [--out rows.json]
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
from llmtraffic.signal.backbones import episode_messages, hf_path, prompt_tokens
from llmtraffic.study import DataMissingError

PUBLISHED = {
    # Qwen/Qwen3-0.6B config.json
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
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
HUB_NAME = {"qwen3-0.6b": "Qwen3-0.6B", "llama3-8b": "LLaMA3-8B", "qwen3-8b": "Qwen3-8B"}
SCENARIOS = ("cologne1", "hangzhou1x1")
GiB = 1024**3


def prompt_lengths(models: list[str], scenarios=SCENARIOS, decisions: int = 12) -> dict:
    """``{(model, scenario): (tokens, how counted)}``: the longest prompt of the first
    ``decisions`` decisions; a scenario whose data is missing maps to ``(None, reason)``."""
    from transformers import AutoTokenizer

    chats = {}
    for scenario in scenarios:
        try:
            chats[scenario] = episode_messages(scenario, decisions)
        except DataMissingError as err:
            chats[scenario] = str(err)
    out = {}
    for model in models:
        path = hf_path(HUB_NAME[model])
        tok = AutoTokenizer.from_pretrained(path) if path is not None else None
        for scenario, chat in chats.items():
            if isinstance(chat, str):
                out[(model, scenario)] = (None, chat)
                continue
            counted = [prompt_tokens(c, tok) for c in chat]
            out[(model, scenario)] = (max(n for n, _ in counted), counted[0][1])
    return out


class IdTokenizer:
    """The tokenizer interface ``LMPolicy`` uses, over prompts written as space-separated ids
    (random weights need no vocabulary). It has no pad token, like LLaMA-3's."""

    pad_token_id = None

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id

    def __call__(self, text: str, return_tensors: str = "pt", add_special_tokens: bool = False):
        return SimpleNamespace(input_ids=torch.tensor([[int(t) for t in text.split()]]))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


def random_model_dir(name: str, folder: str) -> int:
    """Save a randomly initialised bf16 model of the published config into ``folder``; returns
    its end-token id."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = PUBLISHED[name]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields), dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return fields["eos_token_id"]


def peak_gib() -> float:
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved() / GiB


def reset_peak() -> None:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()


def timed(fn) -> tuple[float, float]:
    """Seconds and peak reserved GiB of ``fn()``."""
    reset_peak()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, peak_gib()


def measure(name: str, lengths: dict, args: argparse.Namespace, deadline: float) -> list[dict]:
    """Rows for one backbone: per scenario and checkpointing setting, one decision and one update."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        eos = random_model_dir(name, folder)
        reset_peak()
        model = load_policy_model(folder, load_in_4bit=True, device="cuda")
        load_gib = peak_gib()
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    for checkpointing in args.checkpointing:
        cfg = PPOConfig(group_size=args.group, max_new_tokens=args.answer_tokens, minibatch_size=args.minibatch,
                        gradient_checkpointing=checkpointing == "on", seed=0)
        policy = LMPolicy(model, IdTokenizer(eos), cfg)
        for scenario in args.scenarios:
            tokens, how = lengths[(name, scenario)]
            row = {"model": name, "scenario": scenario, "checkpointing": checkpointing, "prompt_tokens": tokens,
                   "counted": how, "load_gib": load_gib}
            if tokens is None or time.monotonic() > deadline:
                row["skipped"] = how if tokens is None else "time budget spent"
                rows.append(row)
                continue
            prompt = " ".join(str(i) for i in rng.integers(0, vocab - 1000, size=tokens))
            sampled = []
            row["s_per_decision"], row["decision_gib"] = timed(lambda: sampled.append(policy.sample(prompt)[1]))
            # A 400-s buffer holds 40 decisions; copies of the sampled one cost the update the same.
            buffer = [replace(sampled[0], reward=float(rng.normal())) for _ in range(args.buffer)]
            policy.pending = list(buffer)
            row["s_per_update"], row["update_gib"] = timed(lambda: policy.update(buffer))
            row["answer_tokens"] = len(sampled[0].answer_ids)
            rows.append(row)
            print(json.dumps(row), flush=True)
        model = policy.model.unload()  # the LoRA-free base for the next setting
        del policy
        torch.cuda.empty_cache()
    del model
    torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    head = "| backbone | scenario | prompt tokens (counted by) | grad. ckpt | peak GiB (decision / update) | s per decision | s per PPO update |"
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['scenario']} | {r['prompt_tokens']} | {r['checkpointing']} | skipped: {r['skipped']} | | |")
            continue
        lines.append(f"| {r['model']} (4-bit + LoRA) | {r['scenario']} | {r['prompt_tokens']} ({r['counted']}) | "
                     f"{r['checkpointing']} | {r['decision_gib']:.1f} / {r['update_gib']:.1f} | "
                     f"{r['s_per_decision']:.1f} | {r['s_per_update']:.1f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b", "llama3-8b"], choices=list(PUBLISHED))
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--checkpointing", nargs="+", default=["off", "on"], choices=["off", "on"],
                        help="gradient checkpointing settings to measure")
    parser.add_argument("--group", type=int, default=8, help="G answers per decision")
    parser.add_argument("--answer-tokens", type=int, default=512, help="max_new_tokens (O, §4.1.3)")
    parser.add_argument("--buffer", type=int, default=40, help="exchanges per update (400 s / 10 s)")
    parser.add_argument("--minibatch", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=540, help="start no measurement after this many seconds")
    parser.add_argument("--out", help="also write the rows as JSON here")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    deadline = time.monotonic() + args.budget_s
    lengths = prompt_lengths(args.models, args.scenarios)
    for (model, scenario), (tokens, how) in lengths.items():
        print(f"prompt length, {model} on {scenario}: {tokens} tokens ({how})")
    if not torch.cuda.is_available():
        print("not measured: no GPU (no CUDA device here; the lengths above are the CPU-side part). "
              "Run it on one GPU to fill the memory table of docs/performance.md.")
        sys.exit(0)
    print(f"device: {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / GiB:.0f} GiB)")
    rows = [row for name in args.models for row in measure(name, lengths, args, deadline)]
    print(table(rows))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
