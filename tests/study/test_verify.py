"""`study verify`: the outputs under figures/ come from one committed code version, in parts.

Synthetic repositories are real git repositories in a temporary folder; the last test checks the
repository's own committed figures (what `make test` guards)."""

import json
import subprocess
import time

import pytest

from llmtraffic import paths
from llmtraffic.study import gallery, runner, verify
from llmtraffic.study.cli import main
from llmtraffic.study.provenance import CODE_PATHS


def _git(root, *args):
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def _commit(root, message, **files):
    """Write ``files`` (relative path with ``/`` as ``__``: content) and commit everything; return the commit."""
    for name, text in files.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", message)
    return _git(root, "rev-parse", "HEAD")


CHANGES = {  # one edit per code path, in the form _commit takes
    "lib": {"lib__m.py": "X = 2\n"},
    "notebooks": {"notebooks__nb.ipynb": "{\"cells\": [1]}\n"},
    "params": {"params__nb__quick.yaml": "n: 3\n"},
    "pyproject.toml": {"pyproject.toml": "[project]\nname = 'x'\nversion = '2'\n"},
    "requirements-models.txt": {"requirements-models.txt": "model==2\n"},
    "Makefile": {"Makefile": "all:\n\ttrue\n"},
}


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _commit(root, "code", **{
        "lib__m.py": "X = 1\n", "notebooks__nb.ipynb": "{\"cells\": []}\n", "params__nb__quick.yaml": "n: 2\n",
        "pyproject.toml": "[project]\nname = 'x'\n", "requirements-models.txt": "model==1\n",
        "Makefile": "all:\n", "docs__a.md": "docs\n"})
    return root


def _sidecar(root, nb, name, commit, dirty=False, kind="table"):
    meta = {"kind": kind, "name": name, "notebook": nb, "created": time.time(),
            "git": {"commit": commit, "dirty": dirty, "changed": []}, "allow_dirty": dirty}
    path = root / "figures" / nb / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))


def _part(root, commit, *notebooks):
    """One part: each notebook saves a table and its claims at ``commit``, then figures are committed."""
    for nb in notebooks:
        _sidecar(root, nb, "t", commit)
        _sidecar(root, nb, "claims", commit, kind="claims")
    return _commit(root, f"figures: {' '.join(notebooks)}")


def test_figures_and_docs_commits_between_parts_keep_one_code_version(repo):
    code = _git(repo, "rev-parse", "HEAD")
    _part(repo, code, "bus_a", "bus_b")
    docs = _commit(repo, "docs", **{"docs__a.md": "more docs\n", "README.md": "readme\n"})
    _part(repo, docs, "tsc_a")
    report = verify.verify(repo / "figures", repo)
    assert report.ok, report.text()
    assert report.sidecars == 6
    assert len(report.versions) == 1 and sorted(*report.versions.values()) == sorted([code, docs])
    assert "6 sidecars, one code version" in report.text()


@pytest.mark.parametrize("path", CODE_PATHS)
def test_a_code_commit_between_parts_fails_naming_the_later_parts_notebooks(repo, path):
    code = _git(repo, "rev-parse", "HEAD")
    _part(repo, code, "bus_a", "bus_b")
    changed = _commit(repo, f"change {path}", **CHANGES[path])
    _part(repo, changed, "tsc_a")
    report = verify.verify(repo / "figures", repo)
    assert set(report.problems) == {"tsc_a"}  # two notebooks share the first version: it is the study's
    assert report.problems["tsc_a"] == [
        f"2 sidecars (claims.json, …): from commit {changed[:10]}, whose {path} differ from commit "
        f"{code[:10]}'s (the code version of 2 notebooks)"]


def test_a_reverted_code_change_is_the_same_code_version(repo):
    code = _git(repo, "rev-parse", "HEAD")
    _part(repo, code, "bus_a")
    _commit(repo, "change", **CHANGES["lib"])
    reverted = _commit(repo, "revert", **{"lib__m.py": "X = 1\n"})
    _part(repo, reverted, "tsc_a")
    assert verify.verify(repo / "figures", repo).ok


def test_dirty_commitless_and_unknown_sidecars_fail_and_the_cli_lists_their_notebooks(repo, monkeypatch, capsys):
    code = _git(repo, "rev-parse", "HEAD")
    _part(repo, code, "bus_a")
    _sidecar(repo, "bus_dirty", "t", code, dirty=True)
    _sidecar(repo, "bus_none", "t", None)
    _sidecar(repo, "tsc_gone", "fig", "f" * 40, kind="figure")
    (repo / "figures" / "bus_a" / "data.json").write_text("[1, 2]")  # not a sidecar: ignored
    report = verify.verify(repo / "figures", repo)
    assert report.problems == {
        "bus_dirty": ["t.json: made from uncommitted code"],
        "bus_none": ["t.json: no commit named"],
        "tsc_gone": [f"fig.json: commit {'f' * 10}, which this repository lacks"],
    }
    monkeypatch.setattr(paths, "ROOT", repo)
    assert main(["verify", "--figures", str(repo / "figures")]) == 1
    err = capsys.readouterr().err
    assert "3 offending notebooks" in err
    assert "  bus_dirty: t.json: made from uncommitted code" in err and "  tsc_gone: " in err and "  bus_none: " in err


def test_without_git_history_verify_says_so(tmp_path, monkeypatch, capsys):
    (tmp_path / "figures").mkdir()
    with pytest.raises(verify.NoHistoryError, match="not a git checkout"):
        verify.verify(tmp_path / "figures", tmp_path)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    assert main(["verify", "--figures", str(tmp_path / "figures")]) == 2
    assert "not a git checkout" in capsys.readouterr().err


