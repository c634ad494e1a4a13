"""The bus reward designer on a local llama.cpp server, in two parts.

``--roles``: seconds per designer request by role (initializer, analyzer, modifier, refiner) of the
study's own server (``llm.local``) under several configurations, interleaved in one run so that
they share the machine's load: ``today`` (the ``quick`` settings before the levers: one thread,
700-token answers, the prompt's logits kept, no prompt-state cache), ``new`` (per-role answer caps,
no prompt logits, a prompt-state cache that keeps the constant prefix across a design run's
requests) and ``lookup`` (the caps and prompt-lookup speculative decoding, which needs the prompt's
logits and does not combine with the cache); ``fenced`` (``new`` with the code roles' answers ended at
their code block's closing fence) on request. The prompts are one
replayed case-1 design run built from the prompts module (App. A) around real trials: the RL-local
expert reward and a modified one, each trained at the smoke DQN budget and tested on the design
seeds. Each request is streamed: prefill tokens/s is the prompt's tokens over the time to the first
answer token (what a request pays, prefix reuse included), decode tokens/s the answer's further
tokens over the rest. Code answers are checked with ``validate_reward_code``. Run:

    .venv/bin/python benchmarks/llm_designer.py --roles --model qwen2.5-coder-1.5b --samples 2

Without ``--roles`` (the default; ``make bench`` runs ``--roles``, see ``BENCH_ARGS``): server start-up time, seconds and
tokens per request, and the valid-code share of the initializer's answers per model and decoding
(``free``, the paper's; ``grammar`` and ``structured``, the variants beyond it,
``bus.reward_design.decoding``). Requests go through a cassette under
``<runs>/llm/benchmark-<model>.jsonl``, so a second run replays what the first one asked:

    .venv/bin/python benchmarks/llm_designer.py --model smollm2-135m --samples 4 [--decodings free grammar structured]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import httpx

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design import decoding as dec, prompts
from llmtraffic.bus.reward_design.candidates import DesignSetup, expert_code, train_and_test
from llmtraffic.bus.reward_design.extract import extract_code
from llmtraffic.bus.reward_design.sandbox import example_transitions, validate_reward_code
from llmtraffic.bus.training import budget
from llmtraffic.llm import from_config
from llmtraffic.llm.local import LocalConfig, LocalServer, alias, stop_all
from llmtraffic.rl.dqn import DQNConfig

ROLES = ("initializer", "analyzer", "modifier", "refiner")
CAPS = {"initializer": 600, "analyzer": 200, "modifier": 600, "refiner": 600, "repair": 600}
"""The ``new`` answer caps per role (the quick profile's ``llm_max_tokens``)."""
# `make bench` times one request per role before the levers (`today`), with them (`new`) and as `quick`
# runs the code roles (`fenced`); the trials train at the smoke budget first.
BENCH_ARGS = ["--roles", "--configs", "today", "new", "fenced", "--samples", "1"]
BENCH_TIMEOUT_S = 2400

CONFIGS = {
    "today": (dict(threads=1), 700),
    "new": (dict(threads=1, prompt_logits=False, prefix_cache_mb=512), CAPS),
    "lookup": (dict(threads=1, draft=10), CAPS),  # the prompt cache does not combine with it (LocalConfig)
    "fenced": (dict(threads=1, prompt_logits=False, prefix_cache_mb=512), CAPS, "fenced"),
}
"""Configuration → (``LocalConfig`` fields besides the model, answer cap: one for all roles or per role[,
the code roles' decoding: ``fenced`` ends an answer at its code block's closing fence])."""
ONLY = {"lookup": ("modifier", "refiner"), "fenced": ("initializer", "modifier", "refiner")}
"""Configurations measured on some roles only: prompt lookup pays where the answer copies the prompt's code."""

ANALYSIS = (
    "1. Convergence: the training return rises over the first episodes and then fluctuates without a clear trend, "
    "so training has roughly converged but the signal is noisy.\n"
    "2. Test behaviour: the agents hold mostly when the forward headway is short, which is right, but they also "
    "hold buses whose backward headway is already short, which pushes the follower closer. Holding time per stop "
    "is moderate and the headway standard deviation is still high.\n"
    "Possible causes: the reward only scores the headway difference after the step, so it does not credit the "
    "improvement an action makes; the holding penalty is constant and ignores the passengers on board.\n"
    "Suggestions: reward the reduction of the headway imbalance between the current and the next state, scale the "
    "holding penalty with the number of passengers on board, and keep all terms of a similar magnitude.")
"""The modifier's fixed analysis (the same text for every configuration, so the prompts agree)."""

MODIFIED = '''import math

def reward(current_state, action, next_state):
    # balance: the imbalance between forward and backward headways after the step (RL-local's term)
    f, b = next_state[0], next_state[1]
    total = f + b
    imbalance = abs(f - b) / total if total > 0 else 1.0
    # credit the imbalance this step removed
    f0, b0 = current_state[0], current_state[1]
    total0 = f0 + b0
    before = abs(f0 - b0) / total0 if total0 > 0 else 1.0
    r = -100.0 * imbalance + 50.0 * (before - imbalance)
    # holding delays the passengers on board
    if action == 1:
        r -= 0.5 + 0.01 * next_state[2]
    return float(r)
'''
"""A modified reward (the second design-run step's current reward, and the refiner's failed one)."""


def design_run_prompts(samples: int) -> list[tuple[str, list[dict]]]:
    """(role, messages) of ``samples`` rounds of a warm-start case-1 design run: initializer,
    analyzer, modifier, refiner, with the current reward alternating between the expert and the
    modified one, around trials trained at the smoke DQN budget."""
    scenario = scenarios.case1()
    setting = prompts.Setting.of(scenario)
    setup = DesignSetup(scenario, DQNConfig(**budget("smoke")), design_seeds=[100, 101, 102])
    expert = expert_code(scenario.state_dim)
    trials = {code: train_and_test(setup, code).trial for code in (expert, MODIFIED)}
    out = []
    for i in range(samples):
        code, other = (expert, MODIFIED) if i % 2 == 0 else (MODIFIED, expert)
        t, o = trials[code], trials[other]
        out += [("initializer", prompts.initializer(setting)),
                ("analyzer", prompts.analyzer(setting, code, t.curve, t.metrics, t.transitions)),
                ("modifier", prompts.modifier(setting, code, ANALYSIS)),
                ("refiner", prompts.refiner(setting, other, o.metrics, code, t.metrics))]
    return out


def count_tokens(server: LocalServer, text: str) -> int:
    r = httpx.post(f"http://127.0.0.1:{server.port}/extras/tokenize/count", json={"input": text}, timeout=60)
    r.raise_for_status()
    return int(r.json()["count"])


def chat_text(messages: list[dict]) -> str:
    """The ChatML text Qwen2.5's template makes of ``messages`` (to count the prompt's tokens)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def streamed(server: LocalServer, messages: list[dict], max_tokens: int, seed: int, stop: list[str] | None = None) -> dict:
    """One streamed request: wall s, time to the first answer token, answer chunks and text."""
    body = {"model": server.alias, "messages": messages, "temperature": 0.7, "max_tokens": max_tokens,
            "seed": seed, "stream": True, **({"stop": stop} if stop else {})}
    start = time.perf_counter()
    first, chunks, text = None, 0, []
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0].get("delta", {}).get("content")
            if delta:
                first = first or time.perf_counter()
                chunks += 1
                text.append(delta)
    end = time.perf_counter()
    return {"wall_s": end - start, "ttft_s": (first or end) - start, "decode_s": end - (first or end),
            "chunks": chunks, "text": "".join(text)}


def roles_benchmark(model: str, samples: int, configs: list[str], roles: tuple[str, ...] = ROLES) -> None:
    requests = design_run_prompts(samples)
    examples = example_transitions(scenarios.case1().state_dim)
    servers = {}
    began = time.perf_counter()
    for name in configs:
        fields = CONFIGS[name][0]
        servers[name] = LocalServer(LocalConfig(model=model, **fields), alias(model))
        servers[name].start()
        print(f"server {name} {fields}: started in {servers[name].startup_s:.1f} s", flush=True)
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (2 cores)", flush=True)
    rows = []
    for i, (role, messages) in enumerate(requests):
        order = configs[i % len(configs):] + configs[:i % len(configs)]  # rotate who goes first
        for name in order:
            if role not in ONLY.get(name, ROLES) or role not in roles:
                continue
            server, cap = servers[name], CONFIGS[name][1]
            cap = cap[role] if isinstance(cap, dict) else cap
            fenced = role != "analyzer" and CONFIGS[name][2:] == ("fenced",)
            r = streamed(server, messages, cap, seed=i, stop=[dec.FENCE_END] if fenced else None)
            prompt = count_tokens(server, chat_text(messages))
            answer = count_tokens(server, r["text"]) if r["text"] else 0
            valid = ""
            if role != "analyzer":
                check = validate_reward_code(extract_code(r["text"]), transitions=examples)
                valid = "valid" if check.ok else "invalid: " + check.reason[:50]
            row = {"config": name, "role": role, "request": i, "prompt_tokens": prompt, "answer_tokens": answer,
                   "wall_s": r["wall_s"], "prefill_tps": prompt / r["ttft_s"],
                   "decode_tps": max(r["chunks"] - 1, 0) / r["decode_s"] if r["decode_s"] > 0 else float("nan"),
                   "valid": valid}
            rows.append(row)
            print(f"{name:7s} {role:11s} #{i}: {r['wall_s']:6.1f} s, {prompt} prompt tokens at {row['prefill_tps']:.1f}/s, "
                  f"{answer} answer tokens at {row['decode_tps']:.1f}/s {valid}  (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"\nall requests: {time.perf_counter() - began:.0f} s; load average at the end {os.getloadavg()[0]:.2f}")
    print(f"\n{'role':12s} {'config':7s} {'median s':>9s} {'prefill tok/s':>14s} {'decode tok/s':>13s} "
          f"{'answer tokens':>14s} {'valid':>6s}")
    for role in (*ROLES, "all"):
        for name in configs:
            mine = [r for r in rows if r["config"] == name and (role == "all" or r["role"] == role)]
            if not mine:
                continue
            code = [r for r in mine if r["role"] != "analyzer"]
            print(f"{role:12s} {name:7s} {statistics.median(r['wall_s'] for r in mine):9.1f} "
                  f"{statistics.median(r['prefill_tps'] for r in mine):14.1f} "
                  f"{statistics.median(r['decode_tps'] for r in mine):13.1f} "
                  f"{statistics.mean(r['answer_tokens'] for r in mine):14.0f} "
                  f"{sum(r['valid'] == 'valid' for r in code):>3d}/{len(code)}")
        if "today" in configs:  # ratios of medians over the same requests
            for name in configs:
                mine = {r["request"]: r["wall_s"] for r in rows if r["config"] == name and role in ("all", r["role"])}
                base = [r["wall_s"] for r in rows if r["config"] == "today" and r["request"] in mine]
                if name != "today" and mine:
                    print(f"  {name}/today on the same {len(mine)} request(s): "
                          f"{statistics.median(mine.values()) / statistics.median(base):.2f}")


def sample(llm, setting: prompts.Setting, decoding: str, seed: int, max_tokens: int) -> tuple[str, str]:
    """One initializer answer under ``decoding``: (reward code, raw text)."""
    messages = prompts.initializer(setting)
    if decoding == "structured":
        messages = dec.with_structured_output(messages, setting.multi_line, setting.state_dim)
        [text] = llm.complete(messages, temperature=0.7, max_tokens=max_tokens, seed=seed,
                              json_schema=dec.schema(setting.multi_line, setting.state_dim))
        return dec.compile_terms(text, setting.state_dim, "benchmark"), text
    constraint = {"grammar": dec.GRAMMAR} if decoding == "grammar" else {}
    [text] = llm.complete(messages, temperature=0.7, max_tokens=max_tokens, seed=seed, **constraint)
    return extract_code(text), text


def decodings_benchmark(args) -> None:
    setting = prompts.Setting.of(scenarios.case1())
    examples = example_transitions(setting.state_dim)
    llm = from_config({"backend": "local", "model": args.model, "threads": args.threads,
                       "cache": {"path": f"llm/benchmark-{args.model}.jsonl"}})
    for decoding in args.decodings:
        valid = 0
        for seed in range(args.samples):
            before, start = llm.usage(), time.perf_counter()
            code, _ = sample(llm, setting, decoding, seed, args.max_tokens)
            after = llm.usage()
            check = validate_reward_code(code, transitions=examples)
            valid += check.ok
            print(f"{args.model} {decoding} seed {seed}: {time.perf_counter() - start:.1f} s, "
                  f"{after.prompt_tokens - before.prompt_tokens} prompt + "
                  f"{after.completion_tokens - before.completion_tokens} completion tokens, "
                  f"{'valid' if check.ok else 'invalid: ' + check.reason[:80]}", flush=True)
        print(f"== {args.model} {decoding}: {valid} of {args.samples} valid", flush=True)
    server = llm.backend.server
    if server.startup_s:
        print(f"server start-up: {server.startup_s:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: smollm2-135m, or qwen2.5-coder-1.5b with --roles")
    parser.add_argument("--samples", type=int, default=None, help="default: 4, or 2 rounds with --roles")
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decodings", nargs="+", default=list(dec.DECODINGS), choices=dec.DECODINGS)
    parser.add_argument("--roles", action="store_true", help="per-role timing of the server configurations")
    parser.add_argument("--configs", nargs="+", default=["today", "new", "lookup"], choices=list(CONFIGS))
    parser.add_argument("--only-roles", nargs="+", default=list(ROLES), choices=ROLES)
    args = parser.parse_args()
    try:
        if args.roles:
            roles_benchmark(args.model or "qwen2.5-coder-1.5b", args.samples or 2, args.configs, tuple(args.only_roles))
        else:
            args.model, args.samples = args.model or "smollm2-135m", args.samples or 4
            decodings_benchmark(args)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
