from pathlib import Path

import pytest

from llmtraffic.study.cli import main
from llmtraffic.study.params import ParamError, load_profile, notebook_parameters, parse_set, validate

FIXTURES = Path(__file__).parent / "fixtures"

NB = FIXTURES / "notebooks" / "fx_plot.ipynb"


def test_parameters_cell_is_read_with_types():
    declared = notebook_parameters(NB)
    assert {k: p.default for k, p in declared.items()} == {
        "n": 3, "scale": 1.0, "label": "fixture", "seeds": [0, 1], "extra": None,
    }
    assert declared["n"].type_name == "int"


def test_validate_accepts_and_normalises():
    declared = notebook_parameters(NB)
    got = validate("fx_plot", {"n": 4, "scale": 2, "seeds": [3], "extra": {"a": 1}}, declared)
    assert got == {"n": 4, "scale": 2.0, "seeds": [3], "extra": {"a": 1}}
    assert isinstance(got["scale"], float)
    assert validate("fx_plot", {"scale": "1e-3"}, declared) == {"scale": 0.001}  # PyYAML reads 1e-3 as text


@pytest.mark.parametrize(
    "values, words",
    [
        ({"nn": 1}, ["fx_plot", "'nn'", "allowed: extra, label, n, scale, seeds"]),
        ({"n": "three"}, ["fx_plot", "'n'", "must be int"]),
        ({"n": 2.5}, ["'n'", "must be int"]),
        ({"n": True}, ["'n'", "must be int"]),
        ({"label": 3}, ["'label'", "must be str"]),
        ({"seeds": 3}, ["'seeds'", "must be list"]),
    ],
)
def test_validate_rejects_with_named_key(values, words):
    with pytest.raises(ParamError) as err:
        validate("fx_plot", values, notebook_parameters(NB))
    for word in words:
        assert word in str(err.value)


def test_extends_resolution(tmp_path):
    params = FIXTURES / "params"
    assert load_profile(params, "fx_plot", "smoke") == {"n": 2, "label": "smoke-run"}
    assert load_profile(params, "fx_plot", "quick") == {"n": 5, "label": "smoke-run"}
    assert load_profile(params, "fx_plot", "paper") == {}  # no file: the notebook's defaults


def test_extends_cycle_and_missing_base(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "a.yaml").write_text("extends: b\nn: 1\n")
    (tmp_path / "nb" / "b.yaml").write_text("extends: a\n")
    with pytest.raises(ParamError, match="cycle a -> b -> a"):
        load_profile(tmp_path, "nb", "a")
    (tmp_path / "nb" / "c.yaml").write_text("extends: nowhere\n")
    with pytest.raises(ParamError, match="extends 'nowhere'"):
        load_profile(tmp_path, "nb", "c")


def test_parse_set():
    assert parse_set(["seeds=[0, 1]", "lr=0.5", "name=abc"]) == {"seeds": [0, 1], "lr": 0.5, "name": "abc"}
    with pytest.raises(ParamError, match="key=value"):
        parse_set(["oops"])


def _cli(*args):
    return main(["--notebooks", str(FIXTURES / "notebooks"), "--params", str(FIXTURES / "params"), *args])


def test_unknown_parameter_exits_2_and_runs_nothing(outdirs, capsys):
    assert _cli("run", "--profile", "smoke", "--only", "fx_plot", "--set", "nn=1") == 2
    err = capsys.readouterr().err
    assert "fx_plot" in err and "'nn'" in err and "allowed:" in err and "Nothing was executed" in err
    assert not (outdirs / "runs").exists() and not (outdirs / "figures" / "fx_plot").exists()


def test_wrong_type_in_profile_file_exits_2(outdirs, tmp_path, capsys):
    params = tmp_path / "params" / "fx_plot"
    params.mkdir(parents=True)
    (params / "smoke.yaml").write_text("n: many\n")
    code = main(["--notebooks", str(FIXTURES / "notebooks"), "--params", str(tmp_path / "params"),
                 "run", "--profile", "smoke", "--only", "fx_*"])
    assert code == 2
    assert "'n' must be int" in capsys.readouterr().err
    assert not (outdirs / "runs").exists()


def test_list_shows_profiles_and_defaults(capsys):
    assert _cli("list") == 0
    out = capsys.readouterr().out
    assert "fx_plot  (profiles: smoke, quick)" in out
    assert "n = 3   [smoke=2 quick=5]" in out


def test_parameters_cell_with_tricky_comments_and_bad_cells(tmp_path):
    import nbformat

    def notebook(source, tags=("parameters",)):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = list(tags)
        nb.cells = [cell]
        path = tmp_path / "nb.ipynb"
        nbformat.write(nb, path)
        return path

    src = 'variants = ["a", "b"]  # "a" = the full loop\nlr: float = 1e-3  # it\'s = small\nname = "x"'
    declared = notebook_parameters(notebook(src))
    assert {k: p.default for k, p in declared.items()} == {"variants": ["a", "b"], "lr": 1e-3, "name": "x"}
    assert declared["variants"].help == '"a" = the full loop'
    with pytest.raises(ParamError, match="'f' is not a literal"):
        notebook_parameters(notebook("f = len([1])"))
    with pytest.raises(ParamError, match="line 2 is not a plain"):
        notebook_parameters(notebook("a = 1\nprint(a)"))
    with pytest.raises(ParamError, match="expected one cell tagged 'parameters', found 0"):
        notebook_parameters(notebook("a = 1", tags=()))
