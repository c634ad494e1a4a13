"""Stale outputs: after a notebook succeeds, the runner removes what that run did not write."""

import json
import os
import time
from pathlib import Path

from llmtraffic.study.cli import main
from llmtraffic.study.runner import prune_stale

FIXTURES = Path(__file__).parent / "fixtures"


def _cli(*args):
    return main(["--notebooks", str(FIXTURES / "notebooks"), "--params", str(FIXTURES / "params"), *args])


def _unit(folder: Path, name: str, created: float, exts=("png", "svg"), commit="abc1234def5678", mtime=None) -> list[str]:
    """A saved output as outputs._save_unit writes it: its files and a sidecar listing them."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [f"{name}.{ext}" for ext in exts]
    for f in files:
        (folder / f).write_text("data")
    sidecar = {"kind": "figure" if "png" in exts else "table", "name": name, "caption": f"The {name}",
               "files": files, "notebook": folder.name, "created": created, "git": {"commit": commit}}
    (folder / f"{name}.json").write_text(json.dumps(sidecar))
    if mtime is not None:
        for f in [*files, f"{name}.json"]:
            os.utime(folder / f, (mtime, mtime))
    return [*files, f"{name}.json"]


def _old(path: Path, when: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("old")
    os.utime(path, (when, when))
    return path


def test_prune_stale_removes_old_units_and_old_orphans_only(tmp_path):
    folder = tmp_path / "figures" / "nb"
    since = time.time() - 60
    old = since - 3600
    stale = _unit(folder, "fig8_bars", created=old, mtime=old)
    kept = _unit(folder, "fig8_curves", created=since + 1, mtime=old)  # fresh sidecar: kept whatever the mtimes
    table = _unit(folder, "agreement", created=since + 2, exts=("csv", "md"))
    orphan = _old(folder / "fig9_sweep.csv", old)  # a table that became a figure: listed by no sidecar
    new_unlisted = folder / "scratch.txt"
    new_unlisted.write_text("written during this run")
    sub_file = _old(folder / "sub" / "old.png", old)
    os.utime(folder / "sub", (old, old))

    removed = prune_stale(folder, since)

    assert sorted(p.name for p in folder.iterdir()) == sorted([*kept, *table, "scratch.txt", "sub"])
    assert not any((folder / f).exists() for f in stale) and not orphan.exists()
    assert sub_file.exists()  # subfolders are never touched
    assert removed == ["stale output fig8_bars (from commit abc1234)", "orphan file fig9_sweep.csv (listed by no sidecar)"]


def test_prune_stale_treats_claims_json_as_a_unit_and_keeps_the_gallery_files(tmp_path):
    since = time.time() - 60
    old = since - 3600
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "claims.json").write_text(json.dumps({"kind": "claims", "created": old, "git": {"commit": "0123456789"}, "claims": []}))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "claims.json").write_text(json.dumps({"kind": "claims", "created": since + 1, "claims": []}))
    os.utime(fresh / "claims.json", (old, old))
    top = [_old(tmp_path / name, old) for name in ("run.json", "README.md", "SCORECARD.md")]

    assert prune_stale(stale, since) == ["stale output claims (from commit 0123456)"]
    assert not (stale / "claims.json").exists()
    assert prune_stale(fresh, since) == [] and (fresh / "claims.json").exists()
    assert prune_stale(tmp_path, since) == [] and all(p.exists() for p in top)
    assert prune_stale(tmp_path / "missing", since) == []


def test_run_prunes_what_a_successful_notebook_no_longer_writes(outdirs, capsys):
    folder = outdirs / "figures" / "fx_plot"
    stale = _unit(folder, "old_bars", created=1.0, mtime=1.0)
    orphan = _old(folder / "values_old.md", 1.0)
    sub_file = _old(folder / "keep" / "notes.txt", 1.0)

    assert _cli("run", "--profile", "smoke", "--only", "fx_plot") == 0

    assert not any((folder / f).exists() for f in stale) and not orphan.exists()
    assert (folder / "line.png").exists() and (folder / "values.csv").exists() and sub_file.exists()
    captured = capsys.readouterr()
    assert "[fx_plot] removed stale output old_bars (from commit abc1234)" in captured.out + captured.err
    readme = (outdirs / "figures" / "README.md").read_text()
    assert "fx_plot/line.png" in readme and "old_bars" not in readme  # gallery regenerated after pruning


def test_failed_notebook_prunes_nothing(outdirs, capsys):
    folder = outdirs / "figures" / "fx_fail"
    stale = _unit(folder, "old_bars", created=1.0, mtime=1.0)
    orphan = _old(folder / "values_old.md", 1.0)
    (folder / "claims.json").write_text(json.dumps({"kind": "claims", "created": 1.0, "claims": []}))

    assert _cli("run", "--profile", "smoke", "--only", "fx_fail") == 1

    assert all((folder / f).exists() for f in stale) and orphan.exists() and (folder / "claims.json").exists()
    captured = capsys.readouterr()
    assert "removed" not in captured.out + captured.err
    assert "old_bars" in (outdirs / "figures" / "README.md").read_text()  # still listed: a failure loses nothing
