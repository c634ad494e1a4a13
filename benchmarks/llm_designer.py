"""The bus reward designer on a local llama.cpp server: server start-up time, seconds and tokens per
request, and the valid-code share of the initializer's answers per model and decoding (``free``,
the paper's; ``grammar`` and ``structured``, the variants beyond it, ``bus.reward_design.decoding``).

Each sample is one seeded request with the case-1 initializer prompt (App. A.1); an answer is valid
when ``validate_reward_code`` accepts the code taken from it. Requests go through a cassette under
``<runs>/llm/benchmark-<model>.jsonl``, so a second run replays what the first one asked. Run:

    .venv/bin/python benchmarks/llm_designer.py --model smollm2-135m --samples 4 [--decodings free grammar structured]
"""

from __future__ import annotations

import argparse
import time

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design import decoding as dec, prompts
from llmtraffic.bus.reward_design.extract import extract_code
from llmtraffic.bus.reward_design.sandbox import example_transitions, validate_reward_code
from llmtraffic.llm import from_config
from llmtraffic.llm.local import stop_all


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decodings", nargs="+", default=list(dec.DECODINGS), choices=dec.DECODINGS)
    args = parser.parse_args()
    setting = prompts.Setting.of(scenarios.case1())
    examples = example_transitions(setting.state_dim)
    llm = from_config({"backend": "local", "model": args.model, "threads": args.threads,
                       "cache": {"path": f"llm/benchmark-{args.model}.jsonl"}})
    try:
        for decoding in args.decodings:
            valid, reasons = 0, []
            for seed in range(args.samples):
                before, start = llm.usage(), time.perf_counter()
                code, _ = sample(llm, setting, decoding, seed, args.max_tokens)
                after = llm.usage()
                check = validate_reward_code(code, transitions=examples)
                valid += check.ok
                reasons.append(check.reason[:60])
                print(f"{args.model} {decoding} seed {seed}: {time.perf_counter() - start:.1f} s, "
                      f"{after.prompt_tokens - before.prompt_tokens} prompt + "
                      f"{after.completion_tokens - before.completion_tokens} completion tokens, "
                      f"{'valid' if check.ok else 'invalid: ' + check.reason[:80]}", flush=True)
            print(f"== {args.model} {decoding}: {valid} of {args.samples} valid", flush=True)
        server = llm.backend.server
        if server.startup_s:
            print(f"server start-up: {server.startup_s:.1f} s")
    finally:
        stop_all()


if __name__ == "__main__":
    main()
