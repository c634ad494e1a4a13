"""Table 1's rows on real pretrained LLMs (OracleTSC on SmolLM2-135M and Qwen2.5-Coder-1.5B).

Per intersection and backbone:

- zero-shot, ``free`` (the paper's protocol: unconstrained text, Algorithm 2 reads the phase),
  with its valid-answer share;
- zero-shot, ``constrained`` (the answer is one of the phases, :mod:`llmtraffic.rl.constrained`),
  greedy (the most likely phase) and sampled;
- for the fine-tuned backbones: PPO with the OracleTSC reward (hurdle + softmax DSE), H_R
  calibrated from the zero-shot constrained sampled episodes as §3.3 describes
  (:func:`~llmtraffic.signal.oracle.calibrate_hurdle`), and the random-reward control, both
  ``constrained``, same length and agent seeds.

A ``run`` dict holds the settings (``episode_s``, ``episodes``, ``update_every_s``, ``buffer_s``,
``checkpoint_every_s``, ``agent_seeds``, ``eval_seeds``, ``ppo``; optionally ``free_episode_s``
for the free rows and ``zero_shot_only_episode_s`` and ``zero_shot_only_eval_seeds`` for the
backbones evaluated zero-shot only, shorter where a decision decodes text or runs a 1.5B model,
and ``finetune_eval_seeds``, the held-out episodes of each fine-tuned agent). CityFlow (Hangzhou) is
deterministic under greedy decoding, so its greedy rows play one eval episode.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..llm.models import title
from .controls import RANDOM_REWARD, greedy, random_reward_oracle
from .oracle import HURDLE_QUANTILE, calibrate_hurdle

FULL = "Hurdle and Softmax Probability"
DECODINGS = ("free, sampled", "constrained, greedy", "constrained, sampled")
"""The zero-shot rows of a fine-tuned backbone; one evaluated zero-shot only gets the greedy ones."""
DETERMINISTIC = ("hangzhou1x1",)
"""Intersections whose simulator repeats exactly: a greedy policy gives one run whatever the seed."""


def zero_shot(backbone: str, decoding: str) -> str:
    return f"{title(backbone)} zero-shot, {decoding}"


def answer(run: dict) -> str:
    """``free`` or ``constrained``: how the fine-tunes of ``run`` answer (PPOConfig.answer)."""
    return run["ppo"].get("answer", "free")


def tuned(backbone: str, run: dict) -> str:
    return f"{FULL} ({title(backbone)}, {answer(run)})"


def control(backbone: str, run: dict) -> str:
    return f"{RANDOM_REWARD} ({title(backbone)}, {answer(run)})"


def decoding_ppo(ppo: dict, decoding: str) -> dict:
    """The PPO overrides of a zero-shot decoding (``"free, greedy"``, ``"constrained, sampled"``, …)."""
    answer, mode = decoding.split(", ")
    out = {**ppo, "answer": answer}
    return greedy(out) if mode == "greedy" else out


def zero_shot_jobs(backbones: Sequence[str], zero_shot_only: Sequence[str], scenarios: Sequence[str],
                   run: dict) -> list[tuple[str, str, dict]]:
    """(scenario, row name, :func:`~llmtraffic.signal.llm_jobs.evaluate_backbone` keyword arguments)
    of every zero-shot row."""
    jobs = []
    for b in [*zero_shot_only, *backbones]:
        modes = DECODINGS if b in backbones else ("free, greedy", "constrained, greedy")
        for sc in scenarios:
            for mode in modes:
                length = run["episode_s"]
                if mode.startswith("free"):
                    length = run.get("free_episode_s", length)
                if b not in backbones:
                    length = run.get("zero_shot_only_episode_s", length)
                seeds = list(run["eval_seeds"] if b in backbones else run.get("zero_shot_only_eval_seeds", run["eval_seeds"]))
                if mode.endswith("greedy") and sc in DETERMINISTIC:
                    seeds = seeds[:1]
                jobs.append((sc, zero_shot(b, mode), dict(backbone=b, scenario=sc, eval_seeds=seeds, episode_s=length,
                                                          ppo=decoding_ppo(run["ppo"], mode))))
    return jobs


def hurdles(zero_shot_rows: dict[str, dict], backbones: Sequence[str], scenarios: Sequence[str],
            quantile: float = HURDLE_QUANTILE) -> pd.DataFrame:
    """H_R per (scenario, backbone) from the R_env of its zero-shot constrained sampled episodes
    (every decision of every eval seed), with how it was obtained: one row each."""
    rows = []
    for sc in scenarios:
        for b in backbones:
            evaluation = zero_shot_rows[sc][zero_shot(b, "constrained, sampled")].evaluation
            r_env = [r for run in evaluation.get("runs", []) for r in run["r_env"]]
            rows.append({"scenario": sc, "backbone": title(b), "H_R": round(calibrate_hurdle(r_env, quantile), 3),
                         "quantile of R_env": quantile, "decisions": len(r_env),
                         "share of R_env > 0": round(float(np.mean(np.asarray(r_env) > 0)), 3),
                         "from": f"{zero_shot(b, 'constrained, sampled')}, {len(evaluation['runs'])} episode(s) of "
                                 f"{evaluation['episode_s']} s"})
    return pd.DataFrame(rows).set_index(["scenario", "backbone"])


def finetune_specs(backbones: Sequence[str], scenarios: Sequence[str], run: dict, hurdle: pd.DataFrame, tau: float,
                   invalid_penalty: float, select_seed: int) -> dict[str, dict[str, dict]]:
    """Per scenario, the fine-tune specs (:func:`~llmtraffic.signal.llm_experiments.finetune_tables`)
    of each backbone: the OracleTSC reward with its calibrated H_R, and the random-reward control."""
    keys = ("episodes", "episode_s", "update_every_s", "buffer_s", "checkpoint_every_s")
    oracle = {k: run[k] for k in keys} | {"invalid_penalty": invalid_penalty}
    out: dict[str, dict[str, dict]] = {}
    for sc in scenarios:
        out[sc] = {}
        for b in backbones:
            spec = dict(backbone=b, scenario=sc, eval_seeds=run.get("finetune_eval_seeds", run["eval_seeds"]),
                        select_seed=select_seed, ppo=run["ppo"], surrogate={})
            h_r = float(hurdle.loc[(sc, title(b)), "H_R"])
            out[sc][tuned(b, run)] = {**spec, "oracle": {**oracle, "reward": dict(hurdle=h_r, entropy="softmax", tau=tau)}}
            out[sc][control(b, run)] = {**spec, "oracle": random_reward_oracle(oracle)}
    return out


def curves(rows: dict, backbones: Sequence[str], scenarios: Sequence[str], run: dict) -> pd.DataFrame:
    """Per fine-tune and PPO update: the mean queue, valid-answer share and exact phase entropy of
    the decisions it learnt from (a learning curve)."""
    out = [{"scenario": sc, "row": name, "agent_seed": s, "update": k + 1, "queue": u["queue"],
            "valid_rate": u["valid_rate"], "phase_entropy": u.get("phase_entropy", np.nan)}
           for sc in scenarios for b in backbones for name in (tuned(b, run), control(b, run))
           for s, res in zip(run["agent_seeds"], rows[sc][name].results) if "training" in res
           for e in res["training"] for k, u in enumerate(e.get("update_stats", []))]
    return pd.DataFrame(out)


def dse_pairs(rows: dict, backbones: Sequence[str], scenarios: Sequence[str], run: dict) -> pd.DataFrame:
    """The softmax DSE of every training decision of the OracleTSC fine-tunes, the paper's
    estimate from the G answers beside the exact value from the phase distribution."""
    out = [{"scenario": sc, "agent_seed": k, "estimate": a, "exact": b_}
           for sc in scenarios for b in backbones for k, res in enumerate(rows[sc][tuned(b, run)].results)
           if "training" in res for e in res["training"] for a, b_ in e.get("dse", [])]
    return pd.DataFrame(out, columns=["scenario", "agent_seed", "estimate", "exact"])


def setting(run: dict) -> str:
    """What the real-backbone rows ran, for labels."""
    ppo = run["ppo"]
    lora = f"LoRA on the top {ppo['lora_layers']} layers" if ppo.get("lora_layers") else "LoRA on every layer"
    checkpoints = run["episodes"] * run["episode_s"] // run["checkpoint_every_s"]
    chosen = ("the only checkpoint (end of training; no held-out selection)" if checkpoints == 1
              else f"the best of {checkpoints} checkpoints on a held-out episode")
    held_out = len(run.get("finetune_eval_seeds", run["eval_seeds"]))
    return (f"{run['episodes']} PPO episode(s) of {run['episode_s']} s (paper: 4 of 3600 s), {held_out} held-out "
            f"episode(s) per agent, an update every "
            f"{run['update_every_s']} s on the last {run['buffer_s']} s, {chosen}; fine-tunes' answers {answer(run)} "
            f"(free rows: the paper's free text{_length(run, 'free_episode_s')}); G = {ppo.get('group_size', 8)}, "
            f"{ppo.get('prompt', 'paper')} prompt with {ppo.get('prompt_history', 2)} past decision(s), {lora}"
            f"{_rate(ppo)}, fp32 base")


def _rate(ppo: dict) -> str:
    return f", actor learning rate {ppo['actor_lr']:g} (paper: 2.5e-5)" if "actor_lr" in ppo else ""


def _length(run: dict, key: str) -> str:
    return f", {run[key]}-s episodes" if key in run and run[key] != run["episode_s"] else ""
