"""The GPU plan of an OracleTSC notebook: every fine-tune of a Hugging Face backbone it will run,
with its predicted peak GPU memory and hours (:mod:`llmtraffic.rl.llm_ppo.memory`), printed
before any GPU work; and the refusal of a setting whose peak exceeds the GPU found.

    python -m llmtraffic.study plan --profile paper --only tsc_main

A backbone's sizes come from its ``config.json`` where the weights are here, else from the
published config of the Table 1 backbone it names (:data:`~.backbones.PUBLISHED_CONFIGS`). The
prompt is the paper's (A.4 + A.5 with two past states) at its longest in the first 12 decisions,
counted with SmolLM2's tokenizer (:data:`PROMPT_TOKENS`; the paper backbones' larger vocabularies
count fewer); answers run to ``max_new_tokens`` (the worst case).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..study.plan import GPU_ENV
from ..rl.llm_ppo.memory import GPUS, GiB, Hours, Memory, Shape, Work, fitting_micro_batch, gpu_peak, predict_hours, predict_memory

PROMPT_TOKENS = {"cologne1": 2943, "hangzhou1x1": 2967, "synthetic": 2967}
"""The longest paper prompt of the first 12 decisions of a max-queue episode (SmolLM2's tokenizer
through its chat template, ``benchmarks/gpu_ppo.py`` counts them), per intersection."""



@dataclass(frozen=True)
class FineTune:
    """One kind of fine-tune a notebook runs, ``runs`` times (agent seeds, sweep levels)."""

    backbone: str
    scenario: str
    runs: int
    ppo: dict
    oracle: dict


def finetunes(stem: str, p: dict[str, Any]) -> list[FineTune]:
    """The fine-tunes of Hugging Face backbones that notebook ``stem`` runs with parameters ``p``
    (the surrogate and GGUF backbones run on the CPU and are not planned)."""
    seeds = len(p.get("agent_seeds") or [0])
    oracle = {k: p[k] for k in ("episodes", "episode_s", "update_every_s", "checkpoint_every_s") if k in p}
    oracle["eval_episodes"] = len(p.get("eval_seeds") or [0, 1, 2])
    ppo = dict(p.get("ppo") or {})
    jobs: list[tuple[str, str, int, dict]] = []
    if stem == "tsc_main":
        for sc in p.get("scenarios", []):
            backbones = [p["backbone"], *[b for b in p.get("paper_backbones", []) if b != p["backbone"]]]
            jobs += [(b, sc, seeds * (2 if b == p["backbone"] else 1), ppo) for b in backbones]  # + random reward
    elif stem == "tsc_reward_ablation":
        jobs.append((p["backbone"], p["scenario"], 5 * seeds, ppo))  # Table 2's four rewards and the control
    elif stem == "tsc_entropy_temperature":
        jobs.append((p["backbone"], p["scenario"], (2 + len(p.get("taus", []))) * seeds, ppo))
    elif stem == "tsc_hurdle":
        backbones = p.get("backbones", [])
        jobs += [(b, p["scenario"], (len(p.get("hurdles", [])) + (k == 0)) * seeds, ppo) for k, b in enumerate(backbones)]
    elif stem == "tsc_generalization":
        jobs += [(p["backbone"], train, 1, ppo) for train, _ in p.get("transfers", [])]
    elif stem == "tsc_clip":
        per = p.get("backbones") or {}
        jobs += [(per.get(sc, p["backbone"]), sc, len(p.get("clip_highs", [])), ppo) for sc in p.get("scenarios", [])]
    elif stem == "tsc_seeds_and_g":
        g = p.get("group_size", 8)
        jobs.append((p["backbone"], p["scenario"], seeds, {**ppo, "group_size": g}))
        jobs += [(p["backbone"], p["scenario"], 1, {**ppo, "group_size": x}) for x in p.get("group_sizes", []) if x != g]
    elif stem == "tsc_ppo_sensitivity":
        levels = sum(len(p.get(k, [])) for k in ("learning_rates", "gae_lambdas", "gammas")) + 1
        jobs.append((p["backbone"], p["scenario"], levels, ppo))
    return [FineTune(b, sc, n, kw, oracle) for b, sc, n, kw in jobs if _on_gpu(b)]


def _on_gpu(backbone: str) -> bool:
    from .backbones import SURROGATE, is_real_cpu_backbone

    return bool(backbone) and backbone != SURROGATE and not is_real_cpu_backbone(backbone)


def shape_of(backbone: str) -> Shape | None:
    """The backbone's sizes: its local ``config.json``, else its Table 1 identity's published one."""
    from .backbones import PUBLISHED_CONFIGS, hf_path, paper_identity

    path = hf_path(backbone)
    if path is not None and (path / "config.json").is_file():
        import json

        return Shape.from_config(json.loads((path / "config.json").read_text()))
    name = paper_identity(backbone)
    return Shape.from_config(PUBLISHED_CONFIGS[name]) if name else None


def work_of(job: FineTune) -> Work:
    """The sizes of one fine-tune: its PPO settings (:func:`~.backbones.ppo_config`) and schedule."""
    from .backbones import ppo_config

    cfg = ppo_config(job.backbone, job.scenario, **job.ppo)
    o = {"episodes": 2, "episode_s": 3600, "update_every_s": 360, "checkpoint_every_s": 720, **job.oracle}
    return Work(prompt_tokens=PROMPT_TOKENS.get(job.scenario, max(PROMPT_TOKENS.values())),
                answer_tokens=cfg.max_new_tokens, group_size=cfg.group_size, minibatch=cfg.minibatch_size,
                micro_batch=cfg.micro_batch_size, checkpointing=cfg.gradient_checkpointing, lora_rank=cfg.lora_rank,
                episodes=o["episodes"], decisions=o["episode_s"] // 10, updates_per_episode=o["episode_s"] // o["update_every_s"],
                checkpoints_per_episode=max(1, o["episode_s"] // o["checkpoint_every_s"]), eval_episodes=o["eval_episodes"])


@dataclass(frozen=True)
class Line:
    """One fine-tune's prediction."""

    job: FineTune
    work: Work | None
    memory: Memory | None
    hours: dict[str, Hours]


