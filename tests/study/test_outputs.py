import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from llmtraffic import study
from llmtraffic.study import gallery
from llmtraffic.study import stats
from llmtraffic.study.atomic import folder_lock
from llmtraffic.study.outputs import _renderer, add_stamp, atomic_write, compare, plot_series, relative_difference, to_markdown
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
    study.save_table(df, "t1", paper={"tt": {"a": 100.0, "b": 100.0}}, caption="Table", descriptive=True)
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
    study.save_table(pd.DataFrame({"v": [1]}), "tab", caption="caption tab", descriptive=True)
    # an output of a bus notebook goes under the bus paper
    study.begin("bus_fake", None)
    study.save_table(pd.DataFrame({"v": [2]}), "other", caption="bus table", descriptive=True)
    readme = (outdirs / "figures" / "README.md").read_text()
    for text in ("![caption f1](fx_plot/f1.png)", "![caption f2](fx_plot/f2.png)", "#### caption tab",
                 "[CSV](fx_plot/tab.csv)", "### fx_plot — Fixture: a plot and a table", "## Bus holding",
                 "[CSV](bus_fake/other.csv)", "notebooks/fx_plot.ipynb"):
        assert text in readme
    assert len(gallery.outputs(outdirs / "figures")) == 4
    assert readme.index("## Bus holding") < readme.index("## Other notebooks")
    assert "[SCORECARD.md](SCORECARD.md)" in readme and (outdirs / "figures" / "SCORECARD.md").exists()


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
        study.save_table(pd.DataFrame({"v": [1]}), "x", descriptive=True)


def test_compare_keeps_rows_of_ours():
    ours = pd.DataFrame({"x": [1.0, 2.0]}, index=["a", "b"])
    out = compare(ours, pd.DataFrame({"x": [4.0]}, index=["b"]))
    assert list(out.index) == ["a", "b"] and out.loc["b", "x [Δ %]"] == pytest.approx(-50.0)
    assert "| b | 2 · paper 4 (Δ -50.0 %) |" in to_markdown(ours, {"x": {"b": 4.0}})


# ---------------------------------------------------------------- output units


def _unit_consistent(folder: Path, name: str) -> dict:
    """The sidecar of ``name``, after checking it holds the SHA-256 of every file it lists."""
    meta = json.loads((folder / f"{name}.json").read_text())
    for f in meta["files"]:
        assert hashlib.sha256((folder / f).read_bytes()).hexdigest() == meta["sha256"][f], f
    return meta


def test_outputs_are_0644_whatever_the_umask(ctx, outdirs):
    old = os.umask(0o077)
    try:
        fig, _ = plt.subplots()
        study.save_figure(fig, "f")
        study.save_table(pd.DataFrame({"v": [1]}), "t", descriptive=True)
    finally:
        os.umask(old)
    out = outdirs / "figures" / "fx_plot"
    for f in ("f.png", "f.svg", "f.json", "t.csv", "t.md", "t.json"):
        assert (out / f).stat().st_mode & 0o777 == 0o644, f
    assert _unit_consistent(out, "f")["files"] == ["f.png", "f.svg"]


def test_failed_figure_leaves_the_previous_unit_and_no_temporary(ctx, outdirs, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    study.save_figure(fig, "keep")
    out = outdirs / "figures" / "fx_plot"
    before = {f: (out / f).read_bytes() for f in ("keep.png", "keep.svg", "keep.json")}
    real = matplotlib.figure.Figure.savefig

    def svg_fails(self, fh, **kw):
        if kw.get("format") == "svg":
            fh.write(b"<svg partial")
            raise OSError("disk full")
        return real(self, fh, **kw)

    ax.plot([1, 0])  # the new PNG would differ
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", svg_fails)
    with pytest.raises(OSError, match="disk full"):
        study.save_figure(fig, "keep")
    assert {f: (out / f).read_bytes() for f in before} == before  # PNG not replaced either
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]
    assert not fig.texts  # the stamp was taken off again


