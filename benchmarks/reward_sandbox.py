"""Cost of evaluating a generated reward in the sandbox worker versus calling the same function
in-process (the reference, measured in the same run).

Per-transition calls (how ``HoldingEnv`` calls its reward) pay one pipe round trip each;
``SandboxedReward.batch`` pays one per batch. Every transition also runs the code afresh in a
new namespace (so a reward keeps no state between calls), a few µs per transition. Prints µs per transition for each and the ratios
to the in-process call, plus the one-off cost of `validate_reward_code` (worker start, load,
8 transitions evaluated three times: once, again and reversed for the behavioural purity check)
and of its parts: the static check (allowlist and purity rule) and `purity_reason` (the two extra
evaluations), medians of ``--validations`` runs. A DQN episode of case 1 makes a few thousand decisions, so per-call overhead
of tens of µs adds well under a second per episode. Run:

    .venv/bin/python benchmarks/reward_sandbox.py [--calls 5000]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from llmtraffic.bus.reward_design.sandbox import (
    SandboxedReward, Worker, example_transitions, purity_reason, static_check, validate_reward_code,
)

CODE = '''
import numpy as np

def reward(current_state, action, next_state):
    total = next_state[0] + next_state[1]
    balance = abs(next_state[0] - next_state[1]) / total if total > 0 else 0.0
    return float(-10.0 * balance - 0.5 * action - 0.01 * np.std(next_state[:4]))
'''


def per_transition_us(fn, transitions, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        s, a, n = transitions[i % len(transitions)]
        fn(s, a, n)
    return (time.perf_counter() - start) / calls * 1e6


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def validation_parts_ms(runs: int) -> tuple[float, float, float]:
    """Medians of the whole validation, the static check and the behavioural purity check."""
    states, actions, next_states = (np.array(x) for x in zip(*example_transitions()))
    whole = median_ms(lambda: validate_reward_code(CODE), runs)
    static = median_ms(lambda: static_check(CODE), runs)
    with tempfile.TemporaryDirectory() as run_dir:
        worker = Worker(CODE, run_dir)
        try:
            values = worker.evaluate(states, actions, next_states, 5.0)
            purity = median_ms(lambda: purity_reason(worker, states, actions, next_states, values, 5.0), runs)
        finally:
            worker.close()
    return whole, static, purity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--validations", type=int, default=20)
    args = parser.parse_args()
    calls = args.calls
    transitions = example_transitions()
    namespace: dict = {}
    exec(CODE, namespace)  # our own code: the in-process reference
    direct = per_transition_us(namespace["reward"], transitions, calls)

    assert validate_reward_code(CODE).ok
    validate_ms, static_ms, purity_ms = validation_parts_ms(args.validations)

    states = np.array([transitions[i % 8][0] for i in range(calls)])
    actions = np.array([transitions[i % 8][1] for i in range(calls)])
    next_states = np.array([transitions[i % 8][2] for i in range(calls)])
    with SandboxedReward(CODE) as reward:
        reward(*transitions[0])  # start the worker outside the timing
        single = per_transition_us(reward, transitions, calls)
        start = time.perf_counter()
        reward.batch(states, actions, next_states)
        batched = (time.perf_counter() - start) / calls * 1e6

    print(f"in-process call         {direct:8.2f} µs/transition  (reference)")
    print(f"sandbox, one per call   {single:8.2f} µs/transition  ratio {single / direct:6.1f}")
    print(f"sandbox, batch of {calls:<5} {batched:8.2f} µs/transition  ratio {batched / direct:6.2f}")
    print(f"validate_reward_code    {validate_ms:8.1f} ms (start worker, load, 8 transitions × 3)")
    print(f"  of which static check {static_ms:8.2f} ms (allowlist and purity rule)")
    print(f"  of which purity check {purity_ms:8.2f} ms (the batch again and reversed, same worker)")


if __name__ == "__main__":
    main()
