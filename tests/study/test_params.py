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


# ----------------------------------------------------------------------------- settings from the command line


def _captured_overrides(monkeypatch, *args):
    """Run the CLI with ``runner.run`` replaced, returning its exit status and the overrides it got."""
    from llmtraffic.study import runner

    seen = {}

    def fake_run(profile, notebooks, params, only, overrides, *rest, **kw):
        seen["overrides"], seen["only"] = overrides, only
        return []

    monkeypatch.setattr(runner, "run", fake_run)
    return _cli("run", "--profile", "smoke", *args), seen


def test_repeated_flags_pairs_and_params_files_merge(outdirs, tmp_path, monkeypatch):
    settings = tmp_path / "mine.yaml"
    settings.write_text("extra: {backend: openai}\n")
    code, seen = _captured_overrides(
        monkeypatch, "--only", "fx_plot", "--only", "fx_fail",
        "--set", "n=4", "label=x", "--set", "scale=2.5", "-f", str(settings),
    )
    assert code == 0
    assert seen["overrides"] == {"extra": {"backend": "openai"}, "n": 4, "label": "x", "scale": 2.5}
    assert seen["only"] == ["fx_plot", "fx_fail"]


@pytest.mark.parametrize("where", ["two flags", "file and flag"])
def test_a_key_given_twice_is_an_error_naming_both_values(outdirs, tmp_path, monkeypatch, capsys, where):
    settings = tmp_path / "mine.yaml"
    settings.write_text("n: 7\n")
    args = ["--set", "n=4", "--set", "n=5"] if where == "two flags" else ["-f", str(settings), "--set", "n=5"]
    code, seen = _captured_overrides(monkeypatch, *args)
    assert code == 2 and not seen
    err = capsys.readouterr().err
    first = "4 (--set n=4)" if where == "two flags" else f"7 ({settings})"
    assert f"parameter 'n' is given twice: {first} and 5 (--set n=5)" in err


@pytest.mark.parametrize("source", ["--set", "params file", "profile file"])
def test_malformed_yaml_exits_2_naming_the_source_and_the_parser_message(outdirs, tmp_path, capsys, source):
    params = tmp_path / "params"
    (params / "fx_plot").mkdir(parents=True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("n: [0, 1\n")
    args = {"--set": ["--set", "n=[0,1"], "params file": ["-f", str(bad)], "profile file": []}[source]
    if source == "profile file":
        (params / "fx_plot" / "smoke.yaml").write_text("n: [0, 1\n")
    code = main(["--notebooks", str(FIXTURES / "notebooks"), "--params", str(params),
                 "run", "--profile", "smoke", "--only", "fx_plot", *args])
    assert code == 2
    err = capsys.readouterr().err
    where = {"--set": "--set 'n=[0,1'", "params file": str(bad), "profile file": str(params / "fx_plot" / "smoke.yaml")}
    assert where[source] in err and "not valid YAML: while parsing a flow sequence: expected ',' or ']'" in err
    assert "Traceback" not in err and not (outdirs / "runs").exists()


def test_unknown_profile_exits_2_naming_the_known_ones(outdirs, capsys):
    assert _cli("run", "--profile", "quik", "--only", "fx_plot") == 2
    err = capsys.readouterr().err
    assert "unknown profile 'quik'; known profiles: smoke, quick, paper" in err
    assert not (outdirs / "runs").exists()


# ----------------------------------------------------------------------------- deeper checks and declared constraints

CHECKED = '''episodes = 40  # >= 1; training episodes
horizon_h = 4.0  # test episodes
slack = 0.1  # >= 0 and < 1
eval_seeds = [100, 101]  # held-out episodes
agent_seeds = [0]
executor = "serial"
methods = ["a", "b"]  # a | b | c
dqn = {"hidden": [8], "episodes": 2}
designer = "rules"
llm = None
designers = [{"name": "rules", "llm": None}]'''


def _notebook_dir(tmp_path, source, stem="nb"):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("print('ran')")]
    folder = tmp_path / "notebooks"
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / f"{stem}.ipynb")
    (tmp_path / "params").mkdir(exist_ok=True)
    return folder


