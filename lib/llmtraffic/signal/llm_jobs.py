"""Cached OracleTSC jobs: a backbone before fine-tuning, and fine-tune → select → evaluate (§4.1.3, Alg. 1).

Every ``tsc_*`` LLM notebook runs these two jobs (through :mod:`.llm_experiments`, which names
table rows and pools agent seeds): :func:`evaluate_backbone` (cached, kind ``tsc_before``) and
:func:`finetune` (cached, kind ``tsc_finetune``, resumable checkpoints). Keyword arguments are
JSON-safe so results cache; a backbone that cannot run here gives ``{"unavailable": reason}``.

An *evaluation* (both ``evaluate_backbone`` and each entry of ``finetune(...)["after"]``) is::

    {"scenario": str, "episode_s": int,
     "runs": [{"seed", "travel_time_s", "travel_time_all_s", "queue", "delay", "throughput",
               "deadlock", "deadlock_time_s", "invalid_rate", "queue_series": [...],
               "r_env": [...]}],                # eq. 7 per decision, for Fig. 4
     "agreement": [{"seed", "decision", "modal_share", "distinct", "entropy", "invalid"}],
     "traces": [{"decision", "prompt", "answers": [G texts], "phases": [G mnemonics or None]}]}

``agreement`` is the paper's Q3 (cross-answer agreement; with ``text_entropy``, the same over identical texts): every ``probe_every``-th decision of
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
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import study
from ..rl.llm_ppo import LMPolicy, PolicyGroup, torch_threads
from .backbones import TORCH_THREADS, backbone_params, backbone_unavailable, load_backbone
from .evaluation import COLUMNS, evaluate_together
from .oracle_training import (LLMController, LLMControllers, OracleConfig, Prompter, retain, select_best_together,
                              train_together)
from .prompt import answer_choices, parse_phase
from .state import IntersectionState

TRACE_PROBES = 3
"""Probes of the first evaluation seed whose G answers are kept as reasoning traces."""


class _RecordingController(LLMController):
    """:class:`LLMController` that also keeps each state it saw (for R_env and probes)."""

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self.states: list[IntersectionState] = []

    def commit(self, state: IntersectionState, prompt: str, answer: str) -> int:
        self.states.append(state)
        return super().commit(state, prompt, answer)


def _entropy(labels: Sequence) -> float:
    """−Σ p log p (nats) of the frequencies of the distinct labels."""
    _, counts = np.unique(np.array(labels, dtype=object).astype(str), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum()) + 0.0


def answer_agreement(phases: Sequence[int | None], texts: Sequence[str] | None = None) -> dict[str, float]:
    """Cross-answer agreement of G extracted phases (None = no valid phase, its own class).

    ``modal_share``: share of answers naming the most common class; ``distinct``: number of
    classes; ``entropy``: discrete semantic entropy −Σ p log p (nats) of the class frequencies;
    ``invalid``: share of answers without a valid phase; with ``texts``, ``text_entropy``: the
    same over identical answer texts (token-level clusters; ≥ the semantic entropy), and
    ``rewordings``: distinct wordings of valid answers beyond one per phase named (0: every
    phase is named in one wording; what DSE clusters and text entropy does not).
    """
    if not phases:
        raise ValueError("answer_agreement: no answers")
    classes = [-1 if p is None else p for p in phases]
    _, counts = np.unique(np.array(classes), return_counts=True)
    out = {"modal_share": float(counts.max() / counts.sum()), "distinct": int(len(counts)),
           "entropy": _entropy(classes), "invalid": float(sum(x is None for x in phases) / len(phases))}
    if texts is not None:
        out["text_entropy"] = _entropy(texts)
        worded = {(p, t.strip()) for p, t in zip(phases, texts) if p is not None}
        out["rewordings"] = len(worded) - len({p for p, _ in worded})
    return out


def evaluate_run(policy: LMPolicy, prompter: Prompter, scenario: str, eval_seeds: Sequence[int],
                 episode_s: int = 3600, probe_every: int = 10, label: str = "llm") -> dict:
    """One evaluation (see the module docstring): metrics per seed, R_env per decision,
    cross-answer agreement every ``probe_every`` decisions, traces of the first seed."""
    return evaluate_runs([policy], prompter, scenario, eval_seeds, episode_s, probe_every, label)[0]


def evaluate_runs(policies: Sequence[LMPolicy], prompter: Prompter, scenario: str, eval_seeds: Sequence[int],
                  episode_s: int = 3600, probe_every: int = 10, label: str = "llm") -> list[dict]:
    """:func:`evaluate_run` of each policy; every episode of every policy played together where
    they sample through one stacked decoder (:class:`~llmtraffic.rl.llm_ppo.PolicyGroup`), each
    from its own generator (the same numbers, one batch per decision)."""
    if probe_every < 1:
        raise ValueError(f"probe_every must be >= 1, got {probe_every}")
    sampler = PolicyGroup(list(policies)).decoder() if len(policies) > 1 else None
    if len(policies) > 1 and sampler is None:
        return [evaluate_run(p, prompter, scenario, eval_seeds, episode_s, probe_every, label) for p in policies]
    controllers = [_RecordingController(p, prompter, label) for p in policies for _ in eval_seeds]
    results = evaluate_together(scenario, LLMControllers(controllers, sampler), list(eval_seeds) * len(policies),
                                episode_s)
    n = len(eval_seeds)
    return [_evaluation(p, scenario, episode_s, eval_seeds, controllers[k * n : k * n + n], results[k * n : k * n + n],
                        probe_every) for k, p in enumerate(policies)]


def _evaluation(policy: LMPolicy, scenario: str, episode_s: int, eval_seeds: Sequence[int],
                controllers: Sequence[_RecordingController], results: Sequence[dict], probe_every: int) -> dict:
    """One policy's evaluation from its played episodes, with its agreement probes and traces."""
    runs, agreement, traces = [], [], []
    for seed, controller, result in zip(eval_seeds, controllers, results, strict=True):
        states = controller.states
        r_env = [float(a.total_queue - b.total_queue) for a, b in zip(states, states[1:])]
        runs.append({"seed": seed, **{k: result[k] for k in (*COLUMNS, "deadlock", "deadlock_time_s")},
                     "invalid_rate": controller.invalid / max(controller.decisions, 1),
                     "queue_series": list(result["queue_series"]), "r_env": r_env})
        probes = range(0, len(states), probe_every)
        answers = policy.sample_groups([controller.traces[d][0] for d in probes], np.random.default_rng([seed, 11]),
                                       choices=answer_choices(states[0]) if states else None)
        for decision, texts in zip(probes, answers, strict=True):
            prompt, state = controller.traces[decision][0], states[decision]
            phases = [parse_phase(t, state.phases) for t in texts]
            agreement.append({"seed": seed, "decision": decision, **answer_agreement(phases, texts)})
            if seed == eval_seeds[0] and len(traces) < TRACE_PROBES:
                traces.append({"decision": decision, "prompt": prompt, "answers": texts,
                               "phases": [None if p is None else state.phases[p].mnemonic for p in phases]})
    return {"scenario": scenario, "episode_s": episode_s, "runs": runs, "agreement": agreement, "traces": traces}


