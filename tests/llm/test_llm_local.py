"""The managed llama.cpp server (``backend: local``) on the packaged SmolLM2-135M-Instruct weights:
real server, real loopback HTTP, real processes and signals."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llmtraffic.llm import Cassette, from_config
from llmtraffic.llm.local import LLMServerError, LocalConfig, exit_reason, server_options, stop_all

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
SMALL = {"backend": "local", "model": "smollm2-135m", "n_ctx": 1024, "threads": 1}


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    yield tmp_path / "runs"
    stop_all()  # each test starts its own server (the pool would share one across tests)


def test_the_server_starts_on_the_packaged_weights_and_a_seed_gives_one_text(runs):
    llm = from_config(SMALL)
    assert llm.backend.server.process is None  # nothing starts before a live request
    first = llm.complete(MESSAGES, temperature=0.9, max_tokens=12, seed=7)
    server = llm.backend.server
    again = llm.complete(MESSAGES, temperature=0.9, max_tokens=12, seed=7)
    assert first == again and first[0].strip()
    assert llm.usage().live_calls == 2 and llm.usage().completion_tokens > 0  # token counts of the openai backend
    assert server.log_path.parent == runs / "llm" and "--model_alias smollm2-135m" in server.log_path.read_text()
    assert 0 < server.startup_s < 120
    process, port = server.process, server.port
    stop_all()
    assert process.poll() is not None and _port_free(port)


def test_a_constraint_reaches_the_server_and_joins_the_cassette_key(runs):
    llm = from_config({**SMALL, "cache": {"path": "llm/c.jsonl"}})
    [text] = llm.complete(MESSAGES, temperature=0.9, max_tokens=8, seed=1, grammar='root ::= "yes" | "no"')
    assert text in ("yes", "no")
    [entry] = [json.loads(line) for line in (runs / "llm" / "c.jsonl").read_text().splitlines()]
    assert entry["params"]["grammar"] == 'root ::= "yes" | "no"' and entry["backend"] == "local"


def test_the_prompt_cache_and_lookup_decoding_reach_the_server_and_answer(runs):
    """The designer's levers are server flags: a cache of prompt states without prompt logits, and
    prompt-lookup speculative decoding; each server answers, and a repeated prefix is resumed."""
    cached = from_config({**SMALL, "prompt_logits": False, "prefix_cache_mb": 64})
    other = [{"role": "system", "content": "You answer briefly."}, *MESSAGES]
    for messages in (MESSAGES, other, MESSAGES):
        assert cached.complete(messages, temperature=0.7, max_tokens=8, seed=2)[0].strip()
    log = cached.backend.server.log_path.read_text()
    assert "--logits_all false --cache true --cache_type ram --cache_size 67108864" in log
    assert "cache hit" in log  # the third request resumed the first one's state, not the second's
    lookup = from_config({**SMALL, "draft": 4})
    assert lookup.complete(MESSAGES, temperature=0.7, max_tokens=8, seed=2)[0].strip()
    assert "--draft_model prompt-lookup-decoding --draft_model_num_pred_tokens 4" in lookup.backend.server.log_path.read_text()
    assert server_options(LocalConfig("m.gguf")) == ["--logits_all", "true"]  # llama-cpp-python's default
    with pytest.raises(ValueError, match="draft and prefix_cache_mb do not combine"):
        LocalConfig("m.gguf", draft=4, prefix_cache_mb=64)


def test_a_stop_sequence_ends_the_answer_where_the_free_answer_first_has_it(runs):
    llm = from_config({**SMALL, "cache": {"path": "llm/stop.jsonl", "mode": "record"}})
    [free] = llm.complete(MESSAGES, temperature=0.7, max_tokens=40, seed=4)
    assert "e" in free
    [stopped] = llm.complete(MESSAGES, temperature=0.7, max_tokens=40, seed=4, stop=["e"])
    assert stopped == free.split("e")[0]  # the same sample, ended before its first "e"
    entries = [json.loads(line) for line in (runs / "llm" / "stop.jsonl").read_text().splitlines()]
    assert "stop" not in entries[0]["params"] and entries[1]["params"]["stop"] == ["e"]  # two keys
    with pytest.raises(ValueError, match="stop must be a list of non-empty strings"):
        llm.complete(MESSAGES, max_tokens=4, stop=[""])


def test_the_designer_grammar_makes_the_server_write_a_fenced_reward_function(runs):
    from llmtraffic.bus.reward_design.decoding import GRAMMAR

    llm = from_config(SMALL)
    [text] = llm.complete(MESSAGES, temperature=0.7, max_tokens=48, seed=0, grammar=GRAMMAR)
    head = "```python\n"
    assert text.startswith(head) and "def reward(current_state, action, next_state):\n    " in text
    assert all(line.startswith(("import ", "def reward", "    ")) for line in text[len(head):].splitlines()[:-1])


def test_a_server_exit_status_is_named_and_an_illegal_instruction_says_how_to_rebuild():
    assert exit_reason(1) == "code 1"
    assert exit_reason(-signal.SIGKILL) == "SIGKILL"
    ill = exit_reason(-signal.SIGILL)
    assert ill.startswith("SIGILL (illegal instruction") and "make venv" in ill


def test_a_server_killed_mid_run_gives_a_clear_error_and_the_cassette_keeps_what_was_answered(runs):
    llm = from_config({**SMALL, "cache": {"path": "llm/killed.jsonl", "mode": "record"}})
    [kept] = llm.complete(MESSAGES, temperature=0.5, max_tokens=8, seed=3)
    server = llm.backend.server
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(10)
    with pytest.raises(LLMServerError, match=r"stopped with SIGKILL during the run.*Server log"):
        llm.complete(MESSAGES, temperature=0.5, max_tokens=8, seed=4)
    assert len(Cassette(runs / "llm" / "killed.jsonl")) == 1
    replay = from_config({"backend": "replay", "cassette": "llm/killed.jsonl"})
    assert replay.complete(MESSAGES, temperature=0.5, max_tokens=8, seed=3) == [kept]  # no server needed
    stop_all()
    again = from_config({**SMALL, "cache": {"path": "llm/killed.jsonl", "mode": "record"}})
    assert again.complete(MESSAGES, temperature=0.5, max_tokens=8, seed=3) == [kept]
    assert again.backend.server.process is None and again.usage().live_calls == 0  # recorded: no server starts


CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job inherits SIGINT ignored
from llmtraffic.llm import from_config
llm = from_config({"backend": "local", "model": "smollm2-135m", "n_ctx": 1024, "threads": 1})
llm.complete([{"role": "user", "content": "Hi"}], max_tokens=4, seed=0)
print(llm.backend.server.process.pid, llm.backend.server.port, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["interrupt", "terminate", "kill"])
def test_stopping_the_study_leaves_no_server_process(runs, how, gone):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "LLMTRAFFIC_RUNS": str(runs)}
    study = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = study.stdout.readline()
        assert line, study.stderr.read()[-2000:]
        pid, port = map(int, line.split())
        study.send_signal(how)
        study.wait(30)
        # SIGKILL leaves no chance to clean up: the server's watchdog sees its parent gone (within ~0.5 s)
        assert gone(pid, within_s=15), f"server {pid} still runs after the study got {how.name}"
        assert _port_free(port)
    finally:
        study.kill()
        study.wait()
