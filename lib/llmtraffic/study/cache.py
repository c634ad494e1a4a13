"""Expensive artifacts (trained agents, designed rewards, adapters) cached by their parameters.

``cached(kind, params, build)`` returns the artifact stored under
``runs/cache/<kind>/<key>/`` where ``key`` hashes ``params`` and the library version, building
and storing it first when absent. ``--fresh`` (``LLMTRAFFIC_FRESH=1``) rebuilds everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import llmtraffic

from .outputs import atomic_write, atomic_write_text
from .paths import runs_dir

T = TypeVar("T")


def cache_key(kind: str, params: dict[str, Any]) -> str:
    blob = json.dumps({"kind": kind, "params": params, "version": llmtraffic.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def source_digest(*modules: ModuleType) -> str:
    """Digest of the source of ``modules`` (a package counts with every ``.py`` file under it).

    Put it into an artifact's params when the artifact depends on code that may change while
    its parameters do not (a tokenizer, a training loop): editing that code then rebuilds it.
    """
    digest = hashlib.sha256()
    for module in modules:
        path = Path(module.__file__)
        files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
        for f in files:
            digest.update(f.relative_to(path.parent).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir(kind: str, params: dict[str, Any]) -> Path:
    return runs_dir() / "cache" / kind / cache_key(kind, params)


def fresh() -> bool:
    return os.environ.get("LLMTRAFFIC_FRESH", "") not in ("", "0")


def cached(kind: str, params: dict[str, Any], build: Callable[[], T]) -> T:
    """The artifact for ``params``: loaded from the cache, or built by ``build()`` and stored.

    The artifact must be picklable (state dicts, arrays, dataclasses). A corrupt cache entry is
    rebuilt rather than trusted.
    """
    folder = cache_dir(kind, params)
    artifact = folder / "artifact.pkl"
    if artifact.exists() and not fresh():
        try:
            with open(artifact, "rb") as fh:
                return pickle.load(fh)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            pass
    value = build()
    atomic_write(artifact, lambda fh: pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL))
    atomic_write_text(folder / "params.json", json.dumps(params, indent=1, sort_keys=True, default=str) + "\n")
    return value
