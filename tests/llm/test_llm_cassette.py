"""Cassettes: record with a live backend, replay offline bit for bit, clear misses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmtraffic import llm

ASK = [{"role": "system", "content": "\nYou design rewards.\nBe brief."}, {"role": "user", "content": "Go."}]


def record(chat_server, openai_cfg, path):
    """Three requests, two of them identical, recorded into `path`; returns the answers."""
    chat_server.script = [
        (200, chat_server.completion("r1", "r2", prompt_tokens=20, completion_tokens=9), 0),
        (200, chat_server.completion("again", prompt_tokens=20, completion_tokens=4), 0),
        (200, chat_server.completion("cold", prompt_tokens=30, completion_tokens=2), 0),
    ]
    model = llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": "record"}})
    answers = [
        model.complete(ASK, n=2, temperature=0.7),
        model.complete(ASK, temperature=0.7),
        model.complete(ASK, temperature=0.7),  # identical request: the next recorded occurrence
        model.complete(ASK, temperature=0.0),
    ]
    return answers, model.usage()


def test_replay_gives_the_recorded_answers_without_the_server(chat_server, openai_cfg, tmp_path):
    path = tmp_path / "cassette.jsonl"
    answers, recorded = record(chat_server, openai_cfg, path)
    assert answers == [["r1", "r2"], ["again"], ["cold"], ["cold"]]
    assert recorded.live_calls == 4 and recorded.total_tokens == 20 + 9 + 20 + 4 + 30 + 2 + 30 + 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["occurrence"], e["texts"]) for e in lines] == [(0, ["r1", "r2"]), (0, ["again"]), (1, ["cold"]), (0, ["cold"])]
    assert all(e["latency_s"] > 0 and e["model"] == "test-model" for e in lines)
    chat_server.close()

    same_config = llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": "replay"}})
    cassette_only = llm.from_config({"backend": "replay", "cassette": str(path)})
    for model in (same_config, cassette_only):
        replayed = [
            model.complete(ASK, n=2, temperature=0.7),
            model.complete(ASK, temperature=0.7),
            model.complete(ASK, temperature=0.7),
            model.complete(ASK, temperature=0),
        ]
        assert replayed == answers
        usage = model.usage()
        assert (usage.calls, usage.live_calls, usage.total_tokens) == (4, 0, recorded.total_tokens)
        assert usage.latency_s == pytest.approx(recorded.latency_s)


def test_record_mode_reuses_what_the_cassette_holds(chat_server, openai_cfg, tmp_path):
    path = tmp_path / "cassette.jsonl"
    record(chat_server, openai_cfg, path)
    served = len(chat_server.requests)
    model = llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": "record"}})
    assert model.complete(ASK, n=2, temperature=0.7) == ["r1", "r2"]
    assert len(chat_server.requests) == served


def test_replay_miss_names_the_hash_and_first_prompt_line(chat_server, openai_cfg, tmp_path):
    path = tmp_path / "cassette.jsonl"
    record(chat_server, openai_cfg, path)
    model = llm.from_config({"backend": "replay", "cassette": str(path)})
    params = {"n": 1, "temperature": 0.7, "max_tokens": 99, "seed": None}
    key = llm.request_key("openai", "test-model", ASK, params)
    with pytest.raises(llm.CassetteMiss, match=rf"request {key} \(occurrence 0\).*'You design rewards.'"):
        model.complete(ASK, temperature=0.7, max_tokens=99)
    # a third identical request was never recorded: the miss names its occurrence
    model.complete(ASK, temperature=0.7)
    model.complete(ASK, temperature=0.7)
    with pytest.raises(llm.CassetteMiss, match=r"\(occurrence 2\)"):
        model.complete(ASK, temperature=0.7)


def test_replay_backend_needs_an_unambiguous_existing_cassette(tmp_path):
    with pytest.raises(FileNotFoundError, match="cassette .*nothing.jsonl does not exist"):
        llm.from_config({"backend": "replay", "cassette": str(tmp_path / "nothing.jsonl")})
    path = tmp_path / "two.jsonl"
    entry = {"key": "k", "occurrence": 0, "backend": "openai", "texts": ["x"],
             "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.1}
    path.write_text("\n".join(json.dumps(entry | {"model": m, "key": m}) for m in ("a", "b")))
    with pytest.raises(ValueError, match=r"pairs \[\('openai', 'a'\), \('openai', 'b'\)\]"):
        llm.from_config({"backend": "replay", "cassette": str(path)})
    assert llm.from_config({"backend": "replay", "cassette": str(path), "model": "b"}).backend.model == "b"


def test_malformed_cassette_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"key": "k", "occurrence": 0, "backend": "openai", "model": "m", "texts": ["x"],
            "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.1}
    path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good) + "\n")
    with pytest.raises(llm.CassetteError, match="bad.jsonl line 2 is not a cassette entry"):
        llm.Cassette(path)


@pytest.mark.parametrize(("change", "message"), [
    ({"texts": None}, r"line 2: 'texts' is None, not a list"),
    ({"prompt_tokens": None}, r"line 2: 'prompt_tokens' is None, not an integer"),
    ({"latency_s": "fast"}, r"line 2: 'latency_s' is 'fast', not a number"),
])
def test_a_mistyped_field_names_the_line_and_the_field(tmp_path, change, message):
    path = tmp_path / "c.jsonl"
    good = {"key": "k", "occurrence": 0, "backend": "openai", "model": "m", "texts": ["x"],
            "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.1}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"occurrence": 1} | change) + "\n")
    with pytest.raises(llm.CassetteError, match=message):
        llm.from_config({"backend": "replay", "cassette": str(path)})


def test_a_missing_field_names_the_line_and_the_field(chat_server, openai_cfg, tmp_path):
    path = tmp_path / "cassette.jsonl"
    record(chat_server, openai_cfg, path)
    lines = path.read_text().splitlines()
    entry = json.loads(lines[2])
    del entry["completion_tokens"]
    path.write_text("\n".join([*lines[:2], json.dumps(entry), lines[3]]) + "\n")
    for mode in ("record", "replay"):
        with pytest.raises(llm.CassetteError, match=r"cassette.jsonl line 3: the entry has no 'completion_tokens' "
                                                    r"\(fields: .*\); delete the line and record its request again"):
            llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": mode}})


def test_a_cut_off_last_line_is_dropped_when_recording_and_refused_in_replay(chat_server, openai_cfg, tmp_path):
    path = tmp_path / "cassette.jsonl"
    answers, _ = record(chat_server, openai_cfg, path)
    whole = path.read_text()
    path.write_text(whole[: whole.rindex("\n", 0, len(whole) - 1) + 40])  # the last line cut after 40 characters
    with pytest.raises(llm.CassetteError, match=r"cassette.jsonl line 4 \(the last\) was cut off .*Record again"):
        llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": "replay"}})
    with pytest.raises(llm.CassetteError, match="line 4 .* was cut off"):
        llm.from_config({"backend": "replay", "cassette": str(path)})

    served = len(chat_server.requests)
    chat_server.script = [(200, chat_server.completion("cold again", prompt_tokens=30, completion_tokens=3), 0)]
    with pytest.warns(UserWarning, match="dropped the cut-off last line 4"):
        model = llm.from_config(openai_cfg | {"cache": {"path": str(path), "mode": "record"}})
    assert model.complete(ASK, n=2, temperature=0.7) == answers[0]  # still recorded
    assert model.complete(ASK, temperature=0.0) == ["cold again"]  # the lost one, asked anew
    assert len(chat_server.requests) == served + 1
    replayed = llm.from_config({"backend": "replay", "cassette": str(path)})
    assert replayed.complete(ASK, temperature=0.0) == ["cold again"]
    assert len(path.read_text().splitlines()) == 4


def test_relative_cassette_paths_live_under_the_runs_directory(chat_server, openai_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    chat_server.script = [(200, chat_server.completion("x"), 0)]
    llm.from_config(openai_cfg | {"cache": {"path": "llm/c.jsonl"}}).complete(ASK)  # mode defaults to record
    assert (tmp_path / "runs" / "llm" / "c.jsonl").exists()
    assert llm.from_config({"backend": "replay", "cassette": "llm/c.jsonl"}).complete(ASK) == ["x"]


RECORDER = """
import json, sys
from llmtraffic import llm
cfg, path, asks = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
model = llm.from_config(cfg | {"cache": {"path": path, "mode": "record"}})
print(json.dumps([model.complete([{"role": "user", "content": a}]) for a in asks]))
"""


def test_parallel_recorders_ask_each_request_once_and_get_the_same_answers(chat_server, openai_cfg, tmp_path):
    """Two notebooks recording into one cassette at once (the study runs two at a time): the
    second to ask a request waits for the first one's answer instead of paying for it again."""
    chat_server.script = [(200, chat_server.completion("slow"), 0.4)]  # every answer takes 0.4 s: the asks overlap
    path = tmp_path / "cassette.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(llm.__file__).parents[2])}
    recorders = [subprocess.Popen([sys.executable, "-c", RECORDER, json.dumps(openai_cfg), str(path), json.dumps(asks)],
                                  env=env, stdout=subprocess.PIPE, text=True)
                 for asks in (["a", "b", "c"], ["a", "b", "d"])]
    outputs = [json.loads(r.communicate(timeout=60)[0]) for r in recorders]
    assert all(r.returncode == 0 for r in recorders)
    asked = sorted(r["body"]["messages"][0]["content"] for r in chat_server.requests)
    assert asked == ["a", "b", "c", "d"]  # without the claim: a and b twice
    assert outputs == [[["slow"]] * 3] * 2
    assert len(llm.Cassette(path)) == 4 and len(path.read_text().splitlines()) == 4
