"""Every notebook in notebooks/ executes end to end at the smoke profile."""

import json
from pathlib import Path

import pytest

from llmtraffic.study import runner

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_clean_with_a_parameters_cell(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code"), "commit notebooks without outputs"
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"


@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_every_profile_file_fits_its_notebook(profile):
    plans = runner.plan(NOTEBOOKS, profile, ROOT / "params")
    assert [p.stem for p in plans] == [nb.stem for nb in NOTEBOOKS]
    for stem in [nb.stem for nb in NOTEBOOKS]:
        assert (ROOT / "params" / stem / f"{profile}.yaml").exists(), f"params/{stem}/{profile}.yaml missing"


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_at_smoke_profile(notebook):
    [outcome] = runner.run("smoke", only=[notebook.stem], quiet=True, timeout_s=900)
    assert outcome.ok, outcome.error + "\n" + "\n".join(outcome.log[-30:])
