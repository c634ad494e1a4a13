"""Tables 1–2 of OracleTSC with 95 % confidence intervals, paired differences and claims.

An *evaluation* is the dict of :func:`llmtraffic.signal.studies.evaluate_run` (pooled over agent
seeds by :func:`llmtraffic.signal.studies.pool`, which tags each run with its ``agent_seed``).
Its independent units are the runs: agent seeds × eval seeds for a fine-tune, eval seeds for a
policy that was not trained. Every interval comes from :mod:`llmtraffic.study.stats`.

Two rules keep the tables honest:

- a row with any jammed (deadlocked) run never shows an improvement: its difference cell says
  how many runs jammed instead of a verdict;
- a row whose answers were all invalid says ``n/a``: the policy never chose, it only kept the
  current phase.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..study import claim
from ..study.stats import Estimate, mean_ci, paired_difference, verdict

METRICS = {"travel_time_s": "Travel Time", "queue": "Queue", "delay": "Delay", "throughput": "Throughput"}
"""Table 1's metrics (§4.1.2): run keys → column names."""

LOWER_IS_BETTER = {"travel_time_s": True, "queue": True, "delay": True, "throughput": False}

DIGITS = {"travel_time_s": 1, "queue": 2, "delay": 3, "throughput": 0}


def unit_key(run: dict) -> tuple[int, int]:
    """(agent seed, eval seed) of a run; an untrained policy's runs have agent seed −1."""
    return int(run.get("agent_seed", -1)), int(run["seed"])


def estimate(evaluation: dict, key: str) -> Estimate:
    """Mean and 95 % CI of ``key`` over the evaluation's runs."""
    return mean_ci([r[key] for r in evaluation["runs"]])


def paired(evaluation: dict, reference: dict, key: str, relative: bool = True) -> Estimate:
    """Paired difference ``evaluation − reference`` of ``key`` (in % of the reference with
    ``relative``): runs matched on (agent seed, eval seed) when both sides have agent seeds; a
    side without (the backbone before fine-tuning, a heuristic) is matched on the eval seed alone,
    once per run of the other side."""
    ev, ref = evaluation["runs"], reference["runs"]
    if _seeded(ev) == _seeded(ref):
        units, other, key_of = ev, ref, unit_key
    else:  # the agent-seeded side's runs are the units; the other side is looked up by eval seed
        units, other = (ev, ref) if _seeded(ev) else (ref, ev)
        key_of = lambda r: r["seed"]  # noqa: E731
    by_key = {key_of(r): r[key] for r in other}
    pairs = []
    for run in units:
        k = key_of(run)
        if k not in by_key:
            raise ValueError(f"paired: no run matches {k} (agent seed, eval seed) on the other side")
        pairs.append((run[key], by_key[k]) if units is ev else (by_key[k], run[key]))
    return paired_difference([a for a, _ in pairs], [b for _, b in pairs], relative=relative)


def _seeded(runs: list[dict]) -> bool:
    return any("agent_seed" in r for r in runs)


def jammed(evaluation: dict) -> int:
    """How many runs deadlocked."""
    return int(sum(bool(r["deadlock"]) for r in evaluation["runs"]))


def all_invalid(evaluation: dict) -> bool:
    """Every answer of every run named no phase (the policy only ever kept the current phase)."""
    return all(r.get("invalid_rate", 0.0) >= 1.0 for r in evaluation["runs"])


def difference_cell(evaluation: dict, reference: dict, key: str = "queue") -> str:
    """``"−12.3 ± 4.1 % (better)"``; a jammed row (either side) or an all-invalid one never shows
    a verdict."""
    if all_invalid(evaluation) or all_invalid(reference):
        return "n/a (100 % invalid answers)"
    stuck = jammed(evaluation) + jammed(reference)
    if stuck:
        return f"not compared: {stuck} jammed run(s)"
    d = paired(evaluation, reference, key)
    return f"{d.format(1)} ({verdict(d, LOWER_IS_BETTER[key])})"


def metric_cells(evaluation: dict) -> dict[str, str]:
    """``"12.34 ± 0.56"`` per metric (95 % CI half-width), invalid answers and jammed runs."""
    if all_invalid(evaluation):
        cells = {name: "n/a (100 % invalid answers)" for name in METRICS.values()}
    else:
        cells = {name: estimate(evaluation, key).format(DIGITS[key]) for key, name in METRICS.items()}
    cells["Invalid answers"] = f"{100 * np.mean([r.get('invalid_rate', 0.0) for r in evaluation['runs']]):.1f} %"
    cells["Jammed"] = f"{jammed(evaluation)}/{len(evaluation['runs'])}"
    cells["n"] = str(len(evaluation["runs"]))
    return cells


def ci_table(rows: dict[str, dict], reference: str | None = None, key: str = "queue",
             shared: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per named evaluation (or ``{"unavailable": reason}``): metrics with CIs, and the
    paired difference of ``key`` against the row named ``reference``.

    ``shared`` names, per row, another table's row that is the same run (e.g. the default
    hurdle of Table 1 and Fig. 9), so a reader never takes two names for two runs.
    """
    ref = rows.get(reference) if reference else None
    ref_ok = ref is not None and "unavailable" not in ref
    column = f"Δ {METRICS[key].lower()} vs {reference}" if reference else None
    out = {}
    for name, evaluation in rows.items():
        if "unavailable" in evaluation:
            out[name] = {c: evaluation["unavailable"] for c in (*METRICS.values(), "Invalid answers", "Jammed", "n")}
            if column:
                out[name][column] = evaluation["unavailable"]
        else:
            out[name] = metric_cells(evaluation)
            if column:
                out[name][column] = "—" if name == reference or not ref_ok else difference_cell(evaluation, ref, key)
        if shared and name in shared:
            out[name]["Same run as"] = shared[name]
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("Method").fillna("")


def comparison(evaluation: dict, reference: dict, key: str = "queue") -> Estimate | None:
    """The paired relative difference behind a claim, or None where it must not be judged
    (unavailable, jammed or all-invalid rows)."""
    for e in (evaluation, reference):
        if "unavailable" in e or all_invalid(e) or jammed(e):
            return None
    return paired(evaluation, reference, key)


def why_not(evaluation: dict, reference: dict) -> str:
    """What a claim that :func:`comparison` could not judge needs."""
    for e in (evaluation, reference):
        if "unavailable" in e:
            return e["unavailable"]
    if any(all_invalid(e) for e in (evaluation, reference)):
        return "a policy that names a phase (100 % invalid answers)"
    return "runs without a deadlock (jammed runs are not compared)"


def shaping_claim(id: str, where: str, statement: str, shaped: dict, plain: dict, controls: dict[str, dict],
                  link: str, paper_value: float | None = None, key: str = "queue"):
    """Record that a reward shaping beats the plain reward (the paper's claim, judged on the
    paired difference shaped − plain of ``key`` in %), with a note on each control it does or
    does not beat. Returns the recorded :class:`~llmtraffic.study.claims.Claim`."""
    ours = comparison(shaped, plain, key)
    notes = []
    for name, control in controls.items():
        d = comparison(shaped, control, key)
        notes.append(f"vs {name}: " + ("not judged" if d is None else f"{d.format(1)} ({verdict(d, LOWER_IS_BETTER[key])})"))
    return claim(id, "tsc", where, statement, quantity=f"{METRICS[key].lower()}, shaped − plain reward (%)", link=link,
          ours=ours, paper_value=paper_value, direction=-1 if LOWER_IS_BETTER[key] else 1,
          needs="" if ours is not None else why_not(shaped, plain), note="; ".join(notes))

