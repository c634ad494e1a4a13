"""The one atomic writer of the project: files, and units of files that belong together.

- :func:`atomic_write` writes one file through a temporary file in the same folder, then renames
  it into place: a reader or a crash sees the old file or the new one, never half of one, and a
  failure leaves no temporary file behind.
- :func:`write_section` replaces the generated block between two marker lines of a hand-written
  file (the README's findings, the benchmarks' part of docs/performance.md) and nothing else.
- :func:`write_unit` writes several files that belong together (a figure's PNG, SVG and its
  provenance sidecar) under an exclusive lock on their folder, all content rendered before the
  first rename: two processes racing on the same unit leave the files of one of them, never data
  of one and provenance of the other.

Written files are readable by everybody (mode 0644), whatever the process umask.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

MODE = 0o644


def _temporary(folder: Path, name: str) -> tuple[int, str]:
    return tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> Path:
    """Write ``path`` through ``write(fh)`` on a temporary file, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def section_problem(path: str | os.PathLike, begin: str, end: str) -> str | None:
    """Why ``path`` cannot take a generated block between ``begin`` and ``end`` (None: it can)."""
    path = Path(path)
    if not path.is_file():
        return f"{path} does not exist"
    text = path.read_text()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        return f"{path} lacks the generated-section markers, once each and in this order: {begin!r} … {end!r}"
    return None


def write_section(path: str | os.PathLike, begin: str, end: str, block: str) -> Path:
    """Replace the lines from ``begin`` to ``end`` (the markers included) of ``path`` by ``block``,
    which starts with ``begin`` and ends with ``end``; the rest of the file stays as it was.
    Raises ValueError, writing nothing, when the markers are missing, repeated or out of order."""
    problem = section_problem(path, begin, end)
    if problem:
        raise ValueError(problem)
    head, rest = Path(path).read_text().split(begin, 1)
    return atomic_write_text(path, head + block + rest.split(end, 1)[1])


@contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` itself (no lock file is left behind)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_unit(folder: str | os.PathLike, files: Mapping[str, bytes]) -> list[Path]:
    """Write ``{file name: content}`` into ``folder`` as one unit (see the module docstring).

    All temporary files are written first and renamed only when every one of them is complete;
    on any failure the previous files stay as they were and no temporary file remains.
    """
    folder = Path(folder)
    with folder_lock(folder):
        staged: list[tuple[str, Path]] = []
        try:
            for name, data in files.items():
                fd, tmp = _temporary(folder, name)
                staged.append((tmp, folder / name))
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(tmp, MODE)
            for tmp, target in staged:
                os.replace(tmp, target)
        except BaseException:
            for tmp, _ in staged:
                Path(tmp).unlink(missing_ok=True)
            raise
    return [target for _, target in staged]
