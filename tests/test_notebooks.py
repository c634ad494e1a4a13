"""Every notebook in notebooks/ executes end to end at the smoke profile, and stops before any
compute when a setting asks for a resource that is missing (issue 17)."""

import json
import socket
from pathlib import Path

import pytest

from llmtraffic.study import runner
from llmtraffic.study.cli import main
from llmtraffic.study.params import notebook_parameters, parameters_cell

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


# The matrix of issue 17. Its first column, no LLM and the default backbone, is the smoke run
# above; the other columns must stop before any compute, so they cost no notebook run.
TAKES_LLM = {"bus_ablation", "bus_case1", "bus_case2", "bus_case3", "bus_generic", "bus_llm_methods", "bus_llm_sensitivity"}
TAKES_BACKBONE = {"tsc_clip", "tsc_entropy_temperature", "tsc_generalization", "tsc_main",
                  "tsc_ppo_sensitivity", "tsc_reward_ablation", "tsc_seeds_and_g"}
TAKES_BACKBONES = {"tsc_hurdle"}  # a list of backbones (Fig. 9)
BACKBONE_PER_SCENARIO = {"tsc_clip"}  # backbones = {scenario: backbone}: a list is the wrong type


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SETTINGS = {
    # setting → (--set item, parameter it needs, exit status and words of the message when the notebook takes it)
    "unreachable llm": (lambda: f"llm={{backend: openai, base_url: 'http://127.0.0.1:{_closed_port()}/v1', model: gpt-4o}}",
                        "llm", 3, ["llm: endpoint http://127.0.0.1:", "is unreachable", "start the server or fix llm.base_url"]),
    "absent backbone": (lambda: "backbone=Qwen3-0.6B", "backbone", 3,
                        ["backbone 'Qwen3-0.6B' cannot run here", "needs local weights and a GPU", "backbone=surrogate-tiny"]),
    "absent backbone in a list": (lambda: "backbones=[surrogate-tiny, Qwen3-0.6B]", "backbones", 3,
                                  ["backbone 'Qwen3-0.6B' cannot run here", "needs local weights and a GPU"]),
    "unknown llm backend": (lambda: "llm={backend: nonsense}", "llm", 2,
                            ["parameter 'llm' backend must be one of local, openai, hf, replay, got 'nonsense'"]),
}


def test_the_matrix_knows_which_notebooks_take_which_setting():
    takes = {nb.stem: set(notebook_parameters(nb)) for nb in NOTEBOOKS}
    assert {stem for stem, names in takes.items() if "llm" in names} == TAKES_LLM
    assert {stem for stem, names in takes.items() if "backbone" in names} == TAKES_BACKBONE
    assert {stem for stem, names in takes.items() if "backbones" in names} == TAKES_BACKBONES | BACKBONE_PER_SCENARIO


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_papermill_reads_every_declared_parameter(notebook):
    """papermill checks the values it injects against its own reading of the parameters cell;
    a line it cannot read (a second `=` in the comment) makes it warn "Passed unknown parameter"
    for a parameter the notebook does declare."""
    from papermill.translators import PythonTranslator

    names = [p.name for p in PythonTranslator.inspect(parameters_cell(notebook))]
    assert names == list(notebook_parameters(notebook))


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_missing_resource_stops_before_compute(notebook, setting, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    item, name, status, words = SETTINGS[setting]
    code = main(["run", "--profile", "smoke", "--only", notebook.stem, "--set", item()])
    err = capsys.readouterr().err
    if notebook.stem in {"llm": TAKES_LLM, "backbone": TAKES_BACKBONE, "backbones": TAKES_BACKBONES}[name]:
        assert code == status, err
        assert f"{notebook.stem}" in err
        for word in words:
            assert word in err
    elif name == "backbones" and notebook.stem in BACKBONE_PER_SCENARIO:
        assert code == 2 and f"parameter 'backbones' must be dict" in err, err
    else:
        assert code == 2, err
        assert f"notebook {notebook.stem}: unknown parameter {name!r}" in err
    assert "Nothing was executed" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "figures").exists()
