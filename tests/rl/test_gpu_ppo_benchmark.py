"""benchmarks/gpu_ppo.py's dry run: the GPU benchmark's own code on the CPU with shrunk configs."""

import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch

from llmtraffic.rl.llm_ppo import LMPolicy

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_ppo.py"


@pytest.fixture(scope="module")
def gpu_ppo():
    spec = importlib.util.spec_from_file_location("gpu_ppo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_records_an_out_of_memory_row_and_goes_on_writing_out_after_every_row(gpu_ppo, tmp_path, monkeypatch):
    real_update, out, seen = LMPolicy.update, tmp_path / "rows.json", []

    def update(self, buffer):  # a mock CUDA out-of-memory error (none can happen on the CPU) without checkpointing
        seen.append(len(json.loads(out.read_text())) if out.exists() else 0)  # rows already on disk
        if not self.cfg.gradient_checkpointing:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (mock)")
        return real_update(self, buffer)

    monkeypatch.setattr(LMPolicy, "update", update)
    with torch.random.fork_rng():
        gpu_ppo.main(["--dry-run", "--models", "qwen3-0.6b", "--scenarios", "cologne1", "hangzhou1x1", "--out", str(out)])
    rows = json.loads(out.read_text())
    assert [r["checkpointing"] for r in rows] == ["on", "on", "off", "off"]  # checkpointing measured first
    assert seen == [0, 1, 2, 3]  # --out held every earlier row when the next update began
    assert all(r["s_per_update"] > 0 and r["predicted_gib"] > 0 for r in rows[:2])
    assert all(r["oom"].startswith("out of memory in the update: CUDA out of memory") for r in rows[2:])


def test_the_time_budget_stops_a_measurement_inside_it(gpu_ppo):
    start = time.monotonic()
    with pytest.raises(gpu_ppo.BudgetSpent, match="into it"):
        gpu_ppo.timed(lambda: time.sleep(30), "cpu", time.monotonic() + 0.5)
    assert time.monotonic() - start < 5
    with pytest.raises(gpu_ppo.BudgetSpent, match="before it started"):
        gpu_ppo.timed(lambda: None, "cpu", time.monotonic() - 1)