def evaluate_backbone(backbone: str, scenario: str, eval_seeds: Sequence[int], episode_s: int = 3600,
                      ppo: dict | None = None, surrogate: dict | None = None, probe_every: int = 10) -> dict:
    """The backbone before fine-tuning on ``scenario`` (cached, kind ``tsc_before``).

    Returns an evaluation, or ``{"unavailable": reason}`` (not cached). ``surrogate`` may name
    another ``scenario`` to evaluate a surrogate pre-trained elsewhere (Table 3).
    """
    reason = backbone_unavailable(backbone)
    if reason:
        return {"scenario": scenario, "unavailable": reason}
    params = {**backbone_params(backbone, scenario, ppo, surrogate), "scenario": scenario,
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
    in the artifact's own cache folder so a killed run resumes.

    ``oracle``: :class:`OracleConfig` fields except ``scenario`` (e.g. ``episodes``,
    ``episode_s``, ``reward={"hurdle": 2.7, "entropy": "softmax", "tau": 0}``,
    ``update_every_s``, ``checkpoint_every_s``, ``random_reward_std``).
    """
    return finetune_together([dict(backbone=backbone, scenario=scenario, oracle=oracle, eval_seeds=eval_seeds,
                                   select_seed=select_seed, ppo=ppo, surrogate=surrogate, eval_scenarios=eval_scenarios,
                                   eval_episode_s=eval_episode_s, probe_every=probe_every)])[0]


SHARED = ("backbone", "scenario", "surrogate", "eval_seeds", "select_seed", "eval_scenarios", "eval_episode_s",
          "probe_every")
""":func:`finetune_together`'s jobs share these: one base model, one prompt, one evaluation."""


DECODING = ("max_new_tokens", "temperature", "top_p", "top_k", "stop_text", "thinking", "prompt", "prompt_history")
"""PPO settings that runs sampling in one batch must share (:meth:`LMPolicy.decoding`; ``thinking``
and the prompt settings change the prompt)."""

TOGETHER = 5
"""Most runs :func:`together_batches` puts in one :func:`finetune_together` call. Measured on the
surrogate (one decision, G = 8, stacked decoder, alone on a core): 25.5 ms of sampling per run
alone, 12.9 per run for 5 together, 10.1 for 10; but in the cold ``quick`` run, with other
notebooks on the machine, batches of 10 cost ~80 CPU-s per 3-episode Table 2 run against ~60 in
batches of 5 (ten stacked models, thirty in a checkpoint selection, no longer stay in cache)."""


def together_batches(jobs: Sequence[dict], cap: int = TOGETHER) -> list[list[int]]:
    """Indices of ``jobs`` (:func:`finetune` keyword arguments) in batches for :func:`finetune_together`:
    jobs that agree on :data:`SHARED` and :data:`DECODING` (rows of one table on one intersection,
    the levels of a sweep), at most ``cap`` per batch, split evenly, in order. Jobs already in the
    cache form batches of their own (loaded, not trained), so they do not unbalance the others."""
    if cap < 1:
        raise ValueError(f"together_batches: cap must be >= 1, got {cap}")
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        plan = _plan(**job)
        decoding = {k: (job.get("ppo") or {}).get(k) for k in DECODING}
        key = json.dumps([{name: plan[name] for name in SHARED}, decoding, _cached(plan)], sort_keys=True, default=str)
        groups.setdefault(key, []).append(i)
    batches = []
    for members in groups.values():
        n = -(-len(members) // cap)
        batches += [members[k * len(members) // n : (k + 1) * len(members) // n] for k in range(n)]
    return batches


def finetune_unique(jobs: Sequence[dict], executor: str = "serial", n_jobs: int | None = None) -> list[dict]:
    """:func:`finetune` of each job through :func:`llmtraffic.study.run_grid`, each distinct job
    once, in the batches of :func:`together_batches`; results in the order of ``jobs``."""
    keys = [json.dumps(job, sort_keys=True, default=str) for job in jobs]
    distinct = dict(zip(keys, jobs))
    unique = list(distinct)
    batches = [[unique[i] for i in batch] for batch in together_batches(list(distinct.values()))]
    grouped = study.run_grid(finetune_together, [{"jobs": [distinct[k] for k in batch]} for batch in batches],
                             executor=executor, jobs=n_jobs, desc=f"fine-tunes (up to {TOGETHER} together)")
    by_key = {k: r for batch, outs in zip(batches, grouped) for k, r in zip(batch, outs, strict=True)}
    return [by_key[k] for k in keys]


def _cached(plan: dict) -> bool:
    """Whether :func:`finetune_together` would load this job's result (keyed by this module's source)."""
    return study.is_cached("tsc_finetune", plan["params"], finetune_together)


def finetune_together(jobs: Sequence[dict]) -> list[dict]:
    """:func:`finetune` of each job (its keyword arguments), the uncached ones trained, selected
    and evaluated together: on CPU, where the surrogate samples through a stacked decoder, every
    decision of all of them is one batch (:func:`train_together`, ~2x cheaper per run for five
    agent seeds), each run getting what it gets alone (up to float rounding). The jobs must
    agree on :data:`SHARED` (e.g. the agent seeds of a table row). Each job keeps its own cache
    entry, under the key :func:`finetune` uses. Elsewhere (an HF backbone) they run one by one."""
    if not jobs:
        raise ValueError("finetune_together: no jobs")
    plans = [_plan(**job) for job in jobs]
    for name in SHARED:
        if len({json.dumps(plan[name], sort_keys=True) for plan in plans}) > 1:
            raise ValueError(f"finetune_together: the jobs differ in {name!r}; run them apart")
    first = plans[0]
    reason = backbone_unavailable(first["backbone"])
    if reason:
        return [{"params": plan["params"], "unavailable": reason} for plan in plans]

    def build(missing: list[int], folders: list[Path]) -> list[dict]:
        chosen = [plans[i] for i in missing]
        with torch_threads(TORCH_THREADS):
            policy, prompter = _load(chosen[0])
            if PolicyGroup([policy]).decoder() is None:  # no stacked decoder: one run after the other
                return [_finetune_runs([policy if k == 0 else _load(plan)[0]], prompter, [plan], [folder])[0]
                        for k, (plan, folder) in enumerate(zip(chosen, folders))]
            policies = [policy, *(_load(plan)[0] for plan in chosen[1:])]
            return _finetune_runs(policies, prompter, chosen, folders)

    return study.cached_together("tsc_finetune", [plan["params"] for plan in plans], build)


def _plan(backbone: str, scenario: str, oracle: dict, eval_seeds: Sequence[int], select_seed: int = 50,
          ppo: dict | None = None, surrogate: dict | None = None, eval_scenarios: Sequence[str] | None = None,
          eval_episode_s: int | None = None, probe_every: int = 10) -> dict:
    """A :func:`finetune` job resolved: its :class:`OracleConfig`, evaluation settings and cache params."""
    cfg = OracleConfig(**{**oracle, "scenario": scenario})
    eval_episode_s = eval_episode_s or cfg.episode_s
    eval_scenarios = list(eval_scenarios or [scenario])
    params = {**backbone_params(backbone, scenario, ppo, surrogate), "oracle": json.loads(json.dumps(asdict(cfg))),
              "eval_seeds": list(eval_seeds), "select_seed": select_seed, "eval_scenarios": eval_scenarios,
              "eval_episode_s": eval_episode_s, "probe_every": probe_every}
    return dict(backbone=backbone, scenario=scenario, cfg=cfg, ppo=ppo, surrogate=surrogate, eval_seeds=list(eval_seeds),
                select_seed=select_seed, eval_scenarios=eval_scenarios, eval_episode_s=eval_episode_s,
                probe_every=probe_every, params=params)


def _load(plan: dict) -> tuple[LMPolicy, Prompter]:
    return load_backbone(plan["backbone"], plan["scenario"], plan["ppo"], plan["surrogate"])


def _finetune_runs(policies: list[LMPolicy], prompter: Prompter, plans: list[dict], folders: list[Path]) -> list[dict]:
    """Train, select and evaluate the runs of ``plans`` together (checkpoints in ``folders``, so a
    killed build resumes from them)."""
    first = plans[0]
    trained = train_together(policies, prompter, [plan["cfg"] for plan in plans], folders)
    best: list[Path | None] = [None] * len(plans)
    selection: list[list[dict]] = [[] for _ in plans]
    several = [k for k, t in enumerate(trained) if len(t["checkpoints"]) > 1 and "best" not in t]
    for k, t in enumerate(trained):
        if k not in several:  # one candidate, or chosen before an interruption: no held-out episode spent
            best[k], selection[k] = t.get("best", t["checkpoints"][0]), t.get("selection", [])
            policies[k].load(best[k])
    if several:
        chosen = select_best_together([policies[k] for k in several], prompter,
                                      [trained[k]["checkpoints"] for k in several], first["scenario"],
                                      first["select_seed"], first["eval_episode_s"])
        for k, (path, rows) in zip(several, chosen):
            best[k], selection[k] = path, rows
            retain(folders[k], path, rows)  # only the best and the last stay on disk
    after = {sc: evaluate_runs(policies, prompter, sc, first["eval_seeds"], first["eval_episode_s"],
                               first["probe_every"], first["backbone"]) for sc in first["eval_scenarios"]}
    return [{"params": plan["params"], "training": trained[k]["episodes"], "selection": selection[k],
             "best_checkpoint": str(best[k]), "after": {sc: after[sc][k] for sc in after}}
            for k, plan in enumerate(plans)]


# ----------------------------------------------------------------------------- tables


def after_of(result: dict, scenario: str | None = None) -> dict:
    """The evaluation of a :func:`finetune` result on ``scenario`` (default: its training
    scenario), or ``{"unavailable": reason}`` as the result says."""
    if "unavailable" in result:
        return {"unavailable": result["unavailable"]}
    return result["after"][scenario or result["params"]["oracle"]["scenario"]]


def pool(evaluations: Sequence[dict], agent_seeds: Sequence[int] | None = None) -> dict:
    """One evaluation from several (e.g. one per training seed): runs, probes and traces pooled;
    ``{"unavailable": reason}`` if any of them is. ``agent_seeds`` (one per evaluation) tags each
    run with the training seed it came from, so paired differences match runs of equal seeds."""
    for evaluation in evaluations:
        if "unavailable" in evaluation:
            return {"unavailable": evaluation["unavailable"]}
    if not evaluations:
        raise ValueError("pool: no evaluations")
    if agent_seeds is not None and len(agent_seeds) != len(evaluations):
        raise ValueError(f"pool: {len(agent_seeds)} agent seeds for {len(evaluations)} evaluations")
    tags = agent_seeds if agent_seeds is not None else [None] * len(evaluations)
    first = evaluations[0]
    return {"scenario": first["scenario"], "episode_s": first["episode_s"],
            "runs": [r if a is None else {**r, "agent_seed": a} for e, a in zip(evaluations, tags) for r in e["runs"]],
            "agreement": [a for e in evaluations for a in e["agreement"]],
            "traces": [t for e in evaluations for t in e["traces"]]}
