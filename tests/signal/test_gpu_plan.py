"""The paper profile on one GPU, checked on the CPU: the plan and its refusal (exit status 2),
Table 8 by the weights' identity, each backbone's own Table 1 value in tsc_main's claims, the
pre-flight of paper_backbones."""

import json
import re
from pathlib import Path

import pytest

from llmtraffic.signal.backbones import PUBLISHED_CONFIGS, paper_identity, ppo_config, table8_hurdle, weights_id
from llmtraffic.signal.gpu_plan import finetunes, predict
from llmtraffic.study import cli
from llmtraffic.study.preflight import resource_problems

ROOT = Path(__file__).resolve().parents[2]


def _weights(folder: Path, name: str) -> Path:
    """A folder holding only the published config.json of a Table 1 backbone (identity needs no weights)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(PUBLISHED_CONFIGS[name]))
    return folder


def test_table8_follows_the_weights_identity_not_the_string_typed(tmp_path):
    qwen = str(_weights(tmp_path / "my-qwen", "Qwen3-0.6B"))  # a path, not a name: its config says what it is
    assert paper_identity(qwen) == "Qwen3-0.6B" and paper_identity("qwen/qwen3-0.6b") == "Qwen3-0.6B"
    cfg = ppo_config(qwen, "hangzhou1x1")
    assert (cfg.clip_high, table8_hurdle(qwen, "hangzhou1x1", 9.9)) == (0.5, 3.7)  # not the defaults 0.2 and 9.9
    assert cfg.gradient_checkpointing and cfg.micro_batch_size == 2 and cfg.load_in_4bit
    # the hub id recorded with the weights (a Hugging Face cache snapshot) wins over the config
    snap = _weights(tmp_path / "hub" / "models--meta-llama--Meta-Llama-3-8B-Instruct" / "snapshots" / "abc123", "LLaMA3-8B")
    assert paper_identity(str(snap)) == "LLaMA3-8B" and table8_hurdle(str(snap), "cologne1", 0.0) == 3.7
    assert weights_id(str(snap)) == "meta-llama/Meta-Llama-3-8B-Instruct@abc123"
    # elsewhere the cache key holds a hash of the files: other weights, another key
    before = weights_id(qwen)
    assert before.startswith("sha256:")
    other = _weights(tmp_path / "other", "Qwen3-0.6B")
    (other / "model.safetensors").write_bytes(b"other weights")
    assert weights_id(str(other)) != before
    assert paper_identity("surrogate-tiny") is None and paper_identity("smollm2-135m") is None


def _claim_cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "tsc_main.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells if "PAPER_QUEUE_CHANGE = {" in "".join(c["source"]))


def test_tsc_main_claims_set_each_backbone_against_its_own_table1_value():
    """The claim values are Table 1's queue changes of the same backbone (the notebook's own
    transcription of Table 1), and a Table 1 backbone is matched by identity."""
    cells = json.loads((ROOT / "notebooks" / "tsc_main.ipynb").read_text())["cells"]
    table = next("".join(c["source"]) for c in cells if "PAPER_TABLE1 = {" in "".join(c["source"]))
    scope: dict = {"FULL": "Hurdle and Softmax Probability"}
    exec(table[: table.index("\npenalty")], scope)
    claims = _claim_cell()
    exec(claims[: claims.index("recorded = []")], scope)
    for sc, per in scope["PAPER_QUEUE_CHANGE"].items():
        for backbone, value in per.items():
            queue = scope["PAPER_TABLE1"][sc][f"Hurdle and Softmax Probability ({backbone})"][1]
            assert float(re.search(r"\(([−-]\d+)%\)", queue).group(1).replace("−", "-")) == value, (sc, backbone)
    assert scope["PAPER_QUEUE_CHANGE"]["hangzhou1x1"]["LLaMA3-8B"] == -67.0  # not Qwen3-0.6B's -32
    assert "paper_identity(b) or SMALLEST" in claims


def test_the_preflight_covers_paper_backbones_and_names_hf_download():
    problems = resource_problems({"backbone": "surrogate-tiny", "paper_backbones": ["LLaMA3-8B"]})
    [problem] = problems
    assert problem.startswith("backbone 'LLaMA3-8B' cannot run here")
    assert "`hf download meta-llama/Meta-Llama-3-8B-Instruct`" in problem and "gated" in problem
    assert "HF_HUB_CACHE" in problem and "huggingface-cli" not in problem


def test_the_plan_counts_every_paper_fine_tune():
    params = dict(backbone="LLaMA3-8B", paper_backbones=["Qwen3-0.6B", "Qwen3-8B"], scenarios=["cologne1", "hangzhou1x1"],
                  agent_seeds=[0, 11, 6446], eval_seeds=[100, 101, 102, 103, 104], episodes=4, ppo={})
    jobs = finetunes("tsc_main", params)
    assert sum(j.runs for j in jobs) == 2 * (3 * 2 + 3 + 3)  # LLaMA3-8B with its random-reward control
    lines = predict("tsc_main", params)
    qwen = next(l for l in lines if l.job.backbone == "Qwen3-0.6B")
    assert qwen.work.episodes == 4 and qwen.work.eval_episodes == 5 and qwen.work.micro == 2
    assert qwen.hours["A6000"].total <= 12  # the paper's ~12 GPU-hours per fine-tune on an A6000
    assert finetunes("tsc_main", {**params, "backbone": "surrogate-tiny", "paper_backbones": []}) == []


def test_a_run_whose_plan_exceeds_the_gpu_is_refused_with_exit_2_naming_the_micro_batch(monkeypatch, capsys):
    monkeypatch.setenv("LLMTRAFFIC_GPU_GIB", "48")
    too_big = ["--set", "ppo={micro_batch_size: 8, gradient_checkpointing: false}"]
    assert cli.main(["run", "--profile", "paper", "--only", "tsc_main", *too_big]) == 2
    err = capsys.readouterr().err
    assert "GPU plan of tsc_main" in err  # printed first
    assert "does not fit the GPU" in err and "set ppo: {micro_batch_size: 1}" in err and "Nothing was executed" in err
    assert cli.main(["plan", "--profile", "paper", "--only", "tsc_main", *too_big]) == 2
    monkeypatch.delenv("LLMTRAFFIC_GPU_GIB")
    assert cli.main(["plan", "--profile", "paper", "--only", "tsc_main"]) == 0  # no GPU here: printed, not judged
    out = capsys.readouterr().out
    assert "| Qwen3-0.6B | hangzhou1x1 | 3 |" in out and "GPU-hours on one RTX A6000" in out
