"""Expensive artifacts (trained agents, designed rewards, plans, adapters) cached by their full
config and the source code they depend on.

``cached(kind, params, build)`` returns the artifact stored under ``runs/cache/<kind>/<key>/``,
building and storing it first when absent. The key hashes ``kind``, ``params``, the library
version and :func:`dependency_digest` of ``build``: the source of the module that defines
``build`` and of every module of the project it imports, transitively (found by reading the
``import`` statements, lazy ones inside functions included). Editing any of them rebuilds the
artifact; no one has to remember to list them. The study harness itself (``llmtraffic.study``:
outputs, cache, runner) decides where results go, not what they are, and is left out.

Every artifact served is noted in the provenance (``"artifacts"`` in each sidecar and claims
file: kind, key, source digest, cache folder). ``--fresh`` (``LLMTRAFFIC_FRESH=1``) rebuilds everything.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, TypeVar

import llmtraffic

from . import provenance
from .atomic import write_unit
from .paths import runs_dir

T = TypeVar("T")

PROJECT = "llmtraffic"
EXCLUDED = ("llmtraffic.study",)
"""Packages left out of dependency digests (see the module docstring)."""


def source_digest(*modules: ModuleType) -> str:
    """Digest of the source of ``modules`` (a package counts with every ``.py`` file under it)."""
    digest = hashlib.sha256()
    for module in modules:
        path = Path(module.__file__)
        files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
        for f in files:
            digest.update(f.relative_to(path.parent).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------- import analysis


def _package_dir(top: str) -> Path | None:
    module = sys.modules.get(top)
    file = getattr(module, "__file__", None)
    return Path(file).parent if file and Path(file).name == "__init__.py" else None


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` inside its top-level package, found on disk (no import)."""
    top, *rest = name.split(".")
    folder = _package_dir(top)
    if folder is None:
        return None
    base = folder.joinpath(*rest)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=4096)
def _imports(path: Path, stamp: tuple[int, int], name: str) -> tuple[str, ...]:
    """Absolute names of the modules (or packages) imported anywhere in ``path`` (module ``name``)."""
    return tuple(_imported_names(ast.parse(path.read_bytes()), name, path.name == "__init__.py"))


def _imported_names(tree: ast.AST, name: str, is_package: bool) -> list[str]:
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    continue  # beyond the top-level package: not ours
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found += [f"{base}.{alias.name}" for alias in node.names] + [base]
    return found


def _followed(name: str, packages: set[str]) -> bool:
    if name.split(".")[0] not in packages:
        return False
    return not any(name == ex or name.startswith(ex + ".") for ex in EXCLUDED)


def dependency_files(roots: Iterable[str], packages: Iterable[str] = (PROJECT,)) -> list[Path]:
    """Source files of the modules ``roots`` and of every module of ``packages`` they import,
    transitively (with the ``__init__.py`` of each package on the way, which Python runs too)."""
    packages = set(packages)
    seen: dict[str, Path] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or not _followed(name, packages):
            continue
        path = _module_file(name)
        if path is None:
            continue  # a name imported from a module, not a module itself
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        stat = path.stat()
        todo += _imports(path, (stat.st_mtime_ns, stat.st_size), name)
    return sorted(set(seen.values()))


def _relative(path: Path) -> str:
    """``path`` from above its top-level package (``llmtraffic/bus/sim.py``)."""
    top = path.parent
    while (top.parent / "__init__.py").is_file():
        top = top.parent
    return path.relative_to(top.parent).as_posix()