@pytest.mark.parametrize(
    "setting, words",
    [
        ("eval_seeds=['a', None]", ["'eval_seeds[0]' must be int", "got str 'a'"]),
        ("eval_seeds=[1, null]", ["'eval_seeds[1]' must be int", "got NoneType None"]),
        ("eval_seeds=[-1]", ["'eval_seeds[0]' must be >= 0"]),
        ("agent_seeds=[0.5]", ["'agent_seeds[0]' must be int"]),
        ("episodes=0", ["'episodes' must be >= 1, got 0"]),
        ("horizon_h=0", ["'horizon_h' must be > 0"]),
        ("horizon_h=.inf", ["'horizon_h' must be finite, got inf"]),
        ("horizon_h=.nan", ["'horizon_h' must be finite, got nan"]),
        ("slack=1.0", ["'slack' must be >= 0 and < 1, got 1.0"]),
        ("executor=threads", ["'executor' must be one of serial, processes, ray, got 'threads'"]),
        ("methods=[a, d]", ["'methods[1]' must be one of a, b, c"]),
        ("dqn={episodes: 0}", ["'dqn.episodes' must be >= 1"]),
        ("dqn={hidden: [8, x]}", ["'dqn.hidden[1]' must be int"]),
        ("episodes=null", ["'episodes' must be int", "got NoneType"]),
        ("llm=5", ["'llm' must be a mapping", "got int 5"]),
        ("llm={backend: nonsense}", ["'llm' backend must be one of local, openai, hf, replay, got 'nonsense'"]),
        ("llm={backend: openai, base_url: 'http://h/v1', model: m, tmperature: 1}", ["unknown keys ['tmperature']"]),
        ("llm={backend: openai, base_url: 'h/v1', model: m}", ["base_url must start with http:// or https://"]),
        ("llm={backend: openai, base_url: 'http://h/v1', model: m, max_retries: -1}", ["max_retries must be an integer >= 0"]),
        ("llm={backend: openai, base_url: 'http://h/v1', model: m, cache: {mode: replya}}", ["cache.mode must be one of"]),
        ("designers=[{name: x, llm: {backend: nonsense}}]", ["'designers[0].llm' backend must be one of"]),
        ("designer=gpt-4o", ["designer 'gpt-4o' needs an llm config", "designer=search"]),
    ],
)
def test_bad_values_exit_2_before_anything_runs(tmp_path, outdirs, capsys, setting, words):
    notebooks = _notebook_dir(tmp_path, CHECKED)
    code = main(["--notebooks", str(notebooks), "--params", str(tmp_path / "params"), "run", "--profile", "smoke",
                 "--set", setting])
    err = capsys.readouterr().err
    assert code == 2, err
    for word in words:
        assert word in err
    assert "notebook nb" in err and "Nothing was executed" in err and not (outdirs / "runs").exists()


def test_constraints_come_from_the_comment_and_the_conventions(tmp_path):
    declared = notebook_parameters(_notebook_dir(tmp_path, CHECKED) / "nb.ipynb")
    assert declared["episodes"].constraint.bounds == ((">=", 1.0),)
    assert declared["episodes"].help == ">= 1; training episodes"
    assert declared["methods"].constraint.choices == ("a", "b", "c")
    assert declared["eval_seeds"].constraint is None  # prose: its range comes from CONVENTIONS
    ok = validate("nb", {"episodes": 1, "horizon_h": 0.5, "slack": 0, "eval_seeds": [0], "executor": "ray",
                         "dqn": {"episodes": 1, "batch_size": 64}, "llm": {"backend": "replay", "cassette": "x"}},
                  declared)
    assert ok["slack"] == 0.0 and isinstance(ok["slack"], float)
    assert ok["dqn"] == {"episodes": 1, "batch_size": 64}  # keys the default lacks pass to the config
    with pytest.raises(ParamError, match=r"parameter 'episodes': constraint '>= one' is not"):
        notebook_parameters(_notebook_dir(tmp_path, "episodes = 4  # >= one") / "nb.ipynb")


# ----------------------------------------------------------------------------- retired names (issue 11)


def test_retired_names_are_rejected_with_the_new_ones_unless_still_declared(tmp_path):
    renamed = notebook_parameters(_notebook_dir(tmp_path, CHECKED + "\ndesign_seeds = [100]", stem="new") / "new.ipynb")
    with pytest.raises(ParamError) as err:
        validate("new", {"seeds": [0]}, renamed)
    assert "parameter 'seeds' was renamed (issue 11): use eval_seeds (held-out test episodes" in str(err.value)
    assert "or agent_seeds (independent trainings" in str(err.value)
    with pytest.raises(ParamError, match=r"'test_seeds' was renamed \(issue 11\): use design_seeds"):
        validate("new", {"test_seeds": [0]}, renamed)
    with pytest.raises(ParamError, match=r"'sensitivity_seeds' was renamed \(issue 11\): use eval_seeds"):
        validate("new", {"sensitivity_seeds": [0]}, renamed)
    # a notebook not renamed yet (the fixture declares `seeds`) keeps working
    assert validate("fx_plot", {"seeds": [3]}, notebook_parameters(NB)) == {"seeds": [3]}

