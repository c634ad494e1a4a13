"""Where the study reads and writes: repository root, data, figures, runs (below every layer: the
shared layers and the studies all read it)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""Repository root (``lib/llmtraffic/paths.py`` → two levels up)."""


class DataMissingError(FileNotFoundError):
    """A data file the study needs is not in the data directory."""


def data_dir() -> Path:
    """The data directory: ``$LLMTRAFFIC_DATA``, else ``<repo>/data``."""
    return Path(os.environ.get("LLMTRAFFIC_DATA") or ROOT / "data").resolve()


def data_path(relative: str | os.PathLike) -> Path:
    """Absolute path of a data file, or :class:`DataMissingError` naming it and ``make data``."""
    path = data_dir() / relative
    if not path.exists():
        raise DataMissingError(
            f"data file {relative!s} not found in the data directory {data_dir()} "
            f"(looked for {path}). Run `make data` to download the public data sets, "
            "or point LLMTRAFFIC_DATA at a directory that holds them."
        )
    return path


def figures_dir() -> Path:
    """Where notebooks save figures and tables: ``$LLMTRAFFIC_FIGURES``, else ``<repo>/figures``."""
    return Path(os.environ.get("LLMTRAFFIC_FIGURES") or ROOT / "figures").resolve()


def runs_dir() -> Path:
    """Executed notebooks, caches and checkpoints: ``$LLMTRAFFIC_RUNS``, else ``<repo>/runs``."""
    return Path(os.environ.get("LLMTRAFFIC_RUNS") or ROOT / "runs").resolve()
