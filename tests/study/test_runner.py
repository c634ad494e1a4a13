import json
from pathlib import Path

import pandas as pd
import pytest

from llmtraffic.study import runner
from llmtraffic.study.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def _cli(*args):
    return main(["--notebooks", str(FIXTURES / "notebooks"), "--params", str(FIXTURES / "params"), *args])


def test_run_applies_profile_and_writes_outputs(outdirs, capsys):
    assert _cli("run", "--profile", "quick", "--only", "fx_plot", "--set", "scale=2.0") == 0
    fig_dir = outdirs / "figures" / "fx_plot"
    table = pd.read_csv(fig_dir / "values.csv", index_col=0)
    assert table.loc["a", "value"] == 10.0  # quick: n = 5 (overrides smoke's 2), --set scale = 2
    assert table.loc["a", "value [paper]"] == 4.0
    meta = json.loads((fig_dir / "line.json").read_text())
    assert meta["profile"] == "quick"
    assert meta["params"] == {"n": 5, "scale": 2.0, "label": "smoke-run", "seeds": [0, 1], "extra": None}
    executed = json.loads((outdirs / "runs" / "quick" / "fx_plot.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "done smoke-run" in printed
    readme = (outdirs / "figures" / "README.md").read_text()
    assert "fx_plot/line.png" in readme and "profile quick" in readme
    captured = capsys.readouterr()
    assert "[fx_plot] done smoke-run" in captured.out + captured.err  # live log lines


def test_failing_notebook_is_named_with_its_cell_and_others_still_run(outdirs, capsys):
    assert _cli("run", "--profile", "smoke") == 1
    err = capsys.readouterr().err
    assert "fx_fail: code cell 3 (`raise RuntimeError" in err
    assert "RuntimeError: boom in the second cell" in err
    assert (outdirs / "figures" / "fx_plot" / "line.png").exists()  # fx_plot ran after fx_fail


def test_run_summary_records_times_and_failures_in_the_gallery(outdirs, capsys):
    assert _cli("run", "--profile", "smoke") == 1
    summary = json.loads((outdirs / "figures" / "run.json").read_text())
    assert summary["parts"][-1]["profile"] == "smoke"
    assert summary["parts"][-1]["jobs_failed"] == ["fx_fail"]
    assert summary["notebooks"]["fx_plot"]["ok"] and not summary["notebooks"]["fx_fail"]["ok"]
    assert summary["notebooks"]["fx_plot"]["seconds"] > 0
    assert summary["parts"][-1]["wall_s"] >= max(n["seconds"] for n in summary["notebooks"].values()) - 1
    # the notebooks' processes' CPU time (each kernel's start alone takes more than a CPU-second)
    # and the machine's speed reference, which make wall times of different days comparable
    assert summary["parts"][-1]["cpu_s"] >= 1.0
    speed = summary["parts"][-1]["speed_reference"]
    assert speed["small_ops_us"] > 0 and speed["matmul_gflops"] > 0
    for n in summary["notebooks"].values():  # when each ran, in seconds after the run's start
        assert 0 <= n["start_s"] < n["end_s"] <= summary["parts"][-1]["wall_s"] + 0.1
        assert n["end_s"] - n["start_s"] == pytest.approx(n["seconds"], abs=0.11)
    # both notebooks are of the study "fx": its span ends with the later of them
    assert summary["parts"][-1]["study_spans_s"] == {"fx": max(n["end_s"] for n in summary["notebooks"].values())}
    # a later partial run keeps the other notebook's entry and is recorded as a part of its own
    assert _cli("run", "--profile", "smoke", "--only", "fx_plot") == 0
    summary = json.loads((outdirs / "figures" / "run.json").read_text())
    assert set(summary["notebooks"]) == {"fx_fail", "fx_plot"}
    assert summary["parts"][-1]["only"] == ["fx_plot"] and summary["parts"][-1]["notebooks"] == ["fx_plot"]
    part = len(summary["parts"])  # 2 from committed code (one code version), else 1 (see test_verify)
    readme = (outdirs / "figures" / "README.md").read_text()
    assert f"| {part} | smoke | `fx_plot` (1) | " in readme and " | fx " in readme
    assert " GFLOP/s | " in readme  # the machine's speed reference
    assert "| fx_fail | " in readme and "FAILED" in readme
    assert f"| fx_plot | {part} | smoke | " in readme and " | — | " in readme  # no llm_cost table: no LLM time


def test_fail_fast_stops_after_first_failure(outdirs, capsys):
    assert _cli("run", "--profile", "smoke", "--fail-fast", "--jobs", "1") == 1
    assert not (outdirs / "figures" / "fx_plot").exists()  # fx_fail sorts first; fx_plot never started


def test_merged_settings_reach_the_notebook_its_log_and_its_sidecars(outdirs, tmp_path, capsys):
    """Issue 17: `--set a --set b` used to keep only the last flag."""
    settings = tmp_path / "mine.yaml"
    settings.write_text("scale: 3.0\n")
    assert _cli("run", "--profile", "smoke", "--only", "fx_plot", "--set", "n=4", "--set", "label=x", "-f", str(settings)) == 0
    meta = json.loads((outdirs / "figures" / "fx_plot" / "line.json").read_text())
    assert meta["params"] == {"n": 4, "scale": 3.0, "label": "x", "seeds": [0, 1], "extra": None}
    assert meta["changed_from_profile"] == {"n": 4, "scale": 3.0, "label": "x"}
    captured = capsys.readouterr()
    assert "[fx_plot] settings that differ from profile smoke: n=4, label='x', scale=3.0" in captured.out + captured.err


def _slow_notebook(folder: Path, pid_file: Path) -> None:
    """A notebook that starts a grandchild process (as a kernel starts workers or an LLM server),
    writes its pid, then sleeps."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("wait_s = 120")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(
        "import subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '300'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(wait_s)")]
    folder.mkdir()
    nbformat.write(nb, folder / "slow.ipynb")


def test_timeout_kill_names_the_notebook_and_the_limit_and_leaves_no_process(outdirs, tmp_path, gone):
    from llmtraffic.study import runner

    _slow_notebook(tmp_path / "nbs", tmp_path / "pid")
    [outcome] = runner.run("smoke", tmp_path / "nbs", tmp_path / "params", quiet=True, timeout_s=8)
    assert not outcome.ok and outcome.seconds < 60
    assert outcome.error.startswith("slow: killed by the timeout after 8 s (--timeout 8)")
    assert gone(int((tmp_path / "pid").read_text()), 10)  # the kernel's child went with papermill


def test_a_terminated_run_stops_its_notebooks_and_their_children(outdirs, tmp_path, gone):
    import os
    import signal
    import subprocess
    import sys
    import time

    _slow_notebook(tmp_path / "nbs", tmp_path / "pid")
    cmd = [sys.executable, "-m", "llmtraffic.study", "--notebooks", str(tmp_path / "nbs"), "--params",
           str(tmp_path / "params"), "run", "--profile", "smoke"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.time() + 120
        while not (tmp_path / "pid").exists() and time.time() < end and proc.poll() is None:
            time.sleep(0.2)
        assert (tmp_path / "pid").exists(), proc.stderr.read() if proc.poll() is not None else "notebook did not start"
        child = int((tmp_path / "pid").read_text())
        proc.send_signal(signal.SIGTERM)  # as a job scheduler stops a run
        assert proc.wait(timeout=runner.GRACE_S + 30) != 0
        assert gone(child, 10)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_prioritise_moves_matching_notebooks_first_in_pattern_order():
    names = [Path(f"{n}.ipynb") for n in ("bus_a", "bus_b", "tsc_main", "tsc_x")]
    assert [p.stem for p in runner.prioritise(names, ["tsc_main", "bus_b"])] == ["tsc_main", "bus_b", "bus_a", "tsc_x"]
    assert [p.stem for p in runner.prioritise(names, ["tsc_*"])] == ["tsc_main", "tsc_x", "bus_a", "bus_b"]
    assert runner.prioritise(names, None) == names


def _flaky_kernel(home: Path, deaths: int) -> Path:
    """A ``python3`` kernelspec (found first through JUPYTER_PATH) whose first ``deaths`` starts
    exit before the kernel replies, as a kernel that lost the ZMQ port race does."""
    import sys

    count = home / "starts"
    boot = (f"import pathlib, sys\nc = pathlib.Path({str(count)!r})\nn = int(c.read_text()) if c.exists() else 0\n"
            f"c.write_text(str(n + 1))\nif n < {deaths}:\n    sys.exit(1)\n"
            "from ipykernel import kernelapp\nkernelapp.launch_new_instance()\n")
    spec = home / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-c", boot, "-f", "{connection_file}"], "display_name": "flaky", "language": "python"}))
    return count


@pytest.mark.parametrize("deaths, ok", [(runner.KERNEL_START_TRIES - 1, True), (runner.KERNEL_START_TRIES, False)])
def test_a_kernel_that_dies_before_its_first_cell_is_started_again(outdirs, tmp_path, monkeypatch, deaths, ok):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    starts = _flaky_kernel(tmp_path / "jupyter", deaths)
    [outcome] = runner.run("smoke", FIXTURES / "notebooks", FIXTURES / "params", only=["fx_plot"], quiet=True)
    assert outcome.ok is ok
    assert int(starts.read_text()) == min(deaths + 1, runner.KERNEL_START_TRIES)
    assert f"start {runner.KERNEL_START_TRIES} of {runner.KERNEL_START_TRIES}" in outcome.log[0]


def test_a_notebook_that_fails_in_a_cell_is_not_started_again(outdirs, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    starts = _flaky_kernel(tmp_path / "jupyter", 0)
    [outcome] = runner.run("smoke", FIXTURES / "notebooks", FIXTURES / "params", only=["fx_fail"], quiet=True)
    assert not outcome.ok and int(starts.read_text()) == 1
