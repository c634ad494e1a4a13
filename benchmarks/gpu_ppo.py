"""GPU memory and seconds per PPO update of OracleTSC's policy, at the paper's prompt length.

One command, under 10 minutes on one GPU, fills the memory table of docs/performance.md (On a GPU):

1. **Prompts of the real length** (CPU): the paper's chat prompt (A.4 system prompt, A.5 states,
   the two most recent state–action pairs) built by the project's prompt code for Cologne1 and
   Hangzhou 1x1 along an episode of the max-queue heuristic; the longest one counts. Tokens are
   counted with the backbone's own tokenizer when it is in the local Hugging Face cache, else
   from the characters at an assumed ratio (printed with each length).
2. **Per backbone** (GPU): a model of the published config with random weights (enough for memory
   and speed) loaded as the paper profile does (4-bit NF4 base, LoRA r = 16 on all linear
   layers, value head of A.2, micro-batches of ``--micro``) through ``LMPolicy``; one decision (G
   answers of up to ``--answer-tokens`` tokens, one batched ``generate`` from a shared prefix)
   and one PPO update on a 400-s buffer (40 exchanges) per scenario, with gradient checkpointing
   first, then without. Random weights rarely emit the end token, so answers run to full length
   (the worst case). Beside each measurement: the plan's prediction (``rl/llm_ppo/memory.py``).

Each configuration is one row: an out-of-memory error becomes a row saying so and the next
configuration runs; ``--out`` is rewritten after every row; ``--budget-s`` holds inside a
measurement (an interval timer stops a decision or update that would run past it, and its row
says so). ``--dry-run`` runs the same code on the CPU with shrunk configs (2 layers, hidden 64,
short prompts, fp32 base), peak memory being the rise of the process's resident set, so that
the test suite covers it. Without CUDA and without ``--dry-run`` it prints the prompt lengths
and exits with status 0.

    .venv/bin/python benchmarks/gpu_ppo.py [--models qwen3-0.6b llama3-8b] [--checkpointing on off] [--out rows.json]
    .venv/bin/python benchmarks/gpu_ppo.py --dry-run --out rows.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig, load_policy_model
from llmtraffic.rl.llm_ppo.memory import CPU_FP32, GPU_NF4, Shape, Work, gpu_peak, predict_memory
from llmtraffic.signal.backbones import PUBLISHED_CONFIGS, episode_messages, hf_path, prompt_tokens
from llmtraffic.study import DataMissingError

BENCH_TIMEOUT_S = 900

HUB_NAME = {"qwen3-0.6b": "Qwen3-0.6B", "llama3-8b": "LLaMA3-8B", "qwen3-8b": "Qwen3-8B"}
PUBLISHED = {key: PUBLISHED_CONFIGS[name] for key, name in HUB_NAME.items()}
SHRUNK = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size=512, bos_token_id=1, eos_token_id=2)
"""What ``--dry-run`` changes in each published config (the CPU's smoke test)."""
SCENARIOS = ("cologne1", "hangzhou1x1")
GiB = 1024**3


class BudgetSpent(Exception):
    """The time budget ran out inside a measurement."""


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


def config_of(name: str, dry: bool) -> dict:
    return {**PUBLISHED[name], **(SHRUNK if dry else {})}


def random_model_dir(fields: dict, folder: str, device: str) -> int:
    """Save a randomly initialised model of ``fields`` (bf16 on a GPU, fp32 on the CPU) into
    ``folder``; returns its end-token id."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields),
                                                 dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(folder)
    del model
    _free(device)
    return fields["eos_token_id"]


def _free(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))


class Meter:
    """Peak memory of a measurement: reserved CUDA memory, or on the CPU the resident set's rise."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self) -> Meter:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return self
        self.base = _status("VmRSS:")
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # VmHWM := VmRSS
        return self

    def __exit__(self, *exc) -> None:
        return None

    def peak_gib(self) -> float:
        if self.device == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_reserved() / GiB
        return (_status("VmHWM:") - self.base) / GiB


def _out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return (isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError))
            or "out of memory" in text or "can't allocate memory" in text or "cannot allocate memory" in text)


