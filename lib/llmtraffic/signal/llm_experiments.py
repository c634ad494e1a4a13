"""Experiment jobs of the OracleTSC notebooks: named table rows, each over agent seeds.

A :class:`Row` is one line of Table 1 or 2 (or one point of Figs. 8–9): a pooled evaluation
over ``agent_seeds`` × ``eval_seeds`` (or the reason it could not run) and the fine-tune results
behind it. :func:`finetune_rows` runs every distinct fine-tune of a table once through
:func:`llmtraffic.study.run_grid`, so two rows that are the same job say so (``same_as``)
instead of appearing as two runs; the runs of one intersection train together, up to
:data:`~llmtraffic.signal.llm_jobs.TOGETHER` at a time (each as it would alone, see
:func:`~llmtraffic.signal.llm_jobs.finetune_together`). Agent seed ``s`` trains on SUMO episodes
``AGENT_SEED_STRIDE·s + e`` (episode ``e``) and seeds PPO (adapters, value head, sampling) with
``s``; the pre-trained backbone is the same for every agent seed, as a real LLM would be.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import study
from ..rl.llm_ppo import PPOConfig
from .controls import GREEDY_BEFORE, MAX_QUEUE, RANDOM_REWARD, greedy, heuristic_evaluation, random_reward_oracle
from .llm_jobs import after_of, evaluate_backbone, finetune_unique, pool

AGENT_SEED_STRIDE = 10
"""Agent seed s trains on SUMO seeds 10·s, 10·s + 1, … (fewer than 10 episodes per run), apart
from the selection (50) and evaluation (100+) seeds."""


@dataclass
class Row:
    """One table row: a pooled evaluation, or the reason there is none."""

    name: str
    evaluation: dict
    """Pooled over agent seeds × eval seeds (see :func:`llmtraffic.signal.llm_jobs.pool`), or
    ``{"unavailable": reason}``."""
    results: list[dict] = field(default_factory=list)
    """The fine-tune result of each agent seed (training curves, checkpoint selection)."""
    same_as: str = ""
    """The name of an earlier row that is the very same job (shared, not a second run)."""

    @property
    def unavailable(self) -> str:
        return self.evaluation.get("unavailable", "")


def agent_job(spec: dict, agent_seed: int) -> dict:
    """:func:`~llmtraffic.signal.llm_jobs.finetune` keyword arguments of ``spec`` for one agent seed."""
    oracle = {**spec["oracle"], "train_seed": AGENT_SEED_STRIDE * agent_seed, "seed": agent_seed}
    return {**spec, "oracle": oracle, "ppo": {**(spec.get("ppo") or {}), "seed": agent_seed}}


def _key(job: dict) -> str:
    return json.dumps(job, sort_keys=True, default=str)


def finetune_rows(specs: dict[str, dict], agent_seeds: Sequence[int], executor: str = "serial",
                  jobs: int | None = None) -> dict[str, Row]:
    """Rows of fine-tunes: ``specs`` maps a row name to ``finetune`` keyword arguments (without
    the agent-seed parts); each distinct job runs once, in one grid."""
    return finetune_tables({"": specs}, agent_seeds, executor, jobs)[""]


def finetune_tables(tables: dict[str, dict[str, dict]], agent_seeds: Sequence[int], executor: str = "serial",
                    jobs: int | None = None) -> dict[str, dict[str, Row]]:
    """:func:`finetune_rows` of several tables (table name → row specs) in one grid, so that the
    workers stay busy across tables; ``same_as`` names an earlier row of the same table."""
    if not agent_seeds:
        raise ValueError("finetune_rows: agent_seeds is empty")
    per_row = {(t, name): [agent_job(spec, s) for s in agent_seeds] for t, specs in tables.items()
               for name, spec in specs.items()}
    every = [j for js in per_row.values() for j in js]
    results = dict(zip(map(_key, every), finetune_unique(every, executor, jobs)))
    out: dict[str, dict[str, Row]] = {t: {} for t in tables}
    first: dict[tuple, str] = {}
    for (t, name), js in per_row.items():
        signature = (t, *(_key(j) for j in js))
        outs = [results[_key(j)] for j in js]
        out[t][name] = Row(name, pool([after_of(r) for r in outs], agent_seeds), outs, first.get(signature, ""))
        first.setdefault(signature, name)
    return out


def before_row(name: str, backbone: str, scenario: str, eval_seeds: Sequence[int], episode_s: int,
               ppo: dict | None = None, surrogate: dict | None = None) -> Row:
    """The backbone before fine-tuning at its own decoding settings."""
    return Row(name, evaluate_backbone(backbone, scenario, eval_seeds, episode_s, ppo, surrogate))


def before_rows(specs: Sequence[tuple[str, dict]], executor: str = "serial", jobs: int | None = None) -> list[Row]:
    """Rows of backbones before fine-tuning, run in one grid: each ``(name, spec)`` names a row and
    gives its :func:`~llmtraffic.signal.llm_jobs.evaluate_backbone` keyword arguments (a real
    backbone's episodes cost minutes each, so the rows run in parallel where ``executor`` allows)."""
    found = study.run_grid(evaluate_backbone, [spec for _, spec in specs], executor=executor, jobs=jobs,
                           desc="backbones before fine-tuning")
    return [Row(name, evaluation) for (name, _), evaluation in zip(specs, found)]


def control_specs(spec: dict) -> dict[str, dict]:
    """The fine-tuned control row (:mod:`.controls`) of the fine-tune ``spec`` of the plain reward,
    as :func:`finetune_rows` specs (to run in one grid with a table's other fine-tunes)."""
    return {RANDOM_REWARD: {**spec, "oracle": random_reward_oracle(spec["oracle"])}}


def fixed_control_rows(spec: dict, episode_s: int) -> dict[str, Row]:
    """The two control rows without training: the backbone of ``spec`` decoded greedily, and the
    max-queue heuristic, on ``spec``'s eval seeds."""
    return {GREEDY_BEFORE: before_row(GREEDY_BEFORE, spec["backbone"], spec["scenario"], spec["eval_seeds"], episode_s,
                                      greedy(spec.get("ppo")), spec.get("surrogate")),
            MAX_QUEUE: Row(MAX_QUEUE, heuristic_evaluation(spec["scenario"], spec["eval_seeds"], episode_s))}


def control_rows(spec: dict, agent_seeds: Sequence[int], episode_s: int, executor: str = "serial",
                 jobs: int | None = None) -> dict[str, Row]:
    """The three control rows (:mod:`.controls`) for the fine-tune ``spec`` of the plain reward."""
    return {**finetune_rows(control_specs(spec), agent_seeds, executor, jobs), **fixed_control_rows(spec, episode_s)}


def training_curves(row: Row, key: str = "queue") -> list[list[float]]:
    """``key`` of each training episode, one list per agent seed (Fig. 8 as curves over episodes)."""
    return [[e[key] for e in r["training"]] for r in row.results if "training" in r]


def real_setting(run: dict) -> str:
    """What a real-backbone row ran, for its label: ``run`` holds ``episodes``, ``episode_s``,
    ``update_every_s``, ``buffer_s`` and the ``ppo`` overrides (the rest is :class:`PPOConfig`'s)."""
    cfg = PPOConfig(**run["ppo"])
    stop = f", answers stopped at {cfg.stop_text}" if cfg.stop_text else ""
    lora = f"LoRA on the top {cfg.lora_layers} layers" if cfg.lora_layers else "LoRA on every layer"
    rate = f", actor learning rate {cfg.actor_lr:g} (paper: 2.5e-5)" if "actor_lr" in run["ppo"] else ""
    return (f"{run['episodes']} PPO episode(s) of {run['episode_s']} s (paper: 3600 s), an update every "
            f"{run['update_every_s']} s on the last {run['buffer_s']} s, answers {cfg.answer}, {cfg.prompt} prompt with "
            f"{cfg.prompt_history} past decision(s), {cfg.max_new_tokens} new tokens{stop}, {lora}{rate}, fp32 base")


def real_oracle(run: dict, invalid_penalty: float, reward: dict) -> dict:
    """The fine-tune settings (``oracle`` of a spec) of a real-backbone row from its ``run`` settings."""
    keys = ("episodes", "episode_s", "update_every_s", "buffer_s", "checkpoint_every_s")
    return {**{k: run[k] for k in keys}, "invalid_penalty": invalid_penalty, "reward": reward}


def rewordings(evaluation: dict) -> str:
    """Distinct wordings of valid answers beyond one per phase, summed over the agreement probes,
    and in how many probes they occur ("—" without probes)."""
    probes = evaluation.get("agreement") or []
    if not probes:
        return "—"
    counts = [a.get("rewordings", 0) for a in probes]
    return f"{sum(counts)} in {sum(c > 0 for c in counts)}/{len(probes)} probes"
