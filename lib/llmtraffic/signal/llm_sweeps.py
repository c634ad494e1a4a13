"""One-setting sweeps of the OracleTSC fine-tune job, for the Appendix A notebooks.

``tsc_clip`` (A.7, Figs. 11–12: ε_u), ``tsc_seeds_and_g`` (A.8–A.9, Tables 11–12: training seed
and G), ``tsc_ppo_sensitivity`` (A.1, Tables 4–7: learning rate, GAE λ, γ, REINFORCE) and
``tsc_generalization`` (§4.5, Table 3) each take one base job of
:func:`llmtraffic.signal.llm_jobs.finetune` and vary one setting. A job is the keyword dict
of ``finetune``; a setting is named by a dotted path into it: ``"ppo.clip_high"``,
``"oracle.reward.hurdle"``, ``"oracle.episodes"``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..rl.llm_ppo import PPOConfig
from . import llm_jobs, llm_tables
from .oracle import RewardConfig
from .oracle_training import OracleConfig

SETTINGS = {"ppo": PPOConfig, "oracle": OracleConfig, "oracle.reward": RewardConfig}
"""Which dataclass each prefix of a setting path configures."""


def with_setting(job: dict, path: str, value: Any) -> dict:
    """A deep copy of ``job`` with the setting at ``path`` set to ``value``.

    ``path`` is ``ppo.<PPOConfig field>``, ``oracle.<OracleConfig field>`` or
    ``oracle.reward.<RewardConfig field>``; an unknown field raises ``ValueError``.
    """
    *parents, name = path.split(".")
    prefix = ".".join(parents)
    if prefix not in SETTINGS:
        raise ValueError(f"setting {path!r}: must start with one of {sorted(SETTINGS)}")
    known = {f.name for f in fields(SETTINGS[prefix])}
    if name not in known:
        raise ValueError(f"setting {path!r}: {SETTINGS[prefix].__name__} has no field {name!r}")
    out = copy.deepcopy(job)
    node = out
    for key in parents:
        node[key] = dict(node.get(key) or {})
        node = node[key]
    node[name] = value
    return out


def sweep(job: dict, path: str, levels: Sequence[Any]) -> list[dict]:
    """One job per level of the setting at ``path``."""
    return [with_setting(job, path, level) for level in levels]


def run_unique(jobs: Sequence[dict], executor: str = "serial", n_jobs: int | None = None) -> list[dict]:
    """:func:`llm_jobs.finetune` for each job, each distinct job once (two sweeps often share
    their base level), the levels that can train together in one batch
    (:func:`llm_jobs.finetune_unique`); results in the order of ``jobs``."""
    return llm_jobs.finetune_unique(jobs, executor, n_jobs)


def summary_frame(results: Sequence[dict], levels: Sequence[Any], scenario: str | None = None,
                  name: str = "level") -> pd.DataFrame:
    """Mean metrics (:func:`llm_tables.summarize`) of each result's evaluation on ``scenario`` (default:
    its training intersection) per level; NaN where the backbone could not run."""
    rows = []
    for level, result in zip(levels, results):
        after = llm_jobs.after_of(result, scenario)
        missing = {key: float("nan") for key in llm_tables.METRICS}
        rows.append({name: level, **(missing if "unavailable" in after else llm_tables.summarize(after))})
    return pd.DataFrame(rows).set_index(name)


def spread_row(frame: pd.DataFrame, columns: Sequence[str] = tuple(llm_tables.METRICS)) -> dict[str, str]:
    """``"mean ± std"`` (population std) over the rows of ``frame`` for each metric (Table 11's spread)."""
    out = {}
    for key in columns:
        digits = 0 if key == "throughput" else 2
        values = frame[key].astype(float)
        out[llm_tables.METRICS[key]] = f"{values.mean():.{digits}f} ± {values.std(ddof=0):.{digits}f}"
    return out


def training_table(result: dict) -> pd.DataFrame:
    """Per training episode (Table 7's rows): mean travel time and queue of the episode the
    policy played while learning (G answers, the first applied), mean decision reward, share
    of answers without a valid phase, mean token KL to the reference policy."""
    if "unavailable" in result:
        return pd.DataFrame({"Episode": ["—"], "Travel Time": [result["unavailable"]]}).set_index("Episode")
    rows = {f"Episode {e['episode'] + 1}": {
        "Travel Time": round(e["travel_time_s"], 2), "Queue": round(e["queue"], 2),
        "Mean reward": round(e["mean_reward"], 3), "Invalid answers": f"{100 * e['invalid_rate']:.1f}%",
        "KL": round(e["kl"], 4)} for e in result["training"]}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("Episode")


def plot_sweep(frame: pd.DataFrame, xlabel: str, before: dict | None = None, title: str = "",
               log_x: bool = False):
    """Figs. 11–12 layout: Travel Time, Queue, Delay, Throughput against the swept level.

    ``frame`` is :func:`summary_frame`'s (index = level). ``before``: the backbone before
    fine-tuning, drawn as a dashed line.
    """
    fig, axes = plt.subplots(1, len(llm_tables.METRICS), figsize=(3.4 * len(llm_tables.METRICS), 3.2))
    ref = llm_tables.summarize(before) if before is not None and "unavailable" not in before else None
    for ax, key in zip(axes, llm_tables.METRICS):
        if key in frame:
            ax.plot(frame.index, frame[key], marker="o", label="after fine-tuning")
        if ref is not None and math.isfinite(ref[key]):
            ax.axhline(ref[key], ls="--", color="grey", lw=1, label="before fine-tuning")
        ax.set_xlabel(xlabel)
        ax.set_title(llm_tables.METRICS[key])
        if log_x:
            ax.set_xscale("log")
        elif len(frame.index) and all(isinstance(v, (int, float, np.number)) for v in frame.index):
            ax.set_xticks(sorted(set(frame.index)))
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig
