"""What made an output: code version, packages, hardware."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata

from .paths import ROOT

KEY_PACKAGES = (
    "llmtraffic", "numpy", "pandas", "torch", "transformers", "peft", "bitsandbytes",
    "simpy", "matplotlib", "papermill",
)
SUMO_PACKAGES = ("libsumo", "eclipse-sumo")


def git_state(root=ROOT) -> dict:
    """``{"commit": sha or None, "dirty": bool or None}`` of the repository at ``root``."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=20
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def package_versions(names=KEY_PACKAGES) -> dict[str, str | None]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@lru_cache(maxsize=1)
def hardware() -> dict:
    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "gpu": None,
    }
    torch = sys.modules.get("torch")  # only ask torch if the notebook already imported it
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def record() -> dict:
    """Code, packages and hardware of this process (SUMO versions when SUMO was imported)."""
    names = KEY_PACKAGES + (SUMO_PACKAGES if "libsumo" in sys.modules or "traci" in sys.modules else ()) + (("cityflow",) if "cityflow" in sys.modules else ())
    return {
        "git": git_state(),
        "python": platform.python_version(),
        "packages": package_versions(names),
        "hardware": hardware(),
    }