def _record(stems, wall_s=60.0, only=None):
    start = time.time() - wall_s
    outcomes = [runner.Outcome(s, True, wall_s / 2, paths.ROOT / f"{s}.ipynb", started=start) for s in stems]
    runner.record_run("quick", outcomes, wall_s, only, start, cpu_s=2 * wall_s,
                      speed={"small_ops_us": 90.0, "matmul_gflops": 88.0})
    return json.loads((paths.figures_dir() / "run.json").read_text())


@pytest.fixture
def project(repo, tmp_path, monkeypatch):
    """The synthetic repository as the project, its figures outside it."""
    monkeypatch.setattr(paths, "ROOT", repo)
    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "figures"))
    return repo


def test_parts_of_one_code_version_accumulate_and_another_version_starts_a_new_list(project):
    summary = _record(["bus_a", "bus_b"], only=["bus_*"])
    assert [p["notebooks"] for p in summary["parts"]] == [["bus_a", "bus_b"]]
    assert summary["code_version"]["trees"] == verify.code_trees(_git(project, "rev-parse", "HEAD"), project)
    _commit(project, "docs", **{"docs__a.md": "new\n"})  # docs between parts: the same code version
    summary = _record(["tsc_a"], wall_s=120.0, only=["tsc_*"])
    assert [p["notebooks"] for p in summary["parts"]] == [["bus_a", "bus_b"], ["tsc_a"]]
    assert [p["wall_s"] for p in summary["parts"]] == [60.0, 120.0]
    _commit(project, "code", **CHANGES["params"])
    summary = _record(["tsc_a"])
    assert [p["notebooks"] for p in summary["parts"]] == [["tsc_a"]]
    assert set(summary["notebooks"]) == {"bus_a", "bus_b", "tsc_a"}  # older notebooks keep their entries
    assert "| bus_a | — | quick | " in "\n".join(gallery.run_times(paths.figures_dir()))  # of no part of this version


def test_a_run_from_uncommitted_code_is_a_list_of_its_own(project):
    _record(["bus_a"])
    (project / "Makefile").write_text("changed:\n")
    summary = _record(["bus_b"])
    assert len(summary["parts"]) == 1 and summary["parts"][0]["dirty"] is True
    summary = _record(["bus_c"])  # the same uncommitted code: still not one version with it
    assert [p["notebooks"] for p in summary["parts"]] == [["bus_c"]]


def test_a_summary_from_before_parts_counts_its_last_run_as_the_first_part(project):
    commit = _git(project, "rev-parse", "HEAD")
    figures = paths.figures_dir()
    figures.mkdir(parents=True)
    legacy = {"last_run": {"profile": "quick", "only": [], "commit": commit, "wall_s": 5876.7, "notebooks": 2,
                           "jobs_failed": [], "skipped": {}, "cpus": 2, "cpu_s": 11425.3},
              "notebooks": {s: {"ok": True, "seconds": 10.0, "profile": "quick", "commit": commit}
                            for s in ("bus_a", "tsc_a")}}
    (figures / "run.json").write_text(json.dumps(legacy))
    assert gallery.profile_times(figures) == [
        "Measured at `quick` (the latest runs of one code version, from `figures/run.json`): 2 notebooks in "
        f"97.9 min on 2 CPUs (190.4 CPU-min), in one part; commit `{commit[:7]}`."]
    summary = _record(["tsc_b"], only=["tsc_b"])
    assert [p["notebooks"] for p in summary["parts"]] == [["bus_a", "tsc_a"], ["tsc_b"]]


def test_the_gallery_and_the_readme_show_each_part(project, tmp_path):
    _record(["bus_a", "bus_b"], wall_s=600.0, only=["bus_*"])
    _record(["tsc_a"], wall_s=300.0, only=["tsc_*"])
    commit = _git(project, "rev-parse", "HEAD")[:7]
    figures = paths.figures_dir()
    lines = gallery.run_times(figures)
    assert any(line.startswith("Runs of this code version") and "3 notebooks in 2 parts, 15.0 min on" in line
               and "(30.0 CPU-min)" in line for line in lines)
    assert any(line.startswith("| 1 | quick | `bus_*` (2) | 10.0 | 20.0 | bus 5.0 | 90 µs, 88 GFLOP/s | ")
               for line in lines)
    assert any(line.startswith("| 2 | quick | `tsc_*` (1) | 5.0 | 10.0 | tsc 2.5 | ") for line in lines)
    assert any(line.startswith("| tsc_a | 2 | quick | 150.0 | — | ") for line in lines)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{gallery.README_BEGIN}\nold\n{gallery.README_END}\n\nrest\n")
    gallery.update_readme(readme, figures)
    assert readme.read_text() == (
        f"# x\n\n{gallery.README_BEGIN}\n\nMeasured at `quick` (the latest runs of one code version, from "
        "`figures/run.json`): 3 notebooks in 15.0 min on "
        f"{runner.os.cpu_count()} CPUs (30.0 CPU-min), in 2 parts: part 1 (`bus_*` (2)) 10.0 min, "
        f"part 2 (`tsc_*` (1)) 5.0 min; commit `{commit}`.\n\n{gallery.README_END}\n\nrest\n")


def test_the_committed_figures_come_from_one_code_version():
    """What `make test` guards: every output under the repository's figures/ names a clean commit,
    and all those commits hold the same code."""
    try:
        report = verify.verify(paths.ROOT / "figures", paths.ROOT)
    except verify.NoHistoryError as err:
        pytest.skip(f"this checkout has no git history to check figures/ against: {err}")
    assert report.sidecars > 0
    assert report.ok, report.text()
