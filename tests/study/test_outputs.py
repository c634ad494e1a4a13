import json
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from llmtraffic import study
from llmtraffic.study import gallery
from llmtraffic.study.outputs import atomic_write, compare, relative_difference, to_markdown
from llmtraffic.study.paths import ROOT

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def ctx(outdirs, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(FIXTURES / "notebooks" / "fx_plot.ipynb"))
    monkeypatch.setenv("LLMTRAFFIC_PROFILE", "smoke")
    namespace = {"n": 7, "scale": 0.5, "label": "x", "seeds": [4, 5], "extra": None, "unrelated": 1}
    return study.begin("fx_plot", namespace)


def test_begin_takes_declared_parameters_only(ctx):
    assert ctx.params == {"n": 7, "scale": 0.5, "label": "x", "seeds": [4, 5], "extra": None}
    assert ctx.title == "Fixture: a plot and a table"
    assert ctx.label == "profile smoke · seeds [4, 5]"


def test_figure_provenance_records_commit_and_params(ctx, outdirs):
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    study.save_figure(fig, "curve", caption="A curve")
    out = outdirs / "figures" / "fx_plot"
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "curve.svg").read_text().lstrip().startswith("<?xml")
    meta = json.loads((out / "curve.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert meta["git"]["commit"] == head and isinstance(meta["git"]["dirty"], bool)
    assert meta["params"]["n"] == 7 and meta["seeds"] == {"seeds": [4, 5]}
    assert meta["profile"] == "smoke" and meta["notebook"] == "fx_plot"
    assert meta["packages"]["numpy"] and meta["packages"]["llmtraffic"] == "0.1.0"
    assert meta["hardware"]["cpus"] >= 1 and meta["python"].count(".") == 2
    assert meta["wall_time_s"] >= 0 and meta["caption"] == "A curve"


def test_table_with_paper_values(ctx, outdirs):
    df = pd.DataFrame({"tt": [110.0, "90.0 ± 2.0"], "sd": [1.0, 2.0]}, index=pd.Index(["a", "b"], name="method"))
    study.save_table(df, "t1", paper={"tt": {"a": 100.0, "b": 100.0}}, caption="Table")
    csv = pd.read_csv(outdirs / "figures" / "fx_plot" / "t1.csv", index_col=0)
    assert list(csv.columns) == ["tt", "tt [paper]", "tt [Δ %]", "sd", "sd [paper]", "sd [Δ %]"]
    assert csv.loc["a", "tt [Δ %]"] == pytest.approx(10.0)
    assert csv.loc["b", "tt [Δ %]"] == pytest.approx(-10.0)
    assert pd.isna(csv.loc["a", "sd [paper]"])
    md = (outdirs / "figures" / "fx_plot" / "t1.md").read_text()
    assert "| a | 110 · paper 100 (Δ +10.0 %) | 1 |" in md
    assert "profile smoke" in md


def test_relative_difference_edge_cases():
    assert relative_difference(3, 4) == pytest.approx(-25.0)
    assert relative_difference("needs an LLM backend", 4) is None
    assert relative_difference(1.0, 0) is None
    assert relative_difference(-2.0, -4.0) == pytest.approx(50.0)


def test_gallery_lists_every_saved_output(ctx, outdirs):
    for name in ("f1", "f2"):
        fig, _ = plt.subplots()
        study.save_figure(fig, name, caption=f"caption {name}")
    study.save_table(pd.DataFrame({"v": [1]}), "tab", caption="caption tab")
    # an output of a bus notebook goes under the bus paper
    study.begin("bus_fake", None)
    study.save_table(pd.DataFrame({"v": [2]}), "other", caption="bus table")
    readme = (outdirs / "figures" / "README.md").read_text()
    for text in ("![caption f1](fx_plot/f1.png)", "![caption f2](fx_plot/f2.png)", "#### caption tab",
                 "[CSV](fx_plot/tab.csv)", "### fx_plot — Fixture: a plot and a table", "## Bus holding",
                 "[CSV](bus_fake/other.csv)", "notebooks/fx_plot.ipynb"):
        assert text in readme
    assert len(gallery.outputs(outdirs / "figures")) == 4
    assert readme.index("## Bus holding") < readme.index("## Other notebooks")


def test_atomic_write_keeps_old_file_when_interrupted(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old,complete\n")

    def half_then_crash(fh):
        fh.write(b"new,par")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old,complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]  # no temporary left behind


def test_save_figure_interrupted_leaves_previous_png(ctx, outdirs, monkeypatch):
    fig, _ = plt.subplots()
    study.save_figure(fig, "keep")
    png = outdirs / "figures" / "fx_plot" / "keep.png"
    before = png.read_bytes()

    def broken_savefig(self, fh, **kw):
        fh.write(b"\x89PNG partial")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        study.save_figure(fig, "keep")
    assert png.read_bytes() == before


def test_save_without_begin_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(study.context, "_current", None)
    with pytest.raises(RuntimeError, match=r"study.begin\('<notebook stem>', globals\(\)\)"):
        study.save_table(pd.DataFrame({"v": [1]}), "x")


def test_compare_keeps_rows_of_ours():
    ours = pd.DataFrame({"x": [1.0, 2.0]}, index=["a", "b"])
    out = compare(ours, pd.DataFrame({"x": [4.0]}, index=["b"]))
    assert list(out.index) == ["a", "b"] and out.loc["b", "x [Δ %]"] == pytest.approx(-50.0)
    assert "| b | 2 · paper 4 (Δ -50.0 %) |" in to_markdown(ours, {"x": {"b": 4.0}})
