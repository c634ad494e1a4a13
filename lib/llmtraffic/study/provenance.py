"""What made an output: code version, packages, hardware, cached artifacts; and the guard that keeps
uncommitted code out of ``figures/``.

**Guard.** Outputs saved into the repository's ``figures/`` folder (figures, tables, claims) must
name the commit that made them, so saving there from a tree with uncommitted changes (modified or
untracked files) in :data:`CODE_PATHS` stops with :class:`DirtyTreeError`. Set
``LLMTRAFFIC_ALLOW_DIRTY=1`` (the runner's ``--allow-dirty``) to save anyway while exploring: the
outputs then carry ``"allow_dirty": true`` in their sidecar and a mark in their stamp and in the
gallery. A figures folder outside the repository (``LLMTRAFFIC_FIGURES``, used by the tests) cannot
be committed, so the guard leaves it alone; its outputs still record the tree's state.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from .. import paths

KEY_PACKAGES = (
    "llmtraffic", "numpy", "pandas", "torch", "transformers", "peft", "bitsandbytes",
    "simpy", "matplotlib", "papermill",
)
SUMO_PACKAGES = ("libsumo", "eclipse-sumo")
CODE_PATHS = ("lib", "notebooks", "params", "pyproject.toml", "requirements-models.txt", "Makefile")
"""What decides what an output shows (the code, its parameters, the pinned environment):
uncommitted changes there make a tree dirty, and commits with equal trees for all of them are one
code version (:mod:`~llmtraffic.study.verify`)."""
ALLOW_DIRTY = "LLMTRAFFIC_ALLOW_DIRTY"
SHOWN = 10  # changed files named in an error or a sidecar


class DirtyTreeError(RuntimeError):
    """Saving into the repository's figures/ from a tree with uncommitted code changes."""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=20
    ).stdout


def changed_files(root: Path | None = None, under: tuple[str, ...] = CODE_PATHS) -> list[str] | None:
    """Modified, staged or untracked (not ignored) files under the folders ``under``; None without git."""
    root = Path(root or paths.ROOT)
    try:
        status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *under)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line[3:] for line in status.splitlines() if line.strip()]


def git_state(root: Path | None = None) -> dict:
    """``{"commit", "dirty", "changed"}`` of the repository at ``root`` (None where git cannot tell).

    ``dirty`` concerns :data:`CODE_PATHS` only: the run's own outputs under ``figures/`` do not
    make the code that produced them uncommitted.
    """
    root = Path(root or paths.ROOT)
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "changed": []}
    changed = changed_files(root)
    return {"commit": commit, "dirty": None if changed is None else bool(changed), "changed": (changed or [])[:SHOWN]}


def allow_dirty() -> bool:
    return os.environ.get(ALLOW_DIRTY, "") not in ("", "0")


def guarded(target: Path, root: Path | None = None) -> bool:
    """Whether ``target`` lies in the repository's own ``figures/`` folder (the committed one)."""
    root = Path(root or paths.ROOT).resolve()
    return Path(target).resolve().is_relative_to(root / "figures")


def require_clean(root: Path | None = None) -> None:
    """Raise :class:`DirtyTreeError` when :data:`CODE_PATHS` hold uncommitted changes (and the
    flag is not set). The runner calls it before executing anything, so a long run cannot fail at
    its first save."""
    changed = changed_files(root)
    if changed and not allow_dirty():
        names = ", ".join(changed[:SHOWN]) + (f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else "")
        raise DirtyTreeError(
            f"uncommitted changes in {', '.join(CODE_PATHS)} ({names}): outputs saved into figures/ "
            f"must name the commit that made them. Commit the changes, or set {ALLOW_DIRTY}=1 "
            "(runner: --allow-dirty) to save outputs marked as made from uncommitted code."
        )


def check_target(target: Path, root: Path | None = None) -> dict:
    """The tree's state for an output about to be saved at ``target``; raises
    :class:`DirtyTreeError` for the repository's figures/ from a dirty tree without the flag."""
    if guarded(target, root):
        require_clean(root)
    state = git_state(root)
    return {"git": state, "allow_dirty": bool(state["dirty"]) and allow_dirty()}


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
    # the instruction set of torch's CPU kernels changes results (see llmtraffic._pin_cpu_kernels)
    info["torch_cpu_kernels"] = (torch.backends.cpu.get_cpu_capability() if torch is not None
                                 else os.environ.get("ATEN_CPU_CAPABILITY", "torch's choice"))
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def speed_reference(repeats: int = 3) -> dict[str, float]:
    """This machine's speed on two fixed workloads, on one torch thread, best of ``repeats``
    (about a second in all), so that run times measured on different days can be compared: the
    same work can take twice as long on one day's machine as on another's (docs/performance.md).

    ``small_ops_us``: one step of small tensor operations shaped like a decoding step of the
    OracleTSC surrogate (a batched matmul of 5 stacked models, a softmax over its vocabulary, an
    elementwise update), where per-operation overhead dominates, as in most of the study's
    learning code. ``matmul_gflops``: a 256 × 256 single-precision matrix product (the bus DQN's
    updates are products of this kind)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        x, w = torch.randn(5, 8, 96, generator=gen), torch.randn(5, 96, 384, generator=gen)
        a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)

        def small_ops() -> None:
            h = x
            for _ in range(200):
                h = h + torch.bmm(h, w).softmax(-1)[..., :96]

        def matmuls() -> None:
            for _ in range(50):
                a @ b

        def best(fn) -> float:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            return min(times)

        return {"small_ops_us": round(best(small_ops) / 200 * 1e6, 1),
                "matmul_gflops": round(50 * 2 * 256**3 / best(matmuls) / 1e9, 1)}
    finally:
        torch.set_num_threads(threads)


def cpu_model() -> str:
    """The processor's name as the kernel reports it (``/proc/cpuinfo``), else Python's guess."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


_artifacts: dict[str, dict] = {}  # cache key -> what study.cached served in this process


def note_artifact(entry: dict) -> None:
    """Record a cached artifact this process used (called by :func:`llmtraffic.study.cached`)."""
    _artifacts[entry["key"]] = entry


def forget_artifacts() -> None:
    """Start a new record of used artifacts (a ``run_grid`` worker, before each job)."""
    _artifacts.clear()


def artifacts() -> list[dict]:
    """The cached artifacts used so far by this process (and the jobs it ran through ``run_grid``)."""
    return list(_artifacts.values())


def record(target: Path | None = None) -> dict:
    """Code, packages, hardware and cached artifacts behind an output saved at ``target``
    (default: the figures folder). Applies the guard (see the module docstring)."""
    names = KEY_PACKAGES + (SUMO_PACKAGES if "libsumo" in sys.modules or "traci" in sys.modules else ()) + (("cityflow",) if "cityflow" in sys.modules else ())
    return {
        **check_target(Path(target or paths.figures_dir())),
        "python": platform.python_version(),
        "packages": package_versions(names),
        "hardware": hardware(),
        "artifacts": artifacts(),
    }
