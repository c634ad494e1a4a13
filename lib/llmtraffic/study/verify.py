"""``python -m llmtraffic.study verify``: are the committed figures the outputs of one code version?

A regeneration may run in parts (one ``run`` each, ``figures/run.json`` lists them), on different
days, with figures and docs commits between them. What must not come between them is a change of
the code. The **code version** of a commit is the git object ids of :data:`CODE_PATHS` in it
(the trees of ``lib/``, ``notebooks/``, ``params/`` and the blobs of the files that pin the
environment); two commits with equal ids ran the same code, whatever was committed between them.

:func:`verify` reads every output sidecar under ``figures/`` (figures, tables, ``claims.json``) and
reports, per notebook, a sidecar that names no commit, one made from uncommitted code, one whose
commit this repository lacks, and one whose commit's code version is not the one most notebooks
share (with the paths that differ).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from .provenance import CODE_PATHS, changed_files

SIDECAR_KINDS = ("figure", "table", "claims")


class NoHistoryError(RuntimeError):
    """The checkout cannot tell what a commit held: no git, or a shallow clone lacking the commits."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)


def code_trees(commit: str, root: Path | None = None) -> dict[str, str | None] | None:
    """``{path: object id}`` of :data:`CODE_PATHS` at ``commit`` (None for a path the commit
    lacks); None when the repository has no such commit."""
    root = Path(root or paths.ROOT)
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return None
    listed = _git(root, "ls-tree", "--full-tree", commit, "--", *CODE_PATHS)
    if listed.returncode != 0:
        return None
    ids = {}
    for line in listed.stdout.splitlines():
        meta, path = line.split("\t", 1)
        ids[path] = meta.split()[2]
    return {p: ids.get(p) for p in CODE_PATHS}


def version_id(trees: dict[str, str | None]) -> str:
    """A short digest naming one code version (equal trees, equal id)."""
    text = "\n".join(f"{p} {trees.get(p)}" for p in CODE_PATHS)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def code_version(root: Path | None = None) -> dict | None:
    """The checkout's code version: ``{"id", "trees", "dirty"}`` of HEAD, ``dirty`` when
    :data:`CODE_PATHS` hold uncommitted changes (then HEAD's trees are not what runs); None without git."""
    root = Path(root or paths.ROOT)
    head = _git(root, "rev-parse", "HEAD")
    trees = code_trees(head.stdout.strip(), root) if head.returncode == 0 else None
    if trees is None:
        return None
    return {"id": version_id(trees), "trees": trees, "dirty": bool(changed_files(root, CODE_PATHS))}


def sidecars(figures: Path) -> list[tuple[str, str, dict]]:
    """``(notebook folder, file name, sidecar)`` of every output under ``figures/<notebook>/``."""
    found = []
    for path in sorted(Path(figures).glob("*/*.json")):
        try:
            meta = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(meta, dict) and meta.get("kind") in SIDECAR_KINDS:
            found.append((path.parent.name, path.name, meta))
    return found


@dataclass
class Report:
    sidecars: int = 0
    versions: dict[str, list[str]] = field(default_factory=dict)
    """Code version id → the commits (full ids) the sidecars name that have it."""
    problems: dict[str, list[str]] = field(default_factory=dict)
    """Offending notebook → what is wrong with its sidecars."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        if self.ok:
            commits = ", ".join(c[:7] for cs in self.versions.values() for c in sorted(cs)) or "none"
            return (f"figures/ verified: {self.sidecars} sidecars, one code version "
                    f"({', '.join(CODE_PATHS)}), commits {commits}, none dirty")
        lines = [f"figures/ does not hold one code version: {len(self.problems)} offending notebooks"]
        lines += [f"  {nb}: {'; '.join(why)}" for nb, why in sorted(self.problems.items())]
        return "\n".join(lines)


def _differs(a: dict, b: dict) -> str:
    return ", ".join(p for p in CODE_PATHS if a.get(p) != b.get(p))


def verify(figures: Path | None = None, root: Path | None = None) -> Report:
    """Check the sidecars under ``figures`` against the git history at ``root`` (see the module
    docstring). Raises :class:`NoHistoryError` when the checkout has no git history to check against."""
    root = Path(root or paths.ROOT)
    figures = Path(figures or paths.figures_dir())
    if _git(root, "rev-parse", "HEAD").returncode != 0:
        raise NoHistoryError(f"{root} is not a git checkout with history: cannot check which code made figures/")
    shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    report = Report()
    found: dict[str, dict[str, list[str]]] = {}  # notebook → problem → the files that have it
    trees: dict[str, dict | None] = {}
    made: list[tuple[str, str, str]] = []  # notebook, file, commit
    for nb, name, meta in sidecars(figures):
        report.sidecars += 1
        git = meta.get("git") or {}
        commit = git.get("commit")
        if not commit:
            found.setdefault(nb, {}).setdefault("no commit named", []).append(name)
            continue
        if git.get("dirty") or meta.get("allow_dirty"):
            found.setdefault(nb, {}).setdefault("made from uncommitted code", []).append(name)
        if commit not in trees:
            trees[commit] = code_trees(commit, root)
        if trees[commit] is None:
            if shallow:
                raise NoHistoryError(f"this shallow clone lacks commit {commit[:10]}: fetch the full history")
            found.setdefault(nb, {}).setdefault(f"commit {commit[:10]}, which this repository lacks", []).append(name)
            continue
        made.append((nb, name, commit))
    ids = {c: version_id(t) for c, t in trees.items() if t is not None}
    for c, v in ids.items():
        report.versions.setdefault(v, []).append(c)
    # the version most notebooks share is the study's; a notebook with any other one offends
    counted = Counter(v for _, v in {(nb, ids[c]) for nb, _, c in made})
    if len(counted) > 1:
        main = max(counted, key=lambda v: (counted[v], v))
        ref = report.versions[main][0]
        for nb, name, commit in made:
            if ids[commit] != main:
                why = (f"from commit {commit[:10]}, whose {_differs(trees[commit], trees[ref])} differ from "
                       f"commit {ref[:10]}'s (the code version of {counted[main]} notebooks)")
                found.setdefault(nb, {}).setdefault(why, []).append(name)
    for nb, problems in found.items():
        report.problems[nb] = [f"{_files(names)}: {why}" for why, names in problems.items()]
    return report


def _files(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{len(names)} sidecars ({names[0]}, …)"
