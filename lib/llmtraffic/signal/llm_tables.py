"""Tables 1–2 of OracleTSC with 95 % confidence intervals, paired differences and claims.

An *evaluation* is the dict of :func:`llmtraffic.signal.llm_jobs.evaluate_run` (pooled over agent
seeds by :func:`llmtraffic.signal.llm_jobs.pool`, which tags each run with its ``agent_seed``).
Its independent runs are its trained agents, each the mean over its eval seeds (a fine-tune, a
deep-RL row), or its eval seeds for a policy that was not trained. Two trained rows pair by agent
seed, a trained row against an untrained one on its agents (:func:`llmtraffic.study.stats.compare`).
Every interval comes from :mod:`llmtraffic.study.stats`; :func:`ci_table` leaves its estimates in
``table.attrs["estimates"]`` for the sidecar.

Two rules keep the tables honest:

- a row with any jammed (deadlocked) run never shows an improvement: its difference cell says
  how many runs jammed instead of a verdict;
- a row whose answers were all invalid says ``n/a``: the policy never chose, it only kept the
  current phase.

Below the interval tables: plain means per evaluation (:func:`summarize`, used by the one-setting
sweeps), Table 2's reward labels, Fig. 4's share above the hurdle, the cross-answer agreement
(Q3) and reasoning-trace tables, and the paper's own cells as a table of their own.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..study import claim, stats
from ..study.stats import Estimate, verdict
from .oracle import RewardConfig

METRICS = {"travel_time_s": "Travel Time", "queue": "Queue", "delay": "Delay", "throughput": "Throughput"}
"""Table 1's metrics (§4.1.2): run keys → column names."""

LOWER_IS_BETTER = {"travel_time_s": True, "queue": True, "delay": True, "throughput": False}

DIGITS = {"travel_time_s": 1, "queue": 2, "delay": 3, "throughput": 0}


def frame(evaluation: dict, key: str) -> pd.DataFrame:
    """The evaluation's runs as long rows (``agent_seed``: NaN for an untrained policy, ``seed``, ``key``)."""
    rows = [{"agent_seed": float(r["agent_seed"]) if r.get("agent_seed", -1) is not None and r.get("agent_seed", -1) >= 0
             else math.nan, "seed": int(r["seed"]), key: float(r[key])} for r in evaluation["runs"]]
    return pd.DataFrame(rows, columns=["agent_seed", "seed", key])


def estimate(evaluation: dict, key: str) -> Estimate:
    """Mean and 95 % CI of ``key`` over the evaluation's independent runs (trained agents, or eval seeds)."""
    return stats.estimate(frame(evaluation, key), key)


def units(evaluation: dict) -> str:
    """What n counts for the evaluation: ``"3 agents (× 3 episodes each)"`` or ``"3 eval seeds"``."""
    return stats.unit_of(frame(evaluation, "queue"))


def paired(evaluation: dict, reference: dict, key: str, relative: bool = True) -> Estimate:
    """Difference ``evaluation − reference`` of ``key`` over independent runs (in % of the
    reference's mean with ``relative``), paired by :func:`llmtraffic.study.stats.compare`."""
    return stats.compare(frame(evaluation, key), frame(reference, key), key, relative)


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
    cells["n"] = units(evaluation)
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
    out, found = {}, {}
    for name, evaluation in rows.items():
        if "unavailable" in evaluation:
            out[name] = {c: evaluation["unavailable"] for c in (*METRICS.values(), "Invalid answers", "Jammed", "n")}
            if column:
                out[name][column] = evaluation["unavailable"]
        else:
            out[name] = metric_cells(evaluation)
            if not all_invalid(evaluation):
                found |= {f"{name} / {title}": estimate(evaluation, k) for k, title in METRICS.items()}
            if column:
                apart = None if name == reference or not ref_ok else unpairable(evaluation, ref)
                out[name][column] = "—" if name == reference or not ref_ok else apart or difference_cell(evaluation, ref, key)
                d = None if name == reference or not ref_ok or apart else comparison(evaluation, ref, key)
                if d is not None:
                    found[f"{name} / {column}"] = d
        if shared and name in shared:
            out[name]["Same run as"] = shared[name]
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis("Method").fillna("")
    table.attrs["estimates"] = found
    return table


