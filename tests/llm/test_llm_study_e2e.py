"""The LLM path end to end: the reward-design notebooks run with an ``llm`` config against an
OpenAI-compatible test double on loopback (``llm_double``), record a cassette, and a second run
replays it with no server and gives bit-identical tables."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from llm_double import LoopbackLLM, answer

from llmtraffic.bus.reward_design import jobs
from llmtraffic.bus.reward_design.direct import parse_hold
from llmtraffic.bus.reward_design.extract import extract_code
from llmtraffic.llm import Cassette

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ["bus_llm_methods", "bus_ablation", "bus_llm_sensitivity"]
LLM_TABLES = {"bus_llm_methods": "table3", "bus_ablation": "table4", "bus_llm_sensitivity": "final_agents"}


def _study(tmp: Path, figures: str, llm: str) -> None:
    env = {**os.environ, "LLMTRAFFIC_RUNS": str(tmp / "runs"), "LLMTRAFFIC_FIGURES": str(tmp / figures),
           "PYTHONPATH": str(ROOT / "lib"), "SOME_VAR": "test-key"}
    done = subprocess.run([sys.executable, "-m", "llmtraffic.study", "run", "--profile", "smoke", "--only", *NOTEBOOKS,
                           "--set", f"llm={llm}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _tables(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.glob("bus_*/*.csv"))}


def test_the_double_answers_every_prompt_in_its_format():
    designer = {"messages": [{"role": "system", "content": "You are an expert in public transport"},
                             {"role": "user", "content": "## State\\nA list of 3 numbers"}]}
    codes = [answer({**designer, "seed": s}) for s in range(40)]
    assert sum("def reward" not in c or "import os" in c for c in codes) >= 4  # some malformed answers
    good = [extract_code(c) for c in codes if "import os" not in c and "```python" in c]
    assert len(set(good)) >= 10 and all("next_state[2]" in c for c in good)  # varied, reading the 3-value state
    direct = {"messages": [{"role": "system", "content": "You are a bus holding controller."},
                           {"role": "user", "content": "State: [1.0, 2.0, 3.0]"}]}
    holds = [parse_hold(answer({**direct, "seed": s})) for s in range(40)]
    assert None in holds and 0.0 in holds and len({h for h in holds if h}) >= 5


@pytest.mark.slow
def test_llm_rows_fill_record_a_cassette_and_replay_bit_identically(tmp_path):
    with LoopbackLLM() as double:
        _study(tmp_path, "recorded", f"{{backend: openai, base_url: {double.url}, model: test, api_key_env: SOME_VAR, backoff_s: 0.01}}")
        served = double.requests
    cassette = Cassette(tmp_path / "runs" / "llm" / "test.jsonl")
    assert served == len(cassette) + 1 > 20  # every answer recorded; the 429 was retried
    for stem, table in LLM_TABLES.items():
        frame = pd.read_csv(tmp_path / "recorded" / stem / f"{table}.csv", index_col=0)
        llm_rows = [label for label in frame.index if "test (paper: GPT-4)" in label]  # named after the model and the paper's LLM
        assert len(llm_rows) == {"bus_llm_methods": 4, "bus_ablation": 5, "bus_llm_sensitivity": 1}[stem]
        assert not frame.loc[llm_rows].astype(str).apply(lambda c: c.str.contains("not run")).any().any()
        assert not any("LLM designer" in label for label in frame.index)
    claims = json.loads((tmp_path / "recorded" / "bus_ablation" / "claims.json").read_text())["claims"]
    assert all(c["verdict"] != "not run" for c in claims)

    # the server is gone: a replay must answer everything from the cassette
    _study(tmp_path, "replayed", "{backend: openai, base_url: http://127.0.0.1:9/v1, model: test, api_key_env: SOME_VAR, "
                                 "backoff_s: 0.01, cache: {path: llm/test.jsonl, mode: replay}}")
    assert _tables(tmp_path / "replayed") == _tables(tmp_path / "recorded")
    assert len(Cassette(tmp_path / "runs" / "llm" / "test.jsonl")) == len(cassette)  # nothing new recorded


def test_llm_direct_with_the_double_counts_unreadable_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_VAR", "test-key")
    with LoopbackLLM() as double:
        run = jobs.direct_run(llm={"backend": "openai", "base_url": double.url, "model": "test", "api_key_env": "SOME_VAR",
                                   "backoff_s": 0.01, "cache": {"path": str(tmp_path / "d.jsonl"), "mode": "record"}},
                              eval_seeds=[3], horizon_s=1800.0)
    [row] = run.rows
    assert run.label == "LLM-direct · test" and 0 < row["failures"] < row["decisions"] // 3
    assert run.usage["calls"] == row["decisions"] and row["hold_time_s"] > 0


def test_a_designer_that_never_writes_valid_code_ends_labelled_and_the_tables_say_so(tmp_path, chat_server):
    """A weak model (here a loopback server that answers every prompt with prose) is a result: the
    loop ends within K tries, the notebook finishes, and its tables and claim name the outcome."""
    chat_server.script = [(200, chat_server.completion("A good reward balances the headways of the buses."), 0.0)]
    entry = f"{{name: prose, paper: GPT-4o, llm: {{backend: openai, base_url: '{chat_server.url}', model: prose}}}}"
    env = {**os.environ, "LLMTRAFFIC_RUNS": str(tmp_path / "runs"), "LLMTRAFFIC_FIGURES": str(tmp_path / "figures"),
           "PYTHONPATH": str(ROOT / "lib")}
    done = subprocess.run([sys.executable, "-m", "llmtraffic.study", "run", "--profile", "smoke", "--only",
                           "bus_llm_sensitivity", "--set", f"designers=[{entry}]", "--set", "tries=2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "figures" / "bus_llm_sensitivity"
    final = pd.read_csv(out / "final_agents.csv", index_col=0)
    # smoke: 2 iterations from the warm start, each an analysis, a modification and one repair (K = 2)
    outcome = "no valid reward from prose (paper: GPT-4o) in 2 tries per candidate, 2 candidates, 1 of 1 loops, 4 answers"
    assert final.loc["prose (paper: GPT-4o)"].astype(str).str.startswith(outcome).all()
    assert "4 × no code in the answer; the loop kept its warm start" in final.loc["prose (paper: GPT-4o)", "Avg travel time (s)"]
    assert len(chat_server.requests) == 6
    [claim] = json.loads((out / "claims.json").read_text())["claims"]
    assert claim["verdict"] == "no result" and claim["finding"].startswith(outcome)
    share = pd.read_csv(out / "valid_code_share.csv")
    mine = share[share["experiment"] == "prose (paper: GPT-4o)"].set_index("role")
    assert mine.loc["modifier", "code answers"] == 2 and mine.loc["modifier", "valid"] == 0
    assert mine.loc["analyzer", "requests"] == 2 and mine.loc["repair (error feedback)", "requests"] == 2
    assert mine["valid-code share"].dropna().eq(0).all() and mine["valid-code share"].isna().sum() == 1  # the analyzer writes no code
