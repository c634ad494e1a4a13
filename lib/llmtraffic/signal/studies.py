"""Glue between the OracleTSC notebooks and the training loop (OracleTSC seed §4, App. A).

The ``tsc_*`` LLM notebooks (``tsc_main``, ``tsc_reward_ablation``, ``tsc_entropy_temperature``,
``tsc_hurdle``, ``tsc_generalization``, ``tsc_clip``, ``tsc_seeds_and_g``,
``tsc_ppo_sensitivity``) all run one job: take a backbone, fine-tune it with PPO under one
:class:`~.oracle_training.OracleConfig` / :class:`~llmtraffic.rl.llm_ppo.PPOConfig`, pick the
best checkpoint on a held-out episode (§4.1.3) and evaluate it on held-out seeds; the
backbone's own (pretrained) policy is evaluated the same way for the "before" rows.

Stable API (signatures kept fixed; keyword arguments are JSON-safe so results cache):

``backbone_unavailable(backbone) -> str | None``
    Why a backbone cannot run here (``NEEDS_GPU``), or None. ``"surrogate-tiny"`` always runs;
    any other name is a local folder or a Hugging Face model id in the local cache, and needs
    CUDA.
``table8_hurdle(backbone, scenario, default) -> float``
    H_R of Table 8 for a paper backbone, else ``default`` (the surrogate's notebook value).
``ppo_config(backbone, scenario, **overrides) -> PPOConfig``
    The surrogate's settings (:func:`~.surrogate.surrogate_ppo_config`) or Table 8's for a
    paper backbone (4-bit base, chat prompt, 512 new tokens).
``surrogate_artifact(scenario="cologne1", **overrides) -> SurrogateArtifact``
    The trained surrogate for a scenario, cached (kind ``tsc_surrogate``).
``load_backbone(backbone, scenario, ppo=None, surrogate=None) -> (LMPolicy, Prompter)``
    A fresh policy (zero LoRA update) and the prompt builder that suits it.
``evaluate_backbone(backbone, scenario, eval_seeds, episode_s=3600, ppo=None, surrogate=None,
probe_every=10) -> dict``
    The "before fine-tuning" evaluation, cached (kind ``tsc_before``).
``finetune(backbone, scenario, oracle, eval_seeds, select_seed=50, ppo=None, surrogate=None,
eval_scenarios=None, eval_episode_s=None, probe_every=10) -> dict``
    Fine-tune, select (only among two or more checkpoints), evaluate; cached (kind
    ``tsc_finetune``) with resumable checkpoints.
    ``oracle`` holds :class:`OracleConfig` fields (``reward`` as a dict of
    :class:`~.oracle.RewardConfig` fields).
``summarize(evaluation) -> dict`` / ``metric_cells(after, before=None) -> dict``
    Mean metrics over seeds, and Table 1-style cells ``"12.3 (−45%)"``.
``after_of(result, scenario=None) -> dict`` / ``results_table({name: (evaluation, reference)})``
    A fine-tune's evaluation (or its reason), and Table 1/2 rows with changes vs a reference.
``agreement_table({name: evaluation})`` / ``traces_table({name: evaluation})``
    Q3's cross-answer agreement and the Listings 1–2 traces.
``pool([evaluation, ...]) -> dict``
    Several evaluations (e.g. one per training seed) as one.
``share_above(evaluation, hurdle) -> float``
    Share of decisions whose R_env exceeds H_R (Fig. 4).
``reward_label(reward) -> str``
    The Table 2 row name of a reward (``"R_env − H_R(=2.7) + w·R_E (softmax τ=0)"``).

An *evaluation* (both ``evaluate_backbone`` and each entry of ``finetune(...)["after"]``) is::

    {"scenario": str, "episode_s": int,
     "runs": [{"seed", "travel_time_s", "travel_time_all_s", "queue", "delay", "throughput",
               "deadlock", "deadlock_time_s", "invalid_rate", "queue_series": [...],
               "r_env": [...]}],                # eq. 7 per decision, for Fig. 4
     "agreement": [{"seed", "decision", "modal_share", "distinct", "entropy", "invalid"}],
     "traces": [{"decision", "prompt", "answers": [G texts], "phases": [G mnemonics or None]}]}

``agreement`` is the seed's Q3 (cross-answer agreement): every ``probe_every``-th decision of
each evaluation episode, G fresh answers to the same prompt (a generator apart from the one
that drives the episode, so the episode itself is unchanged), with the share naming the most
common phase, the number of distinct phases, and their discrete semantic entropy in nats
(eq. 13's frequencies; an answer without a valid phase is its own class). ``traces`` keeps the
G answers of the first three probes of the first seed (Listings 1–2).

``finetune(...)`` returns ``{"params", "training": [per-episode stats], "selection": [per
checkpoint; empty when there was only one], "best_checkpoint": str, "after": {scenario: evaluation}}``, or
``{"params", "unavailable": reason}`` when the backbone cannot run here (never cached).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import study
from ..study.cache import cache_dir
from ..rl.llm_ppo import LMPolicy, PPOConfig, load_policy_model, torch_threads
from .evaluation import COLUMNS, evaluate
from .oracle import RewardConfig
from .oracle_training import LLMController, OracleConfig, Prompter, chat_prompter, select_best, train
from .prompt import parse_phase
from .state import IntersectionState
from .surrogate import SurrogateConfig, compact_prompt, load_surrogate, surrogate_params, surrogate_ppo_config, train_surrogate

SURROGATE = "surrogate-tiny"
"""The CPU stand-in backbone (:mod:`.surrogate`)."""

NEEDS_GPU = "needs local weights and a GPU (paper profile)"
"""What a table cell says for a backbone that cannot run here."""

PAPER_BACKBONES = {
    "Qwen3-0.6B": "Qwen/Qwen3-0.6B",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "LLaMA3-8B": "meta-llama/Meta-Llama-3-8B-Instruct",
}
"""Table 1's backbones (§4.1.4) → Hugging Face model ids looked up in the local cache."""

