import json
from pathlib import Path

import pandas as pd

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


def test_fail_fast_stops_after_first_failure(outdirs, capsys):
    assert _cli("run", "--profile", "smoke", "--fail-fast") == 1
    assert not (outdirs / "figures" / "fx_plot").exists()  # fx_fail sorts first; fx_plot never started
