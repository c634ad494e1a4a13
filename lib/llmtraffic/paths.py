"""Where the study reads and writes: repository root, data, figures, runs (below every layer: the
shared layers and the studies all read it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""Repository root (``lib/llmtraffic/paths.py`` → two levels up)."""


DATA_ENV = "LLMTRAFFIC_DATA"
NEEDS_ENV = "LLMTRAFFIC_DATA_NEEDS"
"""Set by the runner for each notebook: a JSON list of the data folders the notebook declares."""


class DataMissingError(FileNotFoundError):
    """A data file the study needs is not in the data directory."""


class UndeclaredDataError(RuntimeError):
    """A notebook read a data file that its metadata ``llmtraffic.data`` does not declare."""


def data_dir() -> Path:
    """The data directory: ``$LLMTRAFFIC_DATA``, else ``<repo>/data``."""
    return Path(os.environ.get(DATA_ENV) or ROOT / "data").resolve()


def is_under(relative: str, prefix: str) -> bool:
    """Whether the data path ``relative`` is ``prefix`` or lies in the folder ``prefix``."""
    prefix = prefix.rstrip("/")
    return relative == prefix or relative.startswith(prefix + "/")


def data_path(relative: str | os.PathLike) -> Path:
    """Absolute path of a data file, or :class:`DataMissingError` naming it and ``make data``.

    Inside a notebook run by the runner, a file outside the notebook's declared data raises
    :class:`UndeclaredDataError`: the runner fetches (or skips for) exactly what is declared, so a
    declaration must not miss a file.
    """
    declared = os.environ.get(NEEDS_ENV)
    if declared is not None and not any(is_under(str(relative), p) for p in json.loads(declared)):
        raise UndeclaredDataError(
            f"data file {relative!s} is not declared by this notebook (it declares {json.loads(declared)}): "
            'add its folder to the notebook\'s metadata {"llmtraffic": {"data": [...]}}'
        )
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