def unpairable(evaluation: dict, reference: dict) -> str | None:
    """Why two untrained rows cannot be compared run by run (other episode lengths, other eval
    seeds), or None. A trained row pairs with an untrained one on its own seeds."""
    if evaluation.get("episode_s") != reference.get("episode_s"):
        return f"— ({evaluation.get('episode_s')}-s episodes)"
    trained = any(r.get("agent_seed") is not None for r in evaluation["runs"])
    seeds, theirs = {r["seed"] for r in evaluation["runs"]}, {r["seed"] for r in reference["runs"]}
    if not trained and seeds != theirs or trained and not seeds <= theirs:
        return f"— (eval seeds {sorted(seeds)})"
    return None


def comparison(evaluation: dict, reference: dict, key: str = "queue") -> Estimate | None:
    """The paired relative difference behind a claim, or None where :func:`judged` finds none
    (unavailable, jammed or all-invalid rows)."""
    return judged(evaluation, reference, key).get("ours")


def judged(evaluation: dict, reference: dict, key: str = "queue") -> dict:
    """A claim's keywords for ``evaluation`` against ``reference``: ``ours``, the paired difference
    (:func:`paired`), or why there is none. ``needs`` when a row did not run ("not run");
    ``finding`` when both ran and left nothing to compare ("no result"): every answer named no
    phase, or runs deadlocked (a jammed network's queue is capped, so no difference is read)."""
    for e in (evaluation, reference):
        if "unavailable" in e:
            return {"needs": e["unavailable"]}
    sides = (("ours", evaluation), ("the reference", reference))
    silent = [name for name, e in sides if all_invalid(e)]
    if silent:
        return {"finding": f"every answer named no phase ({' and '.join(silent)}): nothing to compare"}
    if any(jammed(e) for _, e in sides):
        counts = ", ".join(f"{name} {jammed(e)} of {len(e['runs'])} runs" for name, e in sides)
        return {"finding": f"deadlocked runs are not compared ({counts})"}
    return {"ours": paired(evaluation, reference, key)}


def shaping_claim(id: str, where: str, statement: str, shaped: dict, plain: dict, controls: dict[str, dict],
                  link: str, paper_value: float | None = None, key: str = "queue", **extra):
    """Record that a reward shaping beats the plain reward (the paper's claim, judged on the
    paired difference shaped − plain of ``key`` in %), with a note on each control it does or
    does not beat; ``extra`` goes to the claim (``headline=True``). Returns the recorded
    :class:`~llmtraffic.study.claims.Claim`."""
    notes = []
    for name, control in controls.items():
        d = comparison(shaped, control, key)
        notes.append(f"vs {name}: " + ("not judged" if d is None else f"{d.format(1)} ({verdict(d, LOWER_IS_BETTER[key])})"))
    return claim(id, "tsc", where, statement, quantity=f"{METRICS[key].lower()}, shaped − plain reward (%)", link=link,
          paper_value=paper_value, direction=-1 if LOWER_IS_BETTER[key] else 1, note="; ".join(notes),
          **judged(shaped, plain, key), **extra)


# ----------------------------------------------------------------------------- labels and the paper's cells

PAPER_ABLATION_SCENARIO = "hangzhou1x1"
"""The paper runs its ablations (Tables 2, 4–7, 11–12, Figs. 8–9) on CityFlow 1x1: hangzhou1x1 here."""