def predict(stem: str, params: dict[str, Any]) -> list[Line]:
    lines = []
    for job in finetunes(stem, params):
        shape = shape_of(job.backbone)
        if shape is None:
            lines.append(Line(job, None, None, {}))
            continue
        work = work_of(job)
        lines.append(Line(job, work, predict_memory(shape, work), {k: predict_hours(shape, work, g) for k, g in GPUS.items()}))
    return lines


def gpu_capacity() -> tuple[str, float] | None:
    """(name, bytes) of the GPU to plan for: ``LLMTRAFFIC_GPU_GIB``, else the CUDA device, else None."""
    if os.environ.get(GPU_ENV):
        return f"{GPU_ENV}={os.environ[GPU_ENV]}", float(os.environ[GPU_ENV]) * GiB
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.name, float(props.total_memory)


def text(stem: str, params: dict[str, Any]) -> str | None:
    """The plan as printed: one row per fine-tune, the notebook's total GPU-hours per GPU; None
    for a notebook without fine-tunes of Hugging Face backbones."""
    if not any(_on_gpu(b) for b in _named(params)):
        return None
    lines = predict(stem, params)
    if not lines:
        return None
    head = (f"GPU plan of {stem}: {sum(l.job.runs for l in lines)} fine-tunes of Hugging Face backbones "
            f"(NF4 base, bf16, LoRA on every layer; answers at full length, the worst case)\n"
            "| backbone | scenario | runs | prompt + answer tokens | G | micro-batch of B | grad. ckpt | "
            "peak GiB (update / generate) | " + " | ".join(f"{g.name}: h per fine-tune" for g in GPUS.values()) + " |")
    rows = [head, "|" + "---|" * (8 + len(GPUS))]
    totals = dict.fromkeys(GPUS, 0.0)
    for l in lines:
        if l.memory is None:
            rows.append(f"| {l.job.backbone} | {l.job.scenario} | {l.job.runs} | unknown sizes: no config.json here "
                        f"and not a Table 1 backbone |" + " |" * (4 + len(GPUS)))
            continue
        w, m = l.work, l.memory
        for k in GPUS:
            totals[k] += l.job.runs * l.hours[k].total
        rows.append(f"| {l.job.backbone} | {l.job.scenario} | {l.job.runs} | {w.prompt_tokens} + {w.answer_tokens} | "
                    f"{w.group_size} | {w.micro} of {w.minibatch} | {'on' if w.checkpointing else 'off'} | "
                    f"{gpu_peak_of(m.update):.1f} / {gpu_peak_of(m.generate):.1f} | "
                    + " | ".join(_hours(l.hours[k], gpu.memory, m) for k, gpu in GPUS.items()) + " |")
    rows.append("total: " + ", ".join(f"{totals[k]:.0f} GPU-hours on one {g.name}" for k, g in GPUS.items())
                + " (assumptions: rl/llm_ppo/memory.py, docs/gpu.md)")
    return "\n".join(rows)


