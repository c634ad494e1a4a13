"""Tables of the reward-design notebooks: means with 95 % CIs, paired differences, loop summaries, cost.

Every interval comes from :mod:`llmtraffic.study.stats`: a t-interval over independent runs, each
the mean over its evaluation episodes. A designer or loop row's run is a design run (one loop,
with its agent); a reference row's run is a trained agent. Two rows pair by seed. Rows are keyed
by their label (``DesignRun.label`` or a reference name); a row that did not run shows its
``unavailable`` reason in every cell, and a row whose loops found no valid reward shows that
outcome with its counts (:func:`reasons`). The table builders leave their estimates in
``table.attrs["estimates"]`` for the sidecar.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...study import stats
from ..evaluation import MEASURES
from ..tables import NEVER_HOLDS
from .jobs import REFERENCES, DesignRun, ReferenceRun
from .loop import ROLES


def group(runs: list[DesignRun]) -> dict[str, list[DesignRun]]:
    """Runs by row label, in first-seen order."""
    out: dict[str, list[DesignRun]] = {}
    for r in runs:
        out.setdefault(r.label, []).append(r)
    return out


def by_designer(runs: dict[str, list[DesignRun]]) -> dict[str, list[str]]:
    """Designer → its row labels, in first-seen order."""
    out: dict[str, list[str]] = {}
    for label, g in runs.items():
        out.setdefault(g[0].designer, []).append(label)
    return out


def eval_frame(runs: dict[str, list[DesignRun]], references: list[ReferenceRun] = ()) -> pd.DataFrame:
    """One row per (method label, agent seed, evaluation episode) with the measures and ``noun``,
    what one run of the row is (a design run, or a reference's trained agent)."""
    rows = [{"method": label, "agent_seed": r.seed, "noun": "design run", **row}
            for label, g in runs.items() for r in g if r.counted for row in r.eval_rows]
    return pd.DataFrame(rows + reference_rows(references))


def reference_rows(references: list[ReferenceRun], learned: bool = True) -> list[dict]:
    """The references' evaluation rows: the expert-reward agent's per agent seed (``learned``), and
    the fixed controllers' (no holding, feedback) once per eval seed, without an agent seed: every
    reference run plays them on the same eval seeds, so their runs are the eval seeds, not copies
    of them per agent seed."""
    expert = REFERENCES[2]
    rows = [{"agent_seed": ref.seed, "noun": "agent", **row}
            for ref in references for row in ref.eval_rows if learned and row["method"] == expert]
    if references:
        rows += [{"agent_seed": math.nan, "noun": "eval seed", **row} for row in references[0].eval_rows
                 if row["method"] != expert]
    return rows


def _noun(g: pd.DataFrame) -> str:
    return str(g["noun"].iloc[0]) if "noun" in g and len(g) else "agent"


def _rows(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    g = frame[frame["method"] == label]
    if g.empty:
        raise ValueError(f"no rows for {label!r}; have {sorted(frame['method'].unique())}")
    return g


def reasons(runs: dict[str, list[DesignRun]], kept: bool = True) -> dict[str, str]:
    """Label → why the row has no result: it did not run (``unavailable``), or none of its runs
    has a final reward to evaluate (``no valid reward from <model> in K tries``, with the counts).
    A design run that kept its start (:attr:`~.jobs.DesignRun.kept`) has its start's result;
    ``kept=False`` judges a row by its designer's rewards alone (a comparison of designers)."""
    out = {}
    for label, g in runs.items():
        if all(r.unavailable for r in g):
            out[label] = g[0].unavailable
        elif not any(r.counted if kept else r.has_reward for r in g):
            out[label] = no_reward(g)
    return out


def kept_start(g: list[DesignRun]) -> str:
    """Why a row of loops that all ended on their given start (the warm start: a reward the
    designer did not write) is no result of the designer: its agents are the start's agents again,
    equal to that reward's own row by construction. Empty when some loop accepted a written reward,
    or when the row's runs started from the designer's own first reward (a cold start that kept the
    trivial start has a result of its own, that start's)."""
    ran = [r for r in g if r.counted]
    given = all(r.outcome.steps and not r.outcome.steps[0].written for r in ran)
    if not ran or len(ran) < len(g) or not given or any(s.accepted and s.written for r in ran for s in r.outcome.steps):
        return ""
    valid = sum(s.written and s.ok for r in ran for s in r.outcome.steps)
    return (f"every loop ({len(ran)} of {len(g)}) kept its given start: the designer's {valid} valid candidate(s) "
            "were all rejected by the refiner or none was written, so the row's agents are the start's own, "
            "equal to it by construction")


def kept_count(g: list[DesignRun]) -> str:
    """``"2 of 5 design runs found no valid reward and kept …"`` for a row with such runs ('' without)."""
    kept = [r for r in g if r.counted and r.kept]
    if not kept:
        return ""
    ran = [r for r in g if r.counted]
    starts = "; ".join(sorted({r.kept for r in kept}))
    return (f"{len(kept)} of {len(ran)} design runs found no valid reward and kept {starts}, "
            f"counted with that start's result (seed{'s' * (len(kept) > 1)} {', '.join(str(r.seed) for r in kept)})")


def kept_notes(runs: dict[str, list[DesignRun]]) -> dict[str, str]:
    """Label → :func:`kept_count`, for the rows with design runs that kept their start."""
    return {label: note for label, g in runs.items() if (note := kept_count(g))}


def per_design_run(frame: pd.DataFrame, design_of: dict[tuple[str, int], int]) -> pd.DataFrame:
    """``frame``'s rows with the agents of each design run averaged, per method and eval seed, and
    the design run's seed in ``agent_seed``: the claim's unit is the design run, so n counts design
    runs however many agents each trained. ``design_of``: (method, agent seed) → the seed of the
    design run whose final reward that agent trained; rows of other methods are kept as they are."""
    mine = pd.Series([key in design_of for key in zip(frame["method"], frame["agent_seed"])], index=frame.index, dtype=bool)
    rest, ours = frame[~mine], frame[mine].copy()
    if ours.empty:
        return frame
    ours["agent_seed"] = [design_of[(m, a)] for m, a in zip(ours["method"], ours["agent_seed"])]
    measures = [c for c in ours.columns if c not in ("method", "agent_seed", "seed") and
                pd.api.types.is_numeric_dtype(ours[c])]
    keys = ["method", "agent_seed", "seed"]
    others = [c for c in ours.columns if c not in keys and c not in measures]
    averaged = ours.groupby(keys, sort=False).agg({**{c: "mean" for c in measures}, **{c: "first" for c in others}})
    return pd.concat([rest, averaged.reset_index()], ignore_index=True)


def claim_reasons(runs: dict[str, list[DesignRun]]) -> dict[str, str]:
    """Label → why a claim on the row has no estimate: :func:`reasons`, and :func:`kept_start` for
    a row that ran but whose loops all kept their given start (a table still shows that row)."""
    kept = {label: why for label, g in runs.items() if (why := kept_start(g))}
    return {**kept, **reasons(runs)}


NO_VALID = "no valid reward"
"""How the outcome of a row without a valid reward begins (:func:`no_reward`)."""


def no_reward(g: list[DesignRun]) -> str:
    """The labelled outcome of a row whose every loop ended without a valid reward."""
    answers = sum(s.written for r in g for s in r.outcome.steps)
    first = g[0].failure.split(" (")[0].replace("no valid reward", f"no valid reward from {g[0].designer}")
    kinds = "; ".join(f"agent seed {r.seed}: {r.failure.split(' (', 1)[1].rstrip(')')}" for r in g)
    return f"{first}, {len(g)} of {len(g)} loops, {answers} answers ({kinds})"


def ci_table(frame: pd.DataFrame, labels: list[str], missing: dict[str, str] | None = None) -> pd.DataFrame:
    """Mean ± 95 % CI half-width of each §5.1 measure per label over its runs (n with its unit).

    Column ``same runs as`` names an earlier row whose every episode gave the very same measures
    (:func:`identical_rows`; e.g. a loop whose final reward is the expert reward it started from,
    retrained into the same agents): one result shown twice, not two that agree. A row whose agents
    never hold (:func:`never_hold`) is no holding whatever its reward, and says so there."""
    found_labels = [label for label in labels if not (missing and label in missing)]
    same = identical_rows(frame, found_labels)
    idle = set(never_hold(frame, [label for label in found_labels if label != REFERENCES[0]])) if found_labels else set()
    out, found = {}, {}
    for label in labels:
        if missing and label in missing:
            out[label] = {name: missing[label] for name in MEASURES.values()} | {"n": "", "same runs as": ""}
            continue
        g = _rows(frame, label)
        cells = {}
        for key, name in MEASURES.items():
            found[f"{label} / {name}"] = est = stats.estimate(g, key, noun=_noun(g))
            cells[name] = est.format(1)
        note = same.get(label) or (NEVER_HOLDS if label in idle else "")
        out[label] = cells | {"n": stats.unit_of(g, noun=_noun(g)), "same runs as": note}
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis("method")
    table.attrs["estimates"] = found
    return table


def identical_rows(frame: pd.DataFrame, labels: list[str]) -> dict[str, str]:
    """Label → the first earlier label with identical measures on every (agent seed, episode)."""
    def runs(label: str) -> pd.DataFrame:
        g = frame[frame["method"] == label]
        return g.sort_values(["agent_seed", "seed"])[["agent_seed", "seed", *MEASURES]].reset_index(drop=True)

    out: dict[str, str] = {}
    for i, label in enumerate(labels):
        mine = runs(label)
        for earlier in labels[:i]:
            if earlier not in out and not mine.empty and mine.equals(runs(earlier)):
                out[label] = earlier
                break
    return out


def paired(frame: pd.DataFrame, label: str, reference: str, measure: str = "travel_time_s") -> stats.Estimate:
    """Relative difference (%) of ``label`` against ``reference`` over ``label``'s runs, paired by
    seed (:func:`llmtraffic.study.stats.compare`)."""
    a = _rows(frame, label)
    return stats.compare(a, _rows(frame, reference), measure, relative=True, noun=_noun(a))


def paired_table(frame: pd.DataFrame, labels: list[str], reference: str, missing: dict[str, str] | None = None,
                 measures: tuple[str, ...] = ("travel_time_s", "wait_time_s", "headway_sd_s")) -> pd.DataFrame:
    """Change (%) of each label against ``reference`` with its 95 % CI and verdict, per measure."""
    out, found, missing = {}, {}, missing or {}
    for label in labels:
        if label == reference:
            continue
        why = missing.get(label) or missing.get(reference)
        if why:
            out[label] = {f"{MEASURES[m]} change (%)": why for m in measures} | {"verdict (travel time)": ""}
            continue
        row = {}
        for m in measures:
            column = f"{MEASURES[m]} change (%)"
            found[f"{label} / {column}"] = d = paired(frame, label, reference, m)
            row[column] = d.format(2)
            if m == "travel_time_s":
                row["verdict (travel time)"] = stats.verdict(d)
                row["n"], row["MDE (travel time)"] = d.of, stats.minimum_effect(d)
        out[label] = row
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis(f"vs {reference}")
    table.attrs["estimates"] = found
    return table


def never_hold(frame: pd.DataFrame, labels: list[str]) -> list[str]:
    """Labels whose agents never held on any evaluation episode (rows that equal no holding by policy, whatever the reward)."""
    held = frame[frame["method"].isin(labels)].groupby("method")["hold_time_s"].max()
    return [label for label in labels if label in held.index and held[label] == 0]


def best_other(frame: pd.DataFrame, others: list[str], measure: str = "travel_time_s") -> str:
    """The label among ``others`` with the lowest mean ``measure`` (§5.2.4: the best existing method)."""
    means = frame[frame["method"].isin(others)].groupby("method")[measure].mean()
    return str(means.idxmin())


def record_claim(frame: pd.DataFrame, missing: dict[str, str], label: str, reference: str, measure: str,
                 **claim: Any):
    """Record a paper claim as the paired relative difference (%) of ``label`` against ``reference``
    in ``measure``; as not run when either row did not run (its reason becomes ``needs``), or as no
    result when either row ran without a result of its designer (``missing`` from
    :func:`claim_reasons`: the outcome becomes ``finding``)."""
    from ... import study

    claim.setdefault("producer", f"{label} vs {reference}")  # the rows name their designers (the scorecard's column)
    why = missing.get(label) or missing.get(reference)
    if why and not why.startswith("not run"):
        return study.claim(paper="bus", finding=why, **claim)
    if why:
        return study.claim(paper="bus", needs=why.removeprefix("not run: needs "), **claim)
    return study.claim(paper="bus", ours=paired(frame, label, reference, measure), **claim)


def best_so_far(run: DesignRun) -> list[float]:
    """Best accepted test travel time after each iteration (iteration 0: the starting reward)."""
    h = run.outcome.history()
    if not run.outcome.ok:
        return [float("nan")]
    accepted = h[h["accepted"]].groupby("iteration")["travel_time_s"].min()
    best, out = float("inf"), []
    for i in range(int(h["iteration"].max()) + 1):
        best = min(best, float(accepted.get(i, float("inf"))))
        out.append(best)
    return out


def kept_per_iteration(run: DesignRun) -> list[float]:
    """Test travel time of the kept (last accepted) reward after each iteration: what the loop would answer if stopped there."""
    h = run.outcome.history()
    if not run.outcome.ok:
        return [float("nan")]
    accepted = h[h["accepted"]].groupby("iteration")["travel_time_s"].last()
    kept, out = float("nan"), []
    for i in range(int(h["iteration"].max()) + 1):
        kept = float(accepted.get(i, kept))
        out.append(kept)
    return out


def accepted_iterations(run: DesignRun) -> int:
    h = run.outcome.history()
    if h.empty or not run.outcome.ok:
        return 0
    return int(h.loc[h["accepted"] & (h["iteration"] > 0), "iteration"].nunique())


def loop_summary(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """Per row: candidates trained, invalid ones, valid ones not kept (rejected by the refiner, or
    beaten by another of the ``k`` samples of their iteration), distinct rewards, final test travel
    time on the design seeds (mean over agent seeds) and wall time."""
    out: dict[str, dict[str, Any]] = {}
    for label, g in runs.items():
        ran = [r for r in g if not r.unavailable]
        if not ran:
            out[label] = {"candidates": g[0].unavailable}
            continue
        h = [r.outcome.history() for r in ran]
        done = [r.outcome.final.travel_time for r in ran if r.has_reward]
        out[label] = {
            "design runs": len(ran),
            "candidates": sum(len(x) for x in h),
            "invalid": sum(int((~x["valid"]).sum()) for x in h),
            "not kept": sum(int((x["valid"] & ~x["accepted"]).sum()) for x in h),
            "distinct rewards": sum(len({s.code for s in r.outcome.steps}) for r in ran),
            "loops without a valid reward (kept their start)": f"{len(ran) - len(done)} of {len(ran)}",
            "final design travel time (s)": round(float(np.mean(done)), 1) if done else "none",
            "wall time (s)": round(sum(r.wall_s for r in ran), 1),
        }
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("experiment")


USAGE = ("calls", "prompt_tokens", "completion_tokens", "total_tokens")
"""What a row's LLM requests cost (recorded or replayed alike: a replay costs nothing but is the same experiment)."""


COST = (*USAGE, "LLM time (s)")


def cost_table(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """LLM requests, tokens and LLM wall time (as recorded) per row, summed over its agent seeds; rows
    without an LLM are left out. Whether a request was asked now or answered from the cassette is
    left out on purpose: a replay must give the same table."""
    rows = {}
    for label, g in runs.items():
        usages = [r.usage for r in g if r.usage is not None]
        if usages:
            rows[label] = {key: sum(u[key] for u in usages) for key in USAGE}
            rows[label]["LLM time (s)"] = round(sum(u["latency_s"] for u in usages), 1)
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(COST)).rename_axis("experiment")


def loop_measurements(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """Per row, role (:data:`~.loop.ROLES`) and iteration, summed over agent seeds: designer
    requests, prompt and completion tokens, wall time of the requests, code answers, the share of
    them that passed validation (and training), and the candidates the refiner accepted or rejected.
    A given start (warm or trivial) is no answer; the analyzer writes text, not code."""
    keys = ["experiment", "role", "iteration"]
    asked = ["requests", "prompt_tokens", "completion_tokens", "llm_s"]
    calls = pd.DataFrame([{"experiment": label, **c} for label, g in runs.items() for r in g if r.outcome
                          for c in r.outcome.calls], columns=[*keys, *asked, "wall_s"]).drop(columns="wall_s")
    steps = pd.DataFrame([{"experiment": label, "iteration": s.iteration, "role": ROLES[s.role], "code answers": 1,
                           "valid": int(s.ok), "accepted": int(s.accepted), "rejected": int(s.ok and not s.accepted)}
                          for label, g in runs.items() for r in g if r.outcome for s in r.outcome.steps if s.written],
                         columns=[*keys, "code answers", "valid", "accepted", "rejected"])
    out = calls.groupby(keys, sort=False).sum().join(steps.groupby(keys, sort=False).sum(), how="outer")
    out = out.fillna(0).astype(int if out.empty else {c: int for c in out.columns if c != "llm_s"})
    out["valid-code share"] = share(out)
    return out.round({"LLM time (s)": 1}).rename(columns={"llm_s": "LLM time (s)"}).round({"LLM time (s)": 1})


def share(frame: pd.DataFrame) -> pd.Series:
    """Valid code answers / code answers (NaN where the role wrote no code)."""
    return (frame["valid"] / frame["code answers"].where(frame["code answers"] > 0)).round(2)


def valid_share_by_role(measurements: pd.DataFrame) -> pd.DataFrame:
    """:func:`loop_measurements` summed over iterations: per row and role."""
    out = measurements.drop(columns=["valid-code share"]).groupby(level=["experiment", "role"], sort=False).sum()
    out["valid-code share"] = share(out)
    return out.round({"LLM time (s)": 1})


def save_loop_measurements(runs: dict[str, list[DesignRun]], study_label: str) -> pd.DataFrame:
    """Save :func:`loop_measurements` (``loop_measurements``) and its sum per role
    (``valid_code_share``) for the rows that ran; return the latter (empty without LLM rows)."""
    from ... import study

    measured = loop_measurements(runs)
    if measured.empty:
        return measured
    by_role = valid_share_by_role(measured)
    where = ("requests, tokens and LLM wall time of the designer's calls; code answers and the share that passed "
             "validation and training (a given warm start is no answer); candidates the refiner accepted or rejected; "
             f"summed over agent seeds; {study_label}. A request answered from the cassette (asked before by this or "
             "another notebook with the same model, messages, sampling parameters and seed) counts at its recorded cost")
    study.save_table(measured.reset_index().set_index("experiment"), "loop_measurements",
                     caption=f"Loop measurements per role and iteration: {where}", descriptive=True)
    study.save_table(by_role.reset_index().set_index("experiment"), "valid_code_share",
                     caption=f"Valid-code share per role: {where}", descriptive=True)
    return by_role
