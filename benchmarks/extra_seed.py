"""What one more training seed costs at ``quick`` (issue 35: every RL or LLM row that backs a
claim has at least 5 training seeds at ``quick``).

Two numbers:

1. **Measured**: one case-1 agent at the ``quick`` DQN budget (RL-global reward, validated on
   ``val_seeds`` 200–202, trained uncached with a seed no notebook uses), wall and CPU seconds in
   this process with one torch thread. ``bus_case1`` trains 6 such agents per agent seed (RL-local,
   RL-global, App. B, RL-local and RL-global under the authors' dwell, and the loop's final reward
   per variant) plus the loop's candidates.
2. **Bound from the last run**: per notebook, its ``quick`` seconds in ``figures/run.json`` times
   ``new / old − 1``, ``old`` the training seeds of the commit that run used (its ``quick.yaml``,
   else the notebook's default) and ``new`` today's, as if all of its time scaled with the seeds
   (it does not: fixed controllers, the baselines' evaluation and the cached pieces shared between
   notebooks do not), so an upper bound.

Run:

    .venv/bin/python benchmarks/extra_seed.py [--skip-train]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH_TIMEOUT_S = 600  # one quick agent: 21 s CPU, about 70 s on the shared 2-core machine


def measure_agent(seed: int = 9001) -> tuple[float, float]:
    """Wall and CPU seconds of one validated case-1 agent at the ``quick`` budget."""
    from llmtraffic.bus import scenarios
    from llmtraffic.bus.jobs import dqn_config
    from llmtraffic.bus.training import budget, train_validated

    cfg = dqn_config(budget("quick"), seed)
    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    train_validated(scenarios.case1(), "rl_global", cfg, [200, 201, 202], horizon_s=4 * 3600.0, val_horizon_s=4 * 3600.0)
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu


def seeds(stem: str, commit: str = "") -> int:
    """Training seeds of ``stem`` at ``quick``: its ``quick.yaml`` (at ``commit``), else the notebook's default."""
    from llmtraffic.study.params import notebook_parameters

    path = f"params/{stem}/quick.yaml"
    text = (subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True).stdout
            if commit else (ROOT / path).read_text())
    found = (yaml.safe_load(text) or {}).get("agent_seeds")
    if found is None:
        default = notebook_parameters(ROOT / "notebooks" / f"{stem}.ipynb").get("agent_seeds")
        found = default.default if default is not None else []
    return len(found)


def bounds() -> list[tuple[str, float, int, int, float]]:
    """(notebook, quick seconds of the last run, its training seeds, today's, added seconds at most)."""
    notebooks = json.loads((ROOT / "figures" / "run.json").read_text())["notebooks"]
    out = []
    for stem, run in sorted(notebooks.items(), key=lambda kv: -kv[1]["seconds"]):
        old, new = seeds(stem, run["commit"]), seeds(stem)
        if new > old > 0:
            out.append((stem, run["seconds"], old, new, run["seconds"] * (new / old - 1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-train", action="store_true", help="only the bound from figures/run.json")
    args = parser.parse_args()
    if not args.skip_train:
        wall, cpu = measure_agent()
        print(f"one quick case-1 agent (RL-global, validated): {wall:.1f} s wall, {cpu:.1f} s CPU")
    rows = bounds()
    print(f"{'notebook':<26}{'last quick (s)':>15}{'seeds then':>12}{'now':>5}{'added at most (s)':>19}")
    for stem, seconds, old, new, added in rows:
        print(f"{stem:<26}{seconds:>15.0f}{old:>12}{new:>5}{added:>19.0f}")
    print(f"{'total':<26}{sum(r[1] for r in rows):>15.0f}{'':>17}{sum(r[4] for r in rows):>19.0f}")


if __name__ == "__main__":
    main()
