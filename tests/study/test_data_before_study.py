"""`make study` fetches the data the selected notebooks declare before the first one starts
(issue 36): from a real loopback HTTP server standing in for the public sources, a missing file
is fetched; without a source, one message names the missing files and both remedies, and only the
notebooks that need them are skipped."""

import hashlib
import http.server
import json
import socket
import threading
from functools import partial
from pathlib import Path

import nbformat
import pytest

from llmtraffic.study import data as study_data
from llmtraffic.study import runner
from llmtraffic.study.cli import main

ROOT = Path(__file__).resolve().parents[2]
BODY = b"<net/>\n"


def _notebook(folder: Path, stem: str, needs: list[str] | None, code: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem}"), params, nbformat.v4.new_code_cell(code)]
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    if needs is not None:
        nb.metadata["llmtraffic"] = {"data": needs}
    nbformat.write(nb, str(folder / f"{stem}.ipynb"))


READS = 'from llmtraffic.study import data_path\nprint("read", data_path("fx/net/a.xml").read_text().strip())'


@pytest.fixture
def study(tmp_path, monkeypatch, outdirs):
    """Notebooks that need fx/net (one file of a stand-in manifest) or nothing, and an empty data directory."""
    monkeypatch.setattr(study_data, "FILES", (("fx/net/a.xml", hashlib.sha256(BODY).hexdigest()),))
    monkeypatch.setenv("LLMTRAFFIC_DATA", str(tmp_path / "data"))
    notebooks, params = tmp_path / "notebooks", tmp_path / "params"
    notebooks.mkdir()
    (params / "fx_needs").mkdir(parents=True)
    (params / "fx_needs" / "smoke.yaml").write_text("n: 2\n")
    _notebook(notebooks, "fx_needs", ["fx/net"], READS)
    _notebook(notebooks, "fx_free", None, 'print("no data needed")')
    _notebook(notebooks, "fx_sneaky", [], READS)  # reads a file it does not declare
    return lambda *args: main(["--notebooks", str(notebooks), "--params", str(params), "run", "--profile", "smoke", *args])


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A real HTTP server on loopback serving a copy of the data directory."""
    src = tmp_path / "source"
    (src / "fx" / "net").mkdir(parents=True)
    (src / "fx" / "net" / "a.xml").write_bytes(BODY)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(src))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(study_data.MIRROR_ENV, f"http://127.0.0.1:{server.server_address[1]}/")
    yield src
    server.shutdown()


def test_missing_and_corrupted_data_is_fetched_before_the_notebook_starts(study, source, tmp_path, capsys):
    assert study("--only", "fx_needs") == 0
    assert (tmp_path / "data" / "fx" / "net" / "a.xml").read_bytes() == BODY
    err = capsys.readouterr()
    assert f"data: fetched 1 files (0.0 MB) into {tmp_path / 'data'}, sha256 verified" in err.err
    assert "[fx_needs] read <net/>" in err.out + err.err
    (tmp_path / "data" / "fx" / "net" / "a.xml").write_bytes(b"<ne")  # a truncated copy is fetched again
    assert study("--only", "fx_needs") == 0
    assert (tmp_path / "data" / "fx" / "net" / "a.xml").read_bytes() == BODY
    assert "data: fetched 1 files" in capsys.readouterr().err


def test_an_unreachable_source_says_so_once_and_skips_only_the_notebooks_that_need_it(study, tmp_path, monkeypatch, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv(study_data.MIRROR_ENV, f"http://127.0.0.1:{s.getsockname()[1]}/")
    assert study("--only", "fx_needs", "fx_free") == 3
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("files are missing from the data directory") == 1
    assert "data: 1 files are missing from the data directory" in err and "  fx/net/: a.xml\n" in err
    assert "run `make data`" in err and "set LLMTRAFFIC_DATA to a directory" in err
    assert "Skipped, since they need these files: fx_needs. The other notebooks run." in err
    assert "SKIPPED fx_needs: its data is missing (fx/net)" in err
    assert "1 of 2 notebooks succeeded, 1 skipped" in captured.out
    assert "[fx_free] no data needed" in captured.out + err
    runs = tmp_path / "runs" / "smoke"
    assert (runs / "fx_free.ipynb").exists() and not (runs / "fx_needs.ipynb").exists()  # never started
    summary = json.loads((tmp_path / "figures" / "run.json").read_text())
    assert summary["parts"][-1]["skipped"] == {"fx_needs": "its data is missing (fx/net): run `make data` with network, or set LLMTRAFFIC_DATA"}
    assert "fx_needs" not in summary["notebooks"]
    gallery = (tmp_path / "figures" / "README.md").read_text()
    assert "Skipped fx_needs in part 1: its data is missing (fx/net): run `make data` with network, or set LLMTRAFFIC_DATA." in gallery


def test_a_notebook_reading_data_it_does_not_declare_fails(study, source, capsys):
    assert study("--only", "fx_sneaky") == 1
    assert "UndeclaredDataError: data file fx/net/a.xml is not declared by this notebook" in capsys.readouterr().err


def test_every_notebook_declares_its_data():
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert "data" in nbformat.read(str(nb), as_version=4).metadata.get("llmtraffic", {}), nb.stem
        study_data.notebook_needs(nb)  # raises for a folder that holds no file of the manifest


def test_a_conditional_declaration_needs_its_folder_only_when_a_parameter_holds_the_value():
    needs = (study_data.Need("always"), study_data.Need("col", ("cologne1",)), study_data.Need("hz", ("hangzhou1x1", "hz_sumo")))
    assert study_data.folders_for(needs, {"scenarios": ["synthetic"]}) == ("always",)
    assert study_data.folders_for(needs, {"scenarios": ["cologne1"], "twins": {"x": "hz_sumo"}}) == ("always", "col", "hz")
    assert study_data.folders_for(needs, {"backbones": {"hangzhou1x1": "surrogate-tiny"}}) == ("always", "hz")  # keys count
    assert study_data.folders_for(needs, {"label": "cologne1-ish"}) == ("always",)  # whole values only
    # the real notebooks: tsc_main's smoke profile runs on the synthetic intersection and needs no data
    nb = ROOT / "notebooks" / "tsc_main.ipynb"
    [smoke] = runner.plan([nb], "smoke", ROOT / "params")
    [quick] = runner.plan([nb], "quick", ROOT / "params")
    assert smoke.data == () and quick.data == ("libsignal/cologne1", "libsignal/hangzhou_1x1_bc-tyc_18041610_1h")


def test_a_malformed_declaration_stops_before_anything_runs(study, tmp_path, capsys):
    _notebook(tmp_path / "notebooks", "fx_bad", ["fx/nowhere"], "pass")
    assert study("--only", "fx_bad") == 2
    assert "fx_bad.ipynb: metadata llmtraffic.data names 'fx/nowhere', which holds no file" in capsys.readouterr().err
    _notebook(tmp_path / "notebooks", "fx_bad", [{"folder": "fx/net", "when": "cologne1"}], "pass")
    assert study("--only", "fx_bad") == 2
    assert "entry {'folder': 'fx/net', 'when': 'cologne1'} is not a folder or {folder, when: [values]}" in capsys.readouterr().err
