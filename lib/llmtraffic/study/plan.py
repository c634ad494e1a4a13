"""Plans printed before a run: what a notebook's settings will cost on a GPU, and the settings
that cannot fit it (exit status 2), registered by the study that knows (as the pre-flight checks
are, :mod:`.preflight`; the signal study's: :mod:`llmtraffic.signal.gpu_plan`).

    python -m llmtraffic.study plan --profile paper --only tsc_main
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GPU_ENV = "LLMTRAFFIC_GPU_GIB"
"""Plan for a GPU of this many GiB instead of the CUDA device found (``study plan --gpu-gib``)."""

Describe = Callable[[str, dict[str, Any]], "str | None"]
"""``(notebook stem, full parameters)`` → the plan's text, or None where it has nothing to plan."""

_planners: dict[str, tuple[Describe, Describe]] = {}


def register(name: str, describe: Describe, refuse: Describe) -> None:
    """Add (or replace, by ``name``) a planner: ``describe`` prints, ``refuse`` says why the
    settings cannot fit the GPU found (or None)."""
    _planners[name] = (describe, refuse)


def describe(stem: str, params: dict[str, Any]) -> list[str]:
    """Every registered planner's text for one notebook (the studies register theirs when
    :func:`~llmtraffic.study.preflight.load_study_checks` imports their checks)."""
    return [t for d, _ in _planners.values() if (t := d(stem, params))]


def refusals(stem: str, params: dict[str, Any]) -> list[str]:
    """Why the settings of one notebook cannot fit the GPU found (empty: they fit, or no GPU)."""
    return [t for _, r in _planners.values() if (t := r(stem, params))]
