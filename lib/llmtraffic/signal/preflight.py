"""The signal study's pre-flight check, registered with the harness (:mod:`llmtraffic.study.preflight`).

``backbone`` (and each of ``backbones``, a list or a mapping from scenario, and of
``paper_backbones``, the Table 1 rows ``tsc_main`` fine-tunes besides ``backbone``): anything but
``surrogate-tiny`` needs local weights and a CUDA GPU; else :class:`~llmtraffic.study.preflight.ResourceError`
naming the ``hf download`` that fetches them. Checking the default backbone imports no torch.

It also registers the GPU plan (:mod:`.gpu_plan`): printed before a run, and a setting whose
predicted peak memory exceeds the GPU found is refused (exit status 2).
"""

from __future__ import annotations

from ..study import plan, preflight

SURROGATE = "surrogate-tiny"
"""The CPU stand-in backbone (``backbones.SURROGATE``), named here so that checking the default
backbone does not import torch (:mod:`.backbones` does)."""


def backbone_problem(backbone: str) -> str | None:
    """Why ``backbone`` cannot run here and what to do instead, or None."""
    if backbone == SURROGATE:
        return None
    import torch

    from .backbones import GATED, PAPER_BACKBONES, backbone_unavailable

    reason = backbone_unavailable(backbone)
    if reason is None:
        return None
    hub = PAPER_BACKBONES.get(backbone, backbone)
    missing = ("this machine has no CUDA GPU" if not torch.cuda.is_available() else
               f"no local weights (a folder {backbone!r} or the Hugging Face model {hub!r} in the local cache)")
    gated = (f" ({hub} is gated: accept its licence on huggingface.co and log in with `hf auth login` or HF_TOKEN first)"
             if backbone in GATED else "")
    return (f"cannot run here: it {reason}, and {missing}. Run it on a GPU machine after `hf download {hub}`{gated}, "
            f"which fills the cache at HF_HUB_CACHE (default $HF_HOME/hub, ~/.cache/huggingface/hub; docs/gpu.md), "
            f"or use backbone={SURROGATE} (the CPU stand-in)")


def _on_gpu(params: dict) -> bool:
    """Whether a notebook's parameters name a backbone other than the surrogate (no torch import)."""
    named = [params.get(k) for k in ("backbone", "backbones", "paper_backbones")]
    flat = [x for v in named for x in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else [v])]
    return any(isinstance(b, str) and b != SURROGATE for b in flat)


def _describe(stem: str, params: dict) -> str | None:
    from .gpu_plan import text

    return text(stem, params) if _on_gpu(params) else None


def _refuse(stem: str, params: dict) -> str | None:
    from .gpu_plan import refusal

    return refusal(stem, params) if _on_gpu(params) else None


preflight.register_resource("backbone", ("backbone", "backbones", "paper_backbones"), backbone_problem)
plan.register("gpu", _describe, _refuse)