def _digest_files(files: Iterable[Path], extra: bytes = b"") -> str:
    digest = hashlib.sha256(extra)
    for f in files:
        digest.update(_relative(f).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _code_bytes(code: CodeType) -> bytes:
    """The code of a function without its file name and line numbers (they change from run to run
    in a notebook kernel)."""
    parts = [code.co_code, repr(code.co_names).encode()]
    for const in code.co_consts:
        parts.append(_code_bytes(const) if isinstance(const, CodeType) else repr(const).encode())
    return b"\0".join(parts)


def _notebook_roots() -> list[str] | None:
    """Project modules imported by the running notebook's code cells (None: no notebook found)."""
    from .context import _current, _notebook_path

    if _current is None or not _notebook_path(_current.stem).exists():
        return None
    cells = json.loads(_notebook_path(_current.stem).read_text())["cells"]
    roots: list[str] = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        lines = [ln for ln in "".join(cell["source"]).splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            roots += _imported_names(ast.parse("\n".join(lines)), "__main__", False)
        except SyntaxError:
            continue
    return roots


def dependency_digest(build: Callable[..., Any]) -> tuple[str, list[Path]]:
    """Digest of the source ``build`` depends on, and the files it covers.

    ``build`` defined in a module: that module and the project modules it imports (and the
    modules of its own top-level package, so that a package outside the project works the same).
    Defined in a notebook: the project modules the notebook's code cells import, plus ``build``'s
    own code; without a notebook file, every project module loaded so far.
    """
    fn = getattr(build, "func", build)  # functools.partial
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    file = getattr(module, "__file__", None) or ""
    if module is not None and file.endswith(".py"):  # a module or a script (a notebook has no file)
        path, name = Path(module.__file__), module.__name__
        stat = path.stat()
        roots = [name, *_imports(path, (stat.st_mtime_ns, stat.st_size), name)]
        files = sorted({path, *dependency_files(roots, {PROJECT, name.split(".")[0]})})
        return _digest_files(files), files
    roots = _notebook_roots()
    if roots is None:
        roots = [name for name in sys.modules if name.split(".")[0] == PROJECT]
    files = dependency_files(roots)
    code = getattr(fn, "__code__", None)
    return _digest_files(files, _code_bytes(code) if code is not None else b""), files


# ---------------------------------------------------------------- the cache


def cache_key(kind: str, params: dict[str, Any], sources: str = "") -> str:
    blob = json.dumps(
        {"kind": kind, "params": params, "version": llmtraffic.__version__, "sources": sources},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_dir(kind: str, params: dict[str, Any], build: Callable[..., Any] | None = None) -> Path:
    """The folder of the artifact ``cached(kind, params, build)`` would serve (without ``build``:
    a folder keyed by the parameters alone). Inside a build, use :func:`work_dir` instead."""
    sources = dependency_digest(build)[0] if build is not None else ""
    return runs_dir() / "cache" / kind / cache_key(kind, params, sources)


def is_cached(kind: str, params: dict[str, Any], build: Callable[..., Any]) -> bool:
    """Whether ``cached(kind, params, build)`` would load its artifact instead of building it
    (not under ``LLMTRAFFIC_FRESH``), e.g. to keep cached jobs out of a batch that trains."""
    return not fresh() and (cache_dir(kind, params, build) / "artifact.pkl").exists()


_building: list[Path] = []  # cache folders of the builds running in this process, innermost last


def work_dir() -> Path:
    """The cache folder of the artifact being built right now, for a build's own files
    (checkpoints a killed build resumes from). Keyed like the artifact, so a change of parameters
    or of the source starts afresh instead of resuming from what older code wrote."""
    if not _building:
        raise RuntimeError("study.cache.work_dir() is only available inside a build run by study.cached(...)")
    return _building[-1]


def fresh() -> bool:
    return os.environ.get("LLMTRAFFIC_FRESH", "") not in ("", "0")


def _load(artifact: Path) -> tuple[Any] | None:
    """``(value,)`` from a readable cache entry, else None (absent or corrupt: rebuild)."""
    try:
        with open(artifact, "rb") as fh:
            return (pickle.load(fh),)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


@contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``<folder>.lock`` beside the artifact's folder while it is built,
    so that two processes asking for the same artifact at once (two notebooks sharing agents, run
    in parallel by ``make study``) build it once: the second waits, then loads it. The folder
    itself cannot be the lock: :func:`write_unit` locks it to store the artifact."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def cached(kind: str, params: dict[str, Any], build: Callable[[], T]) -> T:
    """The artifact for ``params`` and the current source of ``build``'s dependencies: loaded from
    the cache, or built by ``build()`` and stored (``artifact.pkl`` with ``meta.json``: params,
    key, source digest and the files it covers).

    The artifact must be picklable (state dicts, arrays, dataclasses). A corrupt cache entry is
    rebuilt rather than trusted. While one process builds an artifact, another asking for it
    waits and then loads it instead of building it a second time.
    """
    sources, files = dependency_digest(build)
    key = cache_key(kind, params, sources)
    folder = runs_dir() / "cache" / kind / key
    provenance.note_artifact({"kind": kind, "key": key, "sources": sources, "path": str(folder)})
    artifact = folder / "artifact.pkl"
    hit = None if fresh() else _load(artifact)
    if hit is not None:
        return hit[0]
    with _build_lock(folder):
        hit = None if fresh() else _load(artifact)  # built by another process while this one waited
        if hit is not None:
            return hit[0]
        _building.append(folder)
        try:
            value = build()
        finally:
            _building.pop()
        _store(folder, value, {"kind": kind, "key": key, "params": params, "sources": sources}, files)
    return value


def _store(folder: Path, value: Any, meta: dict[str, Any], files: Iterable[Path]) -> None:
    """Write ``artifact.pkl`` and ``meta.json`` (``meta`` plus the source files covered) at once."""
    meta = {**meta, "files": sorted(f.as_posix() for f in files)}
    write_unit(folder, {
        "artifact.pkl": pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL),
        "meta.json": (json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n").encode(),
    })


def cached_together(kind: str, params: Sequence[dict[str, Any]], build: Callable[[list[int], list[Path]], list[T]]) -> list[T]:
    """``cached(kind, params[i], …)`` for every i, the missing artifacts built by one call
    ``build(missing, folders)`` (indices into ``params`` and their cache folders, for the
    builds' own files) that returns their values in that order: for jobs that are cheaper
    together (agent seeds trained in lockstep). Keys are those of ``cached`` (the digest of the
    source ``build`` depends on), so a job built together is served to a lone ``cached`` call of
    it from the same module, and the other way round. Locks are taken in key order (no
    deadlock with another process building an overlapping set)."""
    sources, files = dependency_digest(build)
    keys = [cache_key(kind, p, sources) for p in params]
    folders = [runs_dir() / "cache" / kind / key for key in keys]
    for key, folder in zip(keys, folders):
        provenance.note_artifact({"kind": kind, "key": key, "sources": sources, "path": str(folder)})
    values: dict[int, T] = {}

    def load_hits() -> list[int]:
        for i, folder in enumerate(folders):
            hit = None if i in values or fresh() else _load(folder / "artifact.pkl")
            if hit is not None:
                values[i] = hit[0]
        return [i for i in range(len(params)) if i not in values]

    missing = load_hits()
    if not missing:
        return [values[i] for i in range(len(params))]
    with ExitStack() as locks:
        for i in sorted(set(missing), key=lambda i: keys[i]):
            locks.enter_context(_build_lock(folders[i]))
        missing = load_hits() if not fresh() else missing  # some built by another process meanwhile
        if missing:
            built = build(missing, [folders[i] for i in missing])
            if len(built) != len(missing):
                raise ValueError(f"cached_together: the build returned {len(built)} values for {len(missing)} jobs")
            for i, value in zip(missing, built):
                _store(folders[i], value, {"kind": kind, "key": keys[i], "params": params[i], "sources": sources}, files)
                values[i] = value
    return [values[i] for i in range(len(params))]
