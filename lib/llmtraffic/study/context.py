"""The running notebook: its name, profile and parameters, recorded with every output."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import preflight
from .paths import ROOT, figures_dir
from .params import differences, load_profile, notebook_parameters, validate

LABEL_KEYS = ("backbone", "designer")
"""Parameters that name what produced a result; they go into every label besides profile and seeds."""


@dataclass
class Context:
    stem: str
    profile: str
    params: dict[str, Any]
    title: str = ""
    changed: dict[str, Any] = field(default_factory=dict)
    """Parameters whose values differ from the profile's (its file over the notebook's defaults)."""
    started: float = field(default_factory=time.time)

    @property
    def out_dir(self) -> Path:
        return figures_dir() / self.stem

    @property
    def seeds(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if "seed" in k.lower()}

    @property
    def label(self) -> str:
        """E.g. ``profile quick · seeds [0, 1] · designer rules`` (for titles and captions)."""
        parts = [f"profile {self.profile}"]
        parts += [f"{k} {v}" for k, v in self.seeds.items()]
        parts += [f"{k} {self.params[k]}" for k in LABEL_KEYS if self.params.get(k) is not None]
        return " · ".join(parts)


_current: Context | None = None


def _notebook_path(stem: str) -> Path:
    env = os.environ.get("LLMTRAFFIC_NOTEBOOK")
    if env and Path(env).stem == stem:
        return Path(env)
    return ROOT / "notebooks" / f"{stem}.ipynb"


def _title(notebook: Path) -> str:
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def begin(stem: str, namespace: dict[str, Any] | None = None) -> Context:
    """Start recording for notebook ``stem``; call it right after the ``parameters`` cell.

    ``namespace`` is the notebook's ``globals()``: the values of the parameters declared in the
    notebook's ``parameters`` cell are taken from it, and checked before any compute as the
    runner checks them (:func:`.preflight.check`: an unknown LLM backend, an unreachable
    endpoint, a backbone without weights stop here). The profile comes from the runner
    (``LLMTRAFFIC_PROFILE``); a notebook opened by hand in JupyterLab records ``interactive``.
    """
    global _current
    notebook = _notebook_path(stem)
    profile = os.environ.get("LLMTRAFFIC_PROFILE", "interactive")
    params: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    title = ""
    if notebook.exists():
        title = _title(notebook)
        if namespace is not None:
            declared = notebook_parameters(notebook)
            params = {k: namespace[k] for k in declared if k in namespace}
            preflight.check(stem, params)
            params_dir = Path(os.environ.get("LLMTRAFFIC_PARAMS") or ROOT / "params")
            base = validate(stem, load_profile(params_dir, stem, profile), declared)
            changed = differences(declared, base, params)
    _current = Context(stem, profile, params, title, changed=changed)
    return _current


def current() -> Context:
    if _current is None:
        raise RuntimeError("no study context: call llmtraffic.study.begin('<notebook stem>', globals()) first")
    return _current