def timed(fn, device: str, deadline: float) -> tuple[float, float]:
    """Seconds and peak GiB of ``fn()``, stopped by :class:`BudgetSpent` at ``deadline`` (monotonic)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise BudgetSpent("before it started")

    def stop(signum, frame):
        raise BudgetSpent(f"stopped {left:.1f} s into it")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, left)
    try:
        with Meter(device) as meter:
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - start, meter.peak_gib()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def measure(name: str, lengths: dict, args: argparse.Namespace, deadline: float, emit) -> None:
    """Rows for one backbone: per checkpointing setting and scenario, one decision and one update,
    each handed to ``emit`` as soon as it is known."""
    device = "cpu" if args.dry_run else "cuda"
    fields = config_of(name, args.dry_run)
    prec = CPU_FP32 if args.dry_run else GPU_NF4
    with tempfile.TemporaryDirectory() as folder:
        eos = random_model_dir(fields, folder, device)
        with Meter(device) as meter:
            model = load_policy_model(folder, load_in_4bit=not args.dry_run, device=device)
            load_gib = meter.peak_gib()
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    for checkpointing in args.checkpointing:
        cfg = PPOConfig(group_size=args.group, max_new_tokens=args.answer_tokens, minibatch_size=args.minibatch,
                        micro_batch_size=args.micro, gradient_checkpointing=checkpointing == "on", seed=0)
        policy = LMPolicy(model, IdTokenizer(eos), cfg)
        for scenario in args.scenarios:
            tokens, how = lengths[(name, scenario)]
            row = {"model": name, "scenario": scenario, "checkpointing": checkpointing, "prompt_tokens": tokens,
                   "counted": how, "load_gib": load_gib, "micro_batch": args.micro, "device": device}
            if tokens is None:
                emit({**row, "skipped": how})
                continue
            work = Work(prompt_tokens=tokens, answer_tokens=args.answer_tokens, group_size=args.group,
                        minibatch=args.minibatch, micro_batch=args.micro, checkpointing=checkpointing == "on")
            predicted = predict_memory(Shape.from_config(fields), work, prec)
            row["predicted_gib"] = (gpu_peak(predicted) if device == "cuda" else predicted.peak) / GiB
            prompt = " ".join(str(i) for i in rng.integers(0, vocab - 10, size=tokens))
            sampled: list = []
            try:
                row["s_per_decision"], row["decision_gib"] = timed(
                    lambda: sampled.append(policy.sample(prompt)[1]), device, deadline)
                # A 400-s buffer holds 40 decisions; copies of the sampled one cost the update the same.
                buffer = [replace(sampled[0], reward=float(rng.normal())) for _ in range(args.buffer)]
                policy.pending = list(buffer)
                row["s_per_update"], row["update_gib"] = timed(lambda: policy.update(buffer), device, deadline)
                row["answer_tokens"] = len(sampled[0].answer_ids)
            except BudgetSpent as err:
                row["skipped"] = f"time budget spent ({err}, inside the {'update' if sampled else 'decision'})"
            except (RuntimeError, MemoryError) as err:
                if not _out_of_memory(err):
                    raise
                row["oom"] = f"out of memory in the {'update' if sampled else 'decision'}: {str(err).splitlines()[0][:160]}"
            policy.pending = []
            _free(device)
            emit(row)
        model = policy.model.unload()  # the LoRA-free base for the next setting
        del policy
        _free(device)
    del model
    _free(device)


def table(rows: list[dict]) -> str:
    head = ("| backbone | scenario | prompt tokens (counted by) | grad. ckpt | micro-batch | peak GiB (decision / update) "
            "| plan's peak GiB | s per decision | s per PPO update |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        start = f"| {r['model']} | {r['scenario']} | {r['prompt_tokens']} ({r['counted']}) | {r['checkpointing']} | {r['micro_batch']} |"
        if "skipped" in r or "oom" in r:
            lines.append(f"{start} {r.get('oom') or 'skipped: ' + r['skipped']} | {r.get('predicted_gib', float('nan')):.1f} | | |")
            continue
        lines.append(f"{start} {r['decision_gib']:.2f} / {r['update_gib']:.2f} | {r['predicted_gib']:.2f} | "
                     f"{r['s_per_decision']:.1f} | {r['s_per_update']:.1f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b", "llama3-8b"], choices=list(PUBLISHED))
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--checkpointing", nargs="+", default=["on", "off"], choices=["off", "on"],
                        help="gradient checkpointing settings to measure, in order")
    parser.add_argument("--group", type=int, default=8, help="G answers per decision")
    parser.add_argument("--answer-tokens", type=int, default=512, help="max_new_tokens (O, §4.1.3)")
    parser.add_argument("--buffer", type=int, default=40, help="exchanges per update (400 s / 10 s)")
    parser.add_argument("--minibatch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=None, help="prompt length (default: the paper prompt's)")
    parser.add_argument("--micro", type=int, default=2, help="micro-batch size of the update (the paper profile's)")
    parser.add_argument("--budget-s", type=float, default=540, help="seconds for everything, enforced inside measurements")
    parser.add_argument("--out", help="write the rows as JSON here (after every row)")
    parser.add_argument("--dry-run", action="store_true", help="the same code on the CPU with shrunk configs (smoke test)")
    args = parser.parse_args(argv)
    if args.dry_run:  # a smoke test's sizes unless given
        given = set(argv if argv is not None else sys.argv[1:])
        for flag, small in (("--group", 2), ("--answer-tokens", 4), ("--buffer", 4), ("--minibatch", 2), ("--micro", 1)):
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), small)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    if args.prompt_tokens or args.dry_run:  # no data, no tokenizer: a prompt of random ids
        how = "given" if args.prompt_tokens else "dry run"
        lengths = {(m, sc): (args.prompt_tokens or 48, how) for m in args.models for sc in args.scenarios}
    else:
        lengths = prompt_lengths(args.models, args.scenarios)
    for (model, scenario), (tokens, how) in lengths.items():
        print(f"prompt length, {model} on {scenario}: {tokens} tokens ({how})")
    if not torch.cuda.is_available() and not args.dry_run:
        print("not measured: no GPU (no CUDA device here; the lengths above are the CPU-side part). "
              "Run it on one GPU to fill the memory table of docs/performance.md.")
        sys.exit(0)
    if args.dry_run:
        print("dry run: the CPU, shrunk configs (" + ", ".join(f"{k}={v}" for k, v in SHRUNK.items()) + "), fp32 base")
    else:
        print(f"device: {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / GiB:.0f} GiB)")
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=1)

    for name in args.models:
        try:
            measure(name, lengths, args, deadline, emit)
        except (RuntimeError, MemoryError) as err:  # loading the model itself ran out of memory
            if not _out_of_memory(err):
                raise
            emit({"model": name, "scenario": "all", "checkpointing": "-", "prompt_tokens": None, "counted": "-",
                  "micro_batch": args.micro, "oom": f"out of memory loading the model: {str(err).splitlines()[0][:160]}"})
            _free("cpu" if args.dry_run else "cuda")
    print(table(rows))


if __name__ == "__main__":
    main()
