"""Pre-flight checks of the resources a setting asks for (issue 17), against real loopback sockets."""

import socket

import pytest

from llmtraffic.study import begin
from llmtraffic.study.preflight import ResourceError, check, resource_problems


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openai(port: int, **extra) -> dict:
    return {"backend": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "gpt-4o", **extra}


def test_unreachable_endpoint_names_the_setting_and_what_to_do():
    [problem] = resource_problems({"llm": _openai(_closed_port())})
    assert problem.startswith("llm: endpoint http://127.0.0.1:")
    assert "is unreachable (ConnectionRefusedError" in problem
    assert "start the server or fix llm.base_url" in problem and "leave llm unset (null)" in problem


def test_listening_endpoint_passes_and_nested_configs_are_checked():
    with socket.socket() as server:  # a real loopback server socket: the connection is accepted by the kernel
        server.bind(("127.0.0.1", 0))
        server.listen()
        up = _openai(server.getsockname()[1])
        assert resource_problems({"llm": up}) == []
        down = _openai(_closed_port())
        problems = resource_problems({"llm": None, "designers": [{"name": "a", "llm": up}, {"name": "b", "llm": down}]})
    assert len(problems) == 1 and problems[0].startswith("designers[1].llm: endpoint")


def test_missing_key_variable_model_folder_and_cassettes(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    [problem] = resource_problems({"llm": _openai(_closed_port(), api_key_env="NO_SUCH_KEY_VAR")})
    assert "environment variable NO_SUCH_KEY_VAR (llm.api_key_env) is not set" in problem
    [problem] = resource_problems({"llm": {"backend": "hf", "path": str(tmp_path / "qwen")}})
    assert f"model folder {tmp_path / 'qwen'} does not exist" in problem
    cassette = tmp_path / "c.jsonl"
    [problem] = resource_problems({"llm": {"backend": "replay", "cassette": str(cassette)}})
    assert f"cassette {cassette} does not exist" in problem
    offline = _openai(_closed_port(), cache={"path": str(cassette), "mode": "replay"})
    assert "does not exist" in resource_problems({"llm": offline})[0]
    cassette.write_text("")
    assert resource_problems({"llm": offline}) == []  # replay needs no endpoint


def test_a_local_model_needs_its_weights_or_file_and_a_valid_config(tmp_path):
    from llmtraffic.study.preflight import llm_shape_problem

    assert resource_problems({"llm": {"backend": "local", "model": "smollm2-135m"}}) == []  # installed by make venv
    [problem] = resource_problems({"llm": {"backend": "local", "model": str(tmp_path / "x.gguf")}})
    assert f"model file {tmp_path / 'x.gguf'} does not exist" in problem and "leave llm unset" in problem
    [problem] = resource_problems({"llm": {"backend": "local", "model": "gpt-5"}})
    assert "unknown model 'gpt-5': registered models are ['qwen2.5-coder-1.5b', 'smollm2-135m']" in problem
    assert llm_shape_problem({"backend": "local", "model": "smollm2-135m", "threads": 0}) == "threads must be an integer >= 1, got 0"
    assert "lacks required keys ['model']" in llm_shape_problem({"backend": "local"})


def test_absent_backbone_names_what_to_do_and_the_surrogate_passes():
    from llmtraffic.signal import backbones
    from llmtraffic.signal import preflight

    assert preflight.SURROGATE == backbones.SURROGATE
    assert resource_problems({"backbone": "surrogate-tiny"}) == []
    [problem] = resource_problems({"backbone": "no-such-org/no-such-model"})
    assert problem.startswith("backbone 'no-such-org/no-such-model' cannot run here: it needs local weights")
    assert "backbone=surrogate-tiny" in problem


def test_every_backbone_of_a_list_or_mapping_is_checked():
    assert resource_problems({"backbones": ["surrogate-tiny"]}) == []
    [problem] = resource_problems({"backbones": ["surrogate-tiny", "no-such-org/m"]})
    assert problem.startswith("backbone 'no-such-org/m' cannot run here")
    [problem] = resource_problems({"backbone": "surrogate-tiny", "backbones": {"cologne1": "no-such-org/m", "x": "no-such-org/m"}})
    assert "no-such-org/m" in problem  # named once


def test_begin_stops_a_notebook_opened_by_hand(tmp_path, monkeypatch, outdirs):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("llm = None\ndesigner = 'rules'")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    path = tmp_path / "nb_hand.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(path))
    monkeypatch.delenv("LLMTRAFFIC_PROFILE", raising=False)
    with pytest.raises(ResourceError, match=r"nb_hand: llm: endpoint .* is unreachable"):
        begin("nb_hand", {"llm": _openai(_closed_port()), "designer": "gpt-4o"})
    ctx = begin("nb_hand", {"llm": None, "designer": "rules"})
    assert ctx.profile == "interactive" and ctx.changed == {}
    with pytest.raises(ValueError, match="designer 'gpt-4o' needs an llm config"):
        check("nb_hand", {"llm": None, "designer": "gpt-4o"})


def test_traces_table_of_no_evaluations_is_empty_not_a_key_error():
    """tsc_main with every backbone unavailable reached `traces_table({})` (issue 17)."""
    from llmtraffic.signal.llm_tables import traces_table

    table = traces_table({})
    assert table.empty and list(table.columns) == ["prompt", "answers", "phases"]
    assert traces_table({"x": {"unavailable": "needs local weights and a GPU (paper profile)"}}).empty


def test_a_registered_check_sees_each_value_once_and_is_named_in_the_problem(monkeypatch):
    from llmtraffic.study import preflight

    seen = []

    def problem(value: str) -> str | None:
        seen.append(value)
        return None if value == "ok" else "is not here: use ok"

    monkeypatch.setattr(preflight, "_resources", {})
    monkeypatch.setattr(preflight, "_loaded", True)  # this test's check only
    preflight.register_resource("widget", ("widget", "widgets"), problem)
    memo: dict = {}
    params = {"widget": "a", "widgets": {"x": "ok", "y": "a", "z": 3}}
    assert resource_problems(params, memo) == ["widget 'a' is not here: use ok"]
    assert resource_problems({"widgets": ["a", "b"]}, memo) == ["widget 'a' is not here: use ok", "widget 'b' is not here: use ok"]
    assert seen == ["a", "ok", "b"]  # memo: one check per value across notebooks


def test_the_studies_register_their_checks_and_the_default_backbone_imports_no_torch():
    """In a fresh interpreter: the harness finds both studies' checks without naming them."""
    import subprocess
    import sys

    code = ("import sys; from llmtraffic.study import preflight as p; "
            "assert p.resource_problems({'backbone': 'surrogate-tiny', 'backbones': ['surrogate-tiny']}) == []; "
            "print(sorted(p._resources), sorted(p._settings), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == "['backbone'] ['designer'] False"