def gpu_peak_of(allocated: float) -> float:
    """GiB a GPU must hold for ``allocated`` bytes (allocator slack, CUDA context)."""
    return gpu_peak(Memory(allocated, 0, 0, 0, 0, 0, 0)) / GiB  # peak of a Memory holding just these bytes


def _hours(h: Hours, capacity: float, m: Memory) -> str:
    fits = "" if gpu_peak(m) <= capacity else " (does not fit)"
    return f"{h.total:.1f} (train {h.training:.1f}, update {h.updates:.1f}, select {h.selection:.1f}, eval {h.evaluation:.1f}){fits}"


def refusal(stem: str, params: dict[str, Any]) -> str | None:
    """Why these settings cannot run on the GPU found (a fine-tune's predicted peak exceeds it),
    naming the micro-batch that would fit; None where they fit or no GPU is found."""
    capacity = gpu_capacity() if any(_on_gpu(b) for b in _named(params)) else None
    if capacity is None:
        return None
    name, room = capacity
    problems = []
    for l in predict(stem, params):
        if l.memory is None or gpu_peak(l.memory) <= room:
            continue
        shape = shape_of(l.job.backbone)
        fit = fitting_micro_batch(shape, l.work, room)
        remedy = (f"set ppo: {{micro_batch_size: {fit}}} (predicted {gpu_peak(predict_memory(shape, _micro(l.work, fit))) / GiB:.1f} GiB)"
                  if fit else "no micro-batch fits: turn on gradient_checkpointing, shorten max_new_tokens or use a larger GPU")
        problems.append(f"{l.job.backbone} on {l.job.scenario}: predicted peak {gpu_peak(l.memory) / GiB:.1f} GiB "
                        f"(micro-batch {l.work.micro}, checkpointing {'on' if l.work.checkpointing else 'off'}) exceeds "
                        f"{name} ({room / GiB:.1f} GiB); {remedy}")
    if not problems:
        return None
    return "does not fit the GPU: " + "; ".join(problems) + "\n" + (text(stem, params) or "")


def _micro(work: Work, m: int) -> Work:
    from dataclasses import replace

    return replace(work, micro_batch=m)


def _named(params: dict[str, Any]) -> list[str]:
    """Every backbone string the parameters name (``backbone``, ``backbones``, ``paper_backbones``)."""
    out = []
    for key in ("backbone", "backbones", "paper_backbones"):
        v = params.get(key)
        v = list(v.values()) if isinstance(v, dict) else v
        out += [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, str)]
    return out
