"""The guard: outputs saved into the repository's figures/ must name a commit with no uncommitted code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from llmtraffic import has_avx2, study
from llmtraffic import paths
from llmtraffic.study import claims, gallery, provenance
from llmtraffic.study.outputs import DIRTY_MARK
from llmtraffic.study.stats import mean_ci

FIXTURES = Path(__file__).parent / "fixtures"


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A committed repository standing in for the project (figures/ in it, no LLMTRAFFIC_FIGURES)."""
    root = tmp_path / "repo"
    for folder in provenance.CODE_PATHS:
        (root / folder).mkdir(parents=True)
        (root / folder / "x.py").write_text("X = 1\n")
    (root / "README.md").write_text("readme\n")
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    monkeypatch.setattr(paths, "ROOT", root)
    monkeypatch.delenv("LLMTRAFFIC_FIGURES", raising=False)
    monkeypatch.delenv(provenance.ALLOW_DIRTY, raising=False)
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(FIXTURES / "notebooks" / "fx_plot.ipynb"))
    monkeypatch.setenv("LLMTRAFFIC_PROFILE", "smoke")
    claims._recorded.clear()
    study.begin("fx_plot", {"n": 7, "scale": 0.5, "label": "x", "seeds": [4, 5], "extra": None})
    assert paths.figures_dir() == (root / "figures").resolve()
    return root


def _save_all():
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    study.save_figure(fig, "fig")
    study.save_table(pd.DataFrame({"v": [1.0]}), "tab", descriptive=True)
    claims.claim("c", "bus", "§5", "s", "q", "tab", ours=mean_ci([1.0, 2.0, 3.0]), paper_value=1.0)


def test_clean_tree_saves_and_names_its_commit(repo):
    (repo / "README.md").write_text("changed, but not code\n")
    _save_all()
    meta = json.loads((repo / "figures" / "fx_plot" / "tab.json").read_text())
    assert meta["git"] == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False, "changed": []}
    assert meta["allow_dirty"] is False
    assert DIRTY_MARK not in (repo / "figures" / "fx_plot" / "tab.md").read_text()


@pytest.mark.parametrize("change", ["modify lib", "untracked notebook", "staged params"])
def test_dirty_code_stops_every_save_into_figures(repo, change):
    if change == "modify lib":
        (repo / "lib" / "x.py").write_text("X = 2\n")
        name = "lib/x.py"
    elif change == "untracked notebook":
        (repo / "notebooks" / "new.ipynb").write_text("{}")
        name = "notebooks/new.ipynb"
    else:
        (repo / "params" / "x.py").write_text("X = 3\n")
        _git(repo, "add", "params/x.py")
        name = "params/x.py"
    fig, _ = plt.subplots()
    for save in (lambda: study.save_figure(fig, "fig"), lambda: study.save_table(pd.DataFrame({"v": [1]}), "tab", descriptive=True),
                 lambda: claims.claim("c", "bus", "§5", "s", "q", "tab", ours=mean_ci([1.0, 2.0]), paper_value=1.0)):
        with pytest.raises(provenance.DirtyTreeError, match=rf"{name}.*LLMTRAFFIC_ALLOW_DIRTY=1"):
            save()
    assert not (repo / "figures" / "fx_plot").exists()  # nothing was written
    with pytest.raises(provenance.DirtyTreeError):
        provenance.require_clean()  # what the runner checks before executing anything


def test_flag_allows_dirty_saves_and_marks_them(repo, monkeypatch):
    (repo / "lib" / "x.py").write_text("X = 2\n")
    monkeypatch.setenv(provenance.ALLOW_DIRTY, "1")
    provenance.require_clean()
    _save_all()
    out = repo / "figures" / "fx_plot"
    meta = json.loads((out / "fig.json").read_text())
    assert meta["allow_dirty"] is True and meta["git"]["dirty"] is True and meta["git"]["changed"] == ["lib/x.py"]
    assert json.loads((out / "claims.json").read_text())["allow_dirty"] is True
    assert DIRTY_MARK in (out / "tab.md").read_text()
    readme = (repo / "figures" / "README.md").read_text()
    assert readme.count(gallery.DIRTY) == 4  # heading and source line of both outputs


def test_figures_outside_the_repository_are_not_guarded_but_record_the_state(repo, tmp_path, monkeypatch):
    (repo / "lib" / "x.py").write_text("X = 2\n")
    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "elsewhere"))
    _save_all()
    meta = json.loads((tmp_path / "elsewhere" / "fx_plot" / "tab.json").read_text())
    assert meta["git"]["dirty"] is True and meta["allow_dirty"] is False
    assert DIRTY_MARK in (tmp_path / "elsewhere" / "fx_plot" / "tab.md").read_text()


def _fresh(code: str, env: dict | None = None) -> str:
    """What ``code`` prints in a fresh interpreter, ATEN_CPU_CAPABILITY unset unless ``env`` sets it."""
    clean = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **(env or {})}, capture_output=True,
                          text=True, check=True).stdout.strip()


def _kernels(*imports: str, env: dict | None = None) -> str:
    """torch's CPU kernel level in a fresh interpreter after ``imports``, in that order."""
    return _fresh("; ".join(f"import {m}" for m in imports) + "; print(torch.backends.cpu.get_cpu_capability())", env)


@pytest.mark.skipif(not has_avx2(), reason="pins kernels on x86-64 with AVX2 only")
def test_importing_the_package_first_pins_torchs_cpu_kernels_to_avx2():
    """AVX-512 kernels round differently: one commit gave another surrogate on a machine with them."""
    assert _kernels("llmtraffic", "torch") == "AVX2"
    assert _kernels("llmtraffic", "torch", env={"ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"  # the user's value stays
    torch_first = _kernels("torch", "llmtraffic")  # too late to pin: torch's own choice, recorded in provenance
    assert _fresh("import torch, llmtraffic.study.provenance as p; print(p.hardware()['torch_cpu_kernels'])") == torch_first
