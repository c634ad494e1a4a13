"""The signal study's pre-flight check, registered with the harness (:mod:`llmtraffic.study.preflight`).

``backbone`` (and each of ``backbones``, a list or a mapping from scenario): anything but
``surrogate-tiny`` needs local weights and a CUDA GPU; else :class:`~llmtraffic.study.preflight.ResourceError`.
Checking the default backbone imports no torch.
"""

from __future__ import annotations

from ..study import preflight

SURROGATE = "surrogate-tiny"
"""The CPU stand-in backbone (``backbones.SURROGATE``), named here so that checking the default
backbone does not import torch (:mod:`.backbones` does)."""


def backbone_problem(backbone: str) -> str | None:
    """Why ``backbone`` cannot run here and what to do instead, or None."""
    if backbone == SURROGATE:
        return None
    import torch

    from .backbones import PAPER_BACKBONES, backbone_unavailable

    reason = backbone_unavailable(backbone)
    if reason is None:
        return None
    missing = ("this machine has no CUDA GPU" if not torch.cuda.is_available() else
               f"no local weights (a folder {backbone!r} or the Hugging Face model "
               f"{PAPER_BACKBONES.get(backbone, backbone)!r} in the local cache)")
    return (f"cannot run here: it {reason}, and {missing}. Run it on a GPU machine after "
            f"`huggingface-cli download {PAPER_BACKBONES.get(backbone, backbone)}`, "
            f"or use backbone={SURROGATE} (the CPU stand-in)")


preflight.register_resource("backbone", ("backbone", "backbones"), backbone_problem)