def test_failed_unit_write_cleans_up(tmp_path, monkeypatch):
    from llmtraffic.study import atomic

    (tmp_path / "a.csv").write_text("old a")
    real = os.replace
    calls = []

    def second_rename_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("no space")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="no space"):
        atomic.write_unit(tmp_path, {"a.csv": b"new a", "a.json": b"{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


WRITER = textwrap.dedent("""
    import sys
    import pandas as pd
    from llmtraffic import study
    writer, times = int(sys.argv[1]), int(sys.argv[2])
    study.begin("fx_plot", {"n": writer})
    print("ready", flush=True)
    for i in range(times):
        study.save_table(pd.DataFrame({"writer": [writer] * 200, "i": range(200)}), "race", caption=f"by {writer} (descriptive: no comparison)", descriptive=True)
""")


def _writer(outdirs, writer: int, times: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(writer), str(times)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_writer_waits_for_the_unit_lock(ctx, outdirs):
    out = outdirs / "figures" / "fx_plot"
    with folder_lock(out):
        proc = _writer(outdirs, 1, 1)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(2.0)
        assert not (out / "race.csv").exists() and proc.poll() is None  # blocked on the lock
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert _unit_consistent(out, "race")["caption"] == "by 1 (descriptive: no comparison)"


@pytest.mark.slow
def test_racing_runs_leave_one_consistent_unit(ctx, outdirs):
    procs = [_writer(outdirs, w, 25) for w in (1, 2)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    out = outdirs / "figures" / "fx_plot"
    meta = _unit_consistent(out, "race")
    writer = int(meta["caption"].split()[1])
    assert meta["params"]["n"] == writer
    assert set(pd.read_csv(out / "race.csv")["writer"]) == {writer}
    assert f"by {writer}" in (out / "race.md").read_text()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------- figure hygiene


def test_markdown_of_multilevel_index_and_columns_is_one_github_table():
    columns = pd.MultiIndex.from_tuples([("travel (s)", "mean"), ("travel (s)", "CI"), ("hold", "")])
    index = pd.MultiIndex.from_tuples([("case 1", "LLM"), ("case 1", "RL")], names=["scenario", "method"])
    df = pd.DataFrame([[1.5, 0.25, 3], [2.0, 0.5, 4]], index=index, columns=columns)
    md = to_markdown(df).splitlines()
    assert md[0] == "| scenario | method | travel (s) / mean | travel (s) / CI | hold |"
    assert md[1] == "|---|---|---|---|---|"
    assert md[2] == "| case 1 | LLM | 1.5 | 0.25 | 3 |"
    assert all(line.count("|") == 6 for line in md)
    assert "(" not in "".join(md).replace("(s)", "")  # no tuple reprs
    paper = pd.DataFrame([[1.0, None, None]], index=index[:1], columns=columns)
    assert "| case 1 | LLM | 1.5 · paper 1 (Δ +50.0 %) | 0.25 | 3 |" in to_markdown(df, paper)
    assert list(compare(df, paper).columns)[:3] == ["travel (s) / mean", "travel (s) / mean [paper]", "travel (s) / mean [Δ %]"]


def test_stamp_sits_below_every_label():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set_xlabel("a long x label that spans the whole width of the axes, right to its end")
    ax.legend(loc="lower right")
    fig.legend(loc="lower left")
    renderer = _renderer(fig)
    stamp = add_stamp(fig, "profile quick · seeds [0, 1, 2, 3, 4, 5] · designer rules")
    top = stamp.get_window_extent(renderer).y1
    others = [ax.get_tightbbox(renderer).y0] + [leg.get_window_extent(renderer).y0 for leg in fig.legends]
    assert top < min(others)


def test_stamped_figure_grows_and_saving_twice_does_not_stack_stamps(ctx, outdirs):
    fig, ax = plt.subplots()
    ax.set_xlabel("x")
    study.save_figure(fig, "plain", stamp=False)
    study.save_figure(fig, "stamped")
    study.save_figure(fig, "stamped")
    out = outdirs / "figures" / "fx_plot"
    height = {n: plt.imread(out / f"{n}.png").shape[0] for n in ("plain", "stamped")}
    assert height["stamped"] > height["plain"] and not fig.texts
    assert (out / "stamped.svg").read_text().count("profile smoke") == 1


def test_plot_series_keeps_coinciding_series_visible():
    fig, ax = plt.subplots()
    x = np.arange(20)
    lines = plot_series(ax, x, {"A": x * 1.0, "B": x * 1.0, "C": x * 1.0})
    assert len({line.get_linestyle() for line in lines}) == 3
    assert len({line.get_marker() for line in lines}) == 3
    starts = [line.get_markevery()[0] for line in lines]
    assert len(set(starts)) == 3  # markers staggered: every series shows its own
    assert lines[0].get_linewidth() > lines[2].get_linewidth() and lines[0].get_zorder() < lines[2].get_zorder()
    with pytest.raises(ValueError, match="series 'D' has 3 points, x has 20"):
        plot_series(ax, x, {"D": [1, 2, 3]})


def test_plot_series_draws_runs_as_mean_and_t_band():
    fig, ax = plt.subplots()
    runs = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # 3 agent seeds × 2 episodes
    (line,) = plot_series(ax, [0, 1], {"agent": runs})
    assert list(line.get_ydata()) == [3.0, 4.0]
    half = 4.302652729911275 * 2.0 / np.sqrt(3)  # t(0.975, 2) · s / √n with s = 2
    ys = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(3.0 - half) and ys.max() == pytest.approx(4.0 + half)
    assert stats.mean_ci(runs[:, 0]).half_width == pytest.approx(half)
    plot_series(ax, [0, 1], {"one run": runs[:1]})
    assert len(ax.collections) == 1  # a single run has no band


# ---------------------------------------------------------------- statistics in the sidecar (issue 35)


def test_a_comparative_table_stores_its_per_run_values_and_refuses_a_caption_without_a_unit(ctx, outdirs):
    from llmtraffic.study import stats, tables

    rows = pd.DataFrame({"method": ["a"] * 4 + ["b"] * 4, "agent_seed": [0, 0, 1, 1] * 2, "seed": [0, 1] * 4,
                         "q": [1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 5.0, 5.0]})
    summary = tables.summarize(rows, "q", reference="a")
    with pytest.raises(ValueError, match="gives n as a bare product"):
        study.save_table(summary.frame, "s", caption=f"Case 1, {stats.caption(4, 'agent seeds × eval seeds')}")
    with pytest.raises(ValueError, match="gives no n with its unit"):
        study.save_table(summary.frame, "s", caption="Case 1: mean ± 95 % t-interval")
    with pytest.raises(ValueError, match="stores its estimates"):
        study.save_table(summary.frame, "s", caption=summary.caption, estimates={})
    study.save_table(summary.frame, "s", caption=summary.caption)
    record = json.loads((outdirs / "figures" / "fx_plot" / "s.json").read_text())["stats"]
    assert record["format"] == 2 and not record["descriptive"]
    diff = record["estimates"]["b / Δ q vs a"]
    assert diff["runs"] == [0.5, 1.5] and diff["of"] == "2 agents (× 2 episodes each)"  # per agent: (2−1+2−2)/2, …
    assert (diff["low"], diff["high"]) == pytest.approx((stats.mean_ci(diff["runs"]).low, stats.mean_ci(diff["runs"]).high))
    study.save_table(pd.DataFrame({"lr": [1e-3]}), "params", caption="Settings", descriptive=True)
    assert "descriptive: no comparison" in (outdirs / "figures" / "fx_plot" / "params.md").read_text()


def test_the_gallery_sums_a_notebooks_recorded_llm_time(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "llm_cost.csv").write_text("experiment,calls,LLM time (s)\na,3,1614.1\nb,5,841.0\n")
    assert gallery.llm_seconds(tmp_path, "nb") == "2455"
    assert gallery.llm_seconds(tmp_path, "other") == "—"
    (tmp_path / "nb" / "llm_cost.csv").write_text("experiment,calls\na,3\n")  # no time column
    assert gallery.llm_seconds(tmp_path, "nb") == "—"


def test_a_figure_of_rows_with_their_own_seeds_stamps_those_not_the_notebooks(ctx, outdirs):
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    study.save_figure(fig, "own", caption="rows with their own seeds", rows="backbone tiny · agent_seeds [0, 1, 2]")
    stamp = [t.get_text() for t in fig.texts]
    meta = json.loads((outdirs / "figures" / "fx_plot" / "own.json").read_text())
    plt.close(fig)
    assert stamp == []  # the stamp is removed after saving
    assert meta["rows"] == "backbone tiny · agent_seeds [0, 1, 2]"
    svg = (outdirs / "figures" / "fx_plot" / "own.svg").read_text()
    assert "agent_seeds [0, 1, 2]" in svg and "seeds [4, 5]" not in svg  # the notebook's seeds are not claimed


def test_a_table_of_rows_with_their_own_seeds_and_backbone_says_those_in_its_footer(ctx, outdirs):
    study.save_table(pd.DataFrame({"v": [1.0]}, index=["a"]), "own", descriptive=True,
                     rows="backbone smollm2-135m · agent_seeds [0, 1, 2]")
    md = (outdirs / "figures" / "fx_plot" / "own.md").read_text()
    meta = json.loads((outdirs / "figures" / "fx_plot" / "own.json").read_text())
    assert "\n_profile smoke · backbone smollm2-135m · agent_seeds [0, 1, 2]" in md
    assert "seeds [4, 5]" not in md and meta["rows"] == "backbone smollm2-135m · agent_seeds [0, 1, 2]"