TABLE8 = {
    ("Qwen3-0.6B", "hangzhou1x1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.5, hurdle=3.7),
    ("Qwen3-0.6B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=2.7),
    ("Qwen3-8B", "hangzhou1x1"): dict(actor_lr=3.0e-5, actor_weight_decay=8e-7, clip_low=0.2, clip_high=0.2, hurdle=3.1),
    ("Qwen3-8B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=3.0),
    ("LLaMA3-8B", "hangzhou1x1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.5, hurdle=3.0),
    ("LLaMA3-8B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=3.7),
}
"""A.2 Table 8: per backbone and intersection, the actor's learning rate and weight decay, the
clip bounds ε_l, ε_u (eq. 16) and the hurdle H_R (eq. 8) (CityFlow1x1 = ``hangzhou1x1``)."""

TABLE_COLUMNS = {"travel_time_s": "Travel Time", "queue": "Queue", "delay": "Delay", "throughput": "Throughput"}
"""Table 1's metrics (§4.1.2): keys of an evaluation run → the seed's column names."""

TRACE_PROBES = 3
"""Probes of the first evaluation seed whose G answers are kept as reasoning traces."""

TORCH_THREADS = 1
"""Torch threads while a job runs: the surrogate's batches are too small to gain from more, and
on a shared, loaded 2-core CPU two spinning threads made the surrogate's pre-training 20× and
a fine-tune job ~10× slower (measured)."""


# ----------------------------------------------------------------------------- backbones


def _hf_path(backbone: str) -> Path | None:
    """A local folder for ``backbone`` (a path, a Table 1 name or a model id), or None."""
    if Path(backbone).is_dir():
        return Path(backbone)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(PAPER_BACKBONES.get(backbone, backbone), local_files_only=True))
    except Exception:  # not cached, not a valid id, no hub metadata: all mean "not here"
        return None


def backbone_unavailable(backbone: str) -> str | None:
    """Why ``backbone`` cannot be fine-tuned here (``NEEDS_GPU``), or None if it can."""
    if backbone == SURROGATE:
        return None
    if not torch.cuda.is_available() or _hf_path(backbone) is None:
        return NEEDS_GPU
    return None


def table8_hurdle(backbone: str, scenario: str, default: float) -> float:
    """H_R of Table 8 for a paper backbone on a LibSignal intersection, else ``default``."""
    return TABLE8.get((backbone, scenario), {}).get("hurdle", default)


def ppo_config(backbone: str, scenario: str, **overrides: Any) -> PPOConfig:
    """PPO settings for a backbone: the surrogate's, or Table 8's (4-bit NF4 base) for a paper one."""
    if backbone == SURROGATE:
        return surrogate_ppo_config(**overrides)
    table8 = {k: v for k, v in TABLE8.get((backbone, scenario), {}).items() if k != "hurdle"}
    return PPOConfig(**{"load_in_4bit": True, **table8, **overrides})


PAPER_ABLATION_SCENARIO = "hangzhou1x1"
"""The seed runs its ablations (Tables 2, 4–7, 11–12, Figs. 8–9) on CityFlow 1x1: hangzhou1x1 here."""


def paper_if_same(paper: dict, scenario: str, paper_scenario: str = PAPER_ABLATION_SCENARIO) -> dict | None:
    """The seed's cells to set beside ours, or None when ours ran on another intersection: levels
    of two intersections are not comparable, so the notebook then shows the seed's values on
    their own (:func:`paper_reference`)."""
    return paper if scenario == paper_scenario else None


def paper_reference(paper: dict) -> pd.DataFrame:
    """The seed's cells ``{column: {row: value}}`` as a table of their own."""
    return pd.DataFrame(paper)


def code_digest() -> str:
    """Digest of the code the cached OracleTSC artifacts depend on (environment, prompts, rewards,
    surrogate, training loop, PPO, tiny LM): part of their cache keys, so a change there retrains
    instead of reusing an artifact the current code would not produce."""
    from ..llm import tiny
    from ..rl import llm_ppo
    from . import env, evaluation, metrics, oracle, oracle_training, prompt, scenarios, surrogate

    return study.source_digest(env, evaluation, metrics, oracle, oracle_training, prompt, scenarios,
                               surrogate, llm_ppo, tiny)


def surrogate_artifact(scenario: str = "cologne1", **overrides: Any):
    """The surrogate pre-trained on ``scenario``'s states (cached, kind ``tsc_surrogate``)."""
    cfg = SurrogateConfig(**{"scenario": scenario, **overrides})

    def build():
        with torch_threads(TORCH_THREADS):
            return train_surrogate(cfg)

    return study.cached("tsc_surrogate", {**surrogate_params(cfg), "code": code_digest()}, build)


def _surrogate_prompter(state: IntersectionState, history: Sequence[tuple[IntersectionState, int]]) -> str:
    """The surrogate reads the compact state only (it has no memory of earlier decisions)."""
    return compact_prompt(state)


def load_backbone(backbone: str, scenario: str, ppo: dict | None = None,
                  surrogate: dict | None = None) -> tuple[LMPolicy, Prompter]:
    """A fresh policy (LoRA adapters initialised to a zero update) and its prompt builder.

    ``surrogate`` overrides :class:`SurrogateConfig` fields (its ``scenario`` defaults to
    ``scenario``); it is ignored for other backbones.
    """
    reason = backbone_unavailable(backbone)
    if reason:
        raise RuntimeError(f"backbone {backbone!r}: {reason}")
    cfg = ppo_config(backbone, scenario, **(ppo or {}))
    if backbone == SURROGATE:
        model, tok = load_surrogate(surrogate_artifact(**{"scenario": scenario, **(surrogate or {})}))
        return LMPolicy(model, tok, cfg), _surrogate_prompter
    from transformers import AutoTokenizer

    path = _hf_path(backbone)
    tok = AutoTokenizer.from_pretrained(path)
    model = load_policy_model(path, cfg.load_in_4bit, device="cuda")
    return LMPolicy(model, tok, cfg), chat_prompter(tok)


# ----------------------------------------------------------------------------- evaluation


class _RecordingController(LLMController):
    """:class:`LLMController` that also keeps each state it saw (for R_env and probes)."""

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self.states: list[IntersectionState] = []

    def act(self, state: IntersectionState) -> int:
        self.states.append(state)
        return super().act(state)


def answer_agreement(phases: Sequence[int | None]) -> dict[str, float]:
    """Cross-answer agreement of G extracted phases (None = no valid phase, its own class).

    ``modal_share``: share of answers naming the most common class; ``distinct``: number of
    classes; ``entropy``: discrete semantic entropy −Σ p log p (nats) of the class frequencies;
    ``invalid``: share of answers without a valid phase.
    """
    if not phases:
        raise ValueError("answer_agreement: no answers")
    _, counts = np.unique(np.array([-1 if p is None else p for p in phases]), return_counts=True)
    p = counts / counts.sum()
    return {"modal_share": float(p.max()), "distinct": int(len(counts)),
            "entropy": float(-(p * np.log(p)).sum()) + 0.0,
            "invalid": float(sum(x is None for x in phases) / len(phases))}


def evaluate_run(policy: LMPolicy, prompter: Prompter, scenario: str, eval_seeds: Sequence[int],
                 episode_s: int = 3600, probe_every: int = 10, label: str = "llm") -> dict:
    """One evaluation (see the module docstring): metrics per seed, R_env per decision,
    cross-answer agreement every ``probe_every`` decisions, traces of the first seed."""
    if probe_every < 1:
        raise ValueError(f"probe_every must be >= 1, got {probe_every}")
    runs, agreement, traces = [], [], []
    for seed in eval_seeds:
        controller = _RecordingController(policy, prompter, label)
        result = evaluate(scenario, controller, seed=seed, episode_s=episode_s)
        states = controller.states
        r_env = [float(a.total_queue - b.total_queue) for a, b in zip(states, states[1:])]
        runs.append({"seed": seed, **{k: result[k] for k in (*COLUMNS, "deadlock", "deadlock_time_s")},
                     "invalid_rate": controller.invalid / max(controller.decisions, 1),
                     "queue_series": list(result["queue_series"]), "r_env": r_env})
        rng = np.random.default_rng([seed, 11])
        for decision in range(0, len(states), probe_every):
            prompt, state = controller.traces[decision][0], states[decision]
            texts, _ = policy.sample(prompt, rng=rng, record=False)
            phases = [parse_phase(t, state.phases) for t in texts]
            agreement.append({"seed": seed, "decision": decision, **answer_agreement(phases)})
            if seed == eval_seeds[0] and len(traces) < TRACE_PROBES:
                traces.append({"decision": decision, "prompt": prompt, "answers": texts,
                               "phases": [None if p is None else state.phases[p].mnemonic for p in phases]})
    return {"scenario": scenario, "episode_s": episode_s, "runs": runs, "agreement": agreement, "traces": traces}


def _backbone_params(backbone: str, scenario: str, ppo: dict | None, surrogate: dict | None) -> dict:
    """What identifies a starting policy (cache key part)."""
    params: dict[str, Any] = {"backbone": backbone, "ppo": asdict(ppo_config(backbone, scenario, **(ppo or {}))),
                              "code": code_digest()}
    if backbone == SURROGATE:
        params["surrogate"] = surrogate_params(SurrogateConfig(**{"scenario": scenario, **(surrogate or {})}))
    return json.loads(json.dumps(params))


def evaluate_backbone(backbone: str, scenario: str, eval_seeds: Sequence[int], episode_s: int = 3600,
                      ppo: dict | None = None, surrogate: dict | None = None, probe_every: int = 10) -> dict:
    """The backbone before fine-tuning on ``scenario`` (cached, kind ``tsc_before``).

    Returns an evaluation, or ``{"unavailable": reason}`` (not cached). ``surrogate`` may name
    another ``scenario`` to evaluate a surrogate pre-trained elsewhere (Table 3).
    """
    reason = backbone_unavailable(backbone)
    if reason:
        return {"scenario": scenario, "unavailable": reason}
    params = {**_backbone_params(backbone, scenario, ppo, surrogate), "scenario": scenario,
              "eval_seeds": list(eval_seeds), "episode_s": episode_s, "probe_every": probe_every}

    def build() -> dict:
        with torch_threads(TORCH_THREADS):
            policy, prompter = load_backbone(backbone, scenario, ppo, surrogate)
            return evaluate_run(policy, prompter, scenario, eval_seeds, episode_s, probe_every, backbone)

    return study.cached("tsc_before", params, build)


# ----------------------------------------------------------------------------- fine-tuning


def finetune(backbone: str, scenario: str, oracle: dict, eval_seeds: Sequence[int], select_seed: int = 50,
             ppo: dict | None = None, surrogate: dict | None = None, eval_scenarios: Sequence[str] | None = None,
             eval_episode_s: int | None = None, probe_every: int = 10) -> dict:
    """Fine-tune ``backbone`` on ``scenario`` with PPO (Alg. 1), select the best checkpoint on the
    held-out episode ``select_seed`` (§4.1.3), evaluate it on ``eval_seeds`` of each of
    ``eval_scenarios`` (default: ``scenario``). Cached (kind ``tsc_finetune``); checkpoints live
    in ``runs/cache/tsc_finetune_ckpt/<key>/`` so a killed run resumes.

    ``oracle``: :class:`OracleConfig` fields except ``scenario`` (e.g. ``episodes``,
    ``episode_s``, ``reward={"hurdle": 2.7, "entropy": "softmax", "tau": 0}``,
    ``update_every_s``, ``checkpoint_every_s``, ``random_reward_std``).
    """
    cfg = OracleConfig(**{**oracle, "scenario": scenario})
    eval_episode_s = eval_episode_s or cfg.episode_s
    eval_scenarios = list(eval_scenarios or [scenario])
    params = {**_backbone_params(backbone, scenario, ppo, surrogate), "oracle": json.loads(json.dumps(asdict(cfg))),
              "eval_seeds": list(eval_seeds), "select_seed": select_seed, "eval_scenarios": eval_scenarios,
              "eval_episode_s": eval_episode_s, "probe_every": probe_every}
    reason = backbone_unavailable(backbone)
    if reason:
        return {"params": params, "unavailable": reason}

    def build() -> dict:
        with torch_threads(TORCH_THREADS):
            policy, prompter = load_backbone(backbone, scenario, ppo, surrogate)
            out = cache_dir("tsc_finetune_ckpt", params)
            trained = train(policy, prompter, cfg, out)
            checkpoints = trained["checkpoints"]
            if len(checkpoints) == 1:  # one candidate: nothing to select, no held-out episode spent
                best, selection = checkpoints[0], []
                policy.load(best)
            else:
                best, selection = select_best(policy, prompter, checkpoints, scenario, select_seed, eval_episode_s)
            after = {sc: evaluate_run(policy, prompter, sc, eval_seeds, eval_episode_s, probe_every, backbone)
                     for sc in eval_scenarios}
            return {"params": params, "training": trained["episodes"], "selection": selection,
                    "best_checkpoint": str(best), "after": after}

    return study.cached("tsc_finetune", params, build)


# ----------------------------------------------------------------------------- tables


def summarize(evaluation: dict) -> dict[str, float]:
    """Means over the evaluation seeds of Table 1's metrics, the invalid-answer share, the mean
    cross-answer agreement and entropy, and the count of deadlocked runs."""
    runs = evaluation["runs"]
    out = {k: float(np.mean([r[k] for r in runs])) for k in (*TABLE_COLUMNS, "travel_time_all_s", "invalid_rate")}
    out["deadlocks"] = int(sum(r["deadlock"] for r in runs))
    out["runs"] = len(runs)
    if evaluation.get("agreement"):
        out["modal_share"] = float(np.mean([a["modal_share"] for a in evaluation["agreement"]]))
        out["entropy"] = float(np.mean([a["entropy"] for a in evaluation["agreement"]]))
    return out


def _fmt(key: str, value: float) -> str:
    return f"{value:.0f}" if key == "throughput" else f"{value:.2f}"


def metric_cells(after: dict, before: dict | None = None) -> dict[str, str]:
    """Table 1-style cells of an evaluation: ``"12.34"``, or ``"12.34 (−45%)"`` against ``before``;
    plus ``Invalid answers`` and ``Deadlocks`` columns."""
    ours = summarize(after)
    ref = summarize(before) if before is not None else None
    cells = {}
    for key, name in TABLE_COLUMNS.items():
        text = _fmt(key, ours[key])
        if ref is not None and ref[key] != 0 and math.isfinite(ref[key]):
            text += f" ({100 * (ours[key] - ref[key]) / abs(ref[key]):+.0f}%)".replace("-", "−")
        cells[name] = text
    cells["Invalid answers"] = f"{100 * ours['invalid_rate']:.1f}%"
    cells["Deadlocks"] = f"{ours['deadlocks']}/{ours['runs']}"
    return cells


def unavailable_cells(reason: str) -> dict[str, str]:
    """The cells of a row that cannot be computed here."""
    return {name: reason for name in (*TABLE_COLUMNS.values(), "Invalid answers", "Deadlocks")}


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


def after_of(result: dict, scenario: str | None = None) -> dict:
    """The evaluation of a :func:`finetune` result on ``scenario`` (default: its training
    scenario), or ``{"unavailable": reason}`` as the result says."""
    if "unavailable" in result:
        return {"unavailable": result["unavailable"]}
    return result["after"][scenario or result["params"]["oracle"]["scenario"]]


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
            cells[name] = metric_cells(evaluation, usable)
    return pd.DataFrame.from_dict(cells, orient="index").rename_axis("Method")


def agreement_table(evaluations: dict[str, dict]) -> pd.DataFrame:
    """Cross-answer agreement (Q3) per named evaluation: probes, mean share of the modal phase,
    mean distinct phases, mean semantic entropy (nats), share of answers without a phase."""
    out = {}
    for name, evaluation in evaluations.items():
        probes = pd.DataFrame(evaluation["agreement"])
        out[name] = {"probes": len(probes), "modal share": probes["modal_share"].mean(),
                     "distinct phases": probes["distinct"].mean(), "entropy (nats)": probes["entropy"].mean(),
                     "answers without a phase": probes["invalid"].mean()}
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


def pool(evaluations: Sequence[dict]) -> dict:
    """One evaluation from several (e.g. one per training seed): runs, probes and traces pooled;
    ``{"unavailable": reason}`` if any of them is."""
    for evaluation in evaluations:
        if "unavailable" in evaluation:
            return {"unavailable": evaluation["unavailable"]}
    if not evaluations:
        raise ValueError("pool: no evaluations")
    first = evaluations[0]
    return {"scenario": first["scenario"], "episode_s": first["episode_s"],
            "runs": [r for e in evaluations for r in e["runs"]],
            "agreement": [a for e in evaluations for a in e["agreement"]],
            "traces": [t for e in evaluations for t in e["traces"]]}