def incomparable(backbone: str, paper_backbone: str, scenario: str, paper_scenario: str = PAPER_ABLATION_SCENARIO,
                 episode_s: int = 3600) -> str:
    """Why our cells cannot carry a Δ against the paper's, or ``""`` when they can: the same
    backbone, the same intersection (and so the paper's simulator: CityFlow for ``hangzhou1x1``,
    SUMO for ``cologne1``) and the paper's 3,600-s episodes."""
    reasons = [f"backbone {backbone}, not {paper_backbone}" if backbone != paper_backbone else "",
               f"intersection {scenario}, not {paper_scenario}" if scenario != paper_scenario else "",
               f"{episode_s}-s episodes, not 3600-s" if episode_s != 3600 else ""]
    return "; ".join(r for r in reasons if r)


def save_against_paper(table: pd.DataFrame, name: str, paper: dict | None, caption: str, reason: str,
                       descriptive: bool = False) -> None:
    """Save ``table`` (``descriptive``: a table without a comparison, e.g. a one-seed sweep); with
    the paper's cells beside ours (and a Δ) only when ``reason`` is empty, else the paper's cells
    as a descriptive table of their own, ``<name>_paper``, captioned with the reason."""
    from .. import study

    study.save_table(table, name, paper=paper if paper and not reason else None, caption=caption, descriptive=descriptive)
    if paper and reason:
        study.save_table(paper_reference(paper), f"{name}_paper", descriptive=True,
                         caption=f"The paper's values for {name}, for reference only (no Δ: {reason})")


def paper_reference(paper: dict) -> pd.DataFrame:
    """The paper's cells ``{column: {row: value}}`` as a table of their own."""
    return pd.DataFrame(paper)


# ----------------------------------------------------------------------------- evaluation


def summarize(evaluation: dict) -> dict[str, float]:
    """Means over the evaluation seeds of Table 1's metrics, the invalid-answer share, the mean
    cross-answer agreement and entropy, and the count of deadlocked runs."""
    runs = evaluation["runs"]
    out = {k: float(np.mean([r[k] for r in runs])) for k in (*METRICS, "travel_time_all_s", "invalid_rate")}
    out["deadlocks"] = int(sum(r["deadlock"] for r in runs))
    out["runs"] = len(runs)
    if evaluation.get("agreement"):
        out["modal_share"] = float(np.mean([a["modal_share"] for a in evaluation["agreement"]]))
        out["entropy"] = float(np.mean([a["entropy"] for a in evaluation["agreement"]]))
    return out


def _fmt(key: str, value: float) -> str:
    return f"{value:.0f}" if key == "throughput" else f"{value:.2f}"


def change_cells(after: dict, before: dict | None = None) -> dict[str, str]:
    """Table 1-style cells of an evaluation: ``"12.34"``, or ``"12.34 (−45%)"`` against ``before``;
    plus ``Invalid answers`` and ``Deadlocks`` columns."""
    ours = summarize(after)
    ref = summarize(before) if before is not None else None
    cells = {}
    for key, name in METRICS.items():
        text = _fmt(key, ours[key])
        if ref is not None and ref[key] != 0 and math.isfinite(ref[key]):
            text += f" ({100 * (ours[key] - ref[key]) / abs(ref[key]):+.0f}%)".replace("-", "−")
        cells[name] = text
    cells["Invalid answers"] = f"{100 * ours['invalid_rate']:.1f}%"
    cells["Deadlocks"] = f"{ours['deadlocks']}/{ours['runs']}"
    return cells


def unavailable_cells(reason: str) -> dict[str, str]:
    """The cells of a row that cannot be computed here."""
    return {name: reason for name in (*METRICS.values(), "Invalid answers", "Deadlocks")}


def reward_label(reward: dict) -> str:
    """Table 2's name of a decision reward (eq. 14 and its ablations)."""
    r = RewardConfig(**reward)
    base = "R_env" if r.env == "queue_diff" else "R_q (eq. 15)"
    if r.hurdle:
        base += f" − H_R(={r.hurdle:g})"
    if r.entropy == "softmax":
        base += f" + w·R_E (softmax DSE, τ={r.tau:g})"
    elif r.entropy == "naive":
        base += " + w·R_E (naive DSE)"
    if r.entropy != "none" and r.w_e != 1:
        base = base.replace("w·", f"{r.w_e:g}·")
    return base


def share_above(evaluation: dict, hurdle: float) -> float:
    """Share of decisions whose queue difference R_env (eq. 7) exceeds ``hurdle`` (Fig. 4)."""
    values = np.concatenate([r["r_env"] for r in evaluation["runs"]])
    return float(np.mean(values > hurdle)) if values.size else float("nan")


def results_table(rows: dict[str, tuple[dict, dict | None]]) -> pd.DataFrame:
    """Table 1/2 layout: row name → (evaluation, reference evaluation or None).

    A row cites its change against the reference (``"12.34 (−45%)"``); an evaluation that is
    ``{"unavailable": reason}`` fills the row with the reason.
    """
    cells = {}
    for name, (evaluation, reference) in rows.items():
        if "unavailable" in evaluation:
            cells[name] = unavailable_cells(evaluation["unavailable"])
        else:
            usable = reference if reference is not None and "unavailable" not in reference else None
            cells[name] = change_cells(evaluation, usable)
    return pd.DataFrame.from_dict(cells, orient="index").rename_axis("Method")


def agreement_table(evaluations: dict[str, dict]) -> pd.DataFrame:
    """Cross-answer agreement (Q3) per named evaluation: probes, mean share of the modal phase,
    mean distinct phases, mean semantic entropy (nats), share of answers without a phase, and
    where recorded the entropy of identical texts (what clustering by text would give)."""
    out = {}
    for name, evaluation in evaluations.items():
        probes = pd.DataFrame(evaluation["agreement"])
        out[name] = {"probes": len(probes), "modal share": probes["modal_share"].mean(),
                     "distinct phases": probes["distinct"].mean(), "entropy (nats)": probes["entropy"].mean(),
                     "answers without a phase": probes["invalid"].mean()}
        if "text_entropy" in probes:
            out[name]["text entropy (nats)"] = probes["text_entropy"].mean()
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("Policy").round(3)


def traces_table(evaluations: dict[str, dict], prompt_chars: int = 400) -> pd.DataFrame:
    """The kept reasoning traces (Listings 1–2): per named evaluation and probe, the prompt
    (its last ``prompt_chars`` characters) and the G answers with the phase each names; an
    empty table when there are none (every backbone unavailable)."""
    rows = []
    for name, evaluation in evaluations.items():
        for trace in evaluation.get("traces", []):
            prompt = trace["prompt"]
            rows.append({"policy": name, "decision": trace["decision"],
                         "prompt": prompt if len(prompt) <= prompt_chars else "…" + prompt[-prompt_chars:],
                         "answers": " ‖ ".join(repr(a) for a in trace["answers"]),
                         "phases": ", ".join(p or "—" for p in trace["phases"])})
    return pd.DataFrame(rows, columns=["policy", "decision", "prompt", "answers", "phases"]).set_index(["policy", "decision"])


def change_text(evaluation: dict, reference: dict, key: str = "queue") -> str:
    """``"queue 12.00 vs 20.00 (−40 %), invalid answers 1.5 %"``: plain means of one training run
    against a reference (the sweeps' readings), or why there is none."""
    if "unavailable" in evaluation or "unavailable" in reference:
        return f"not run ({evaluation.get('unavailable') or reference.get('unavailable')})"
    if all_invalid(evaluation):
        return "n/a (100 % invalid answers: the policy only ever kept the current phase)"
    a, b = summarize(evaluation), summarize(reference)
    change = f" ({100 * (a[key] - b[key]) / b[key]:+.0f} %)" if b[key] else ""
    return f"{key} {a[key]:.2f} vs {b[key]:.2f}{change}, invalid answers {100 * a['invalid_rate']:.1f} %"
