"""OracleTSC jobs and their plain tables: backbones, agreement, cells and labels, the cached fine-tune job."""

import json
import math

import numpy as np
import pytest
import torch

from llmtraffic import paths as study_paths
from llmtraffic.signal import llm_jobs
from llmtraffic.signal.backbones import NEEDS_GPU, SURROGATE, backbone_unavailable, ppo_config, table8_hurdle
from llmtraffic.signal.llm_jobs import after_of, answer_agreement, evaluate_backbone, finetune, pool
from llmtraffic.signal.llm_tables import (agreement_table, change_cells, change_text, results_table, reward_label,
                                          share_above, summarize, traces_table)

TINY = {"collect_seeds": [1000], "episode_s": 300, "steps": 0, "hidden": 32}
"""An unsupervised tiny surrogate: enough to exercise the job quickly."""


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _evaluation(queues, travel, delays, throughputs, invalid, deadlocks, r_env):
    return {"runs": [{"seed": i, "queue": q, "travel_time_s": t, "travel_time_all_s": t, "delay": d,
                      "throughput": n, "invalid_rate": v, "deadlock": k, "r_env": r}
                     for i, (q, t, d, n, v, k, r) in enumerate(zip(queues, travel, delays, throughputs, invalid, deadlocks, r_env))],
            "agreement": [{"modal_share": 1.0, "entropy": 0.0}, {"modal_share": 0.5, "entropy": math.log(2)}]}


def test_answer_agreement_by_hand():
    a = answer_agreement([0, 0, 1, None])
    assert a["modal_share"] == 0.5 and a["distinct"] == 3 and a["invalid"] == 0.25
    assert a["entropy"] == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    unanimous = answer_agreement([2] * 8)
    assert unanimous == {"modal_share": 1.0, "distinct": 1, "entropy": 0.0, "invalid": 0.0}
    with pytest.raises(ValueError, match="no answers"):
        answer_agreement([])


def test_summary_cells_and_share_above():
    before = _evaluation([20, 30], [100, 140], [0.5, 0.7], [1000, 1100], [0.0, 0.1], [False, True], [[0, 3, -1], [5]])
    after = _evaluation([10, 14], [90, 90], [0.4, 0.4], [1200, 1210], [0.0, 0.0], [False, False], [[3, 3], [0, 1]])
    s = summarize(before)
    assert s["queue"] == 25 and s["deadlocks"] == 1 and s["runs"] == 2 and s["invalid_rate"] == pytest.approx(0.05)
    assert s["modal_share"] == 0.75 and s["entropy"] == pytest.approx(math.log(2) / 2)
    cells = change_cells(after, before)
    assert cells == {"Travel Time": "90.00 (−25%)", "Queue": "12.00 (−52%)", "Delay": "0.40 (−33%)",
                     "Throughput": "1205 (+15%)", "Invalid answers": "0.0%", "Deadlocks": "0/2"}
    assert change_text(after, before) == "queue 12.00 vs 25.00 (-52 %), invalid answers 0.0 %"
    assert change_text({"unavailable": NEEDS_GPU}, before) == f"not run ({NEEDS_GPU})"
    broken = {"runs": [{**r, "invalid_rate": 1.0} for r in after["runs"]]}
    assert change_text(broken, before).startswith("n/a (100 % invalid answers")
    assert change_cells(before)["Queue"] == "25.00" and change_cells(before)["Invalid answers"] == "5.0%"
    assert share_above(before, 2.5) == 0.5  # 3 and 5 of [0, 3, -1, 5]
    table = results_table({"base": (before, None), "tuned": (after, before), "8B": ({"unavailable": NEEDS_GPU}, None)})
    assert table.loc["tuned", "Queue"] == "12.00 (−52%)" and table.loc["base", "Queue"] == "25.00"
    assert set(table.loc["8B"]) == {NEEDS_GPU}
    assert results_table({"x": (after, {"unavailable": NEEDS_GPU})}).loc["x", "Queue"] == "12.00"
    for ev in (before, after):
        for probe, phases in zip(ev["agreement"], ([1, 1], [0, None])):
            probe.update(answer_agreement(phases))
    agree = agreement_table({"before": before})
    assert agree.loc["before"].to_dict() == {"probes": 2, "modal share": 0.75, "distinct phases": 1.5,
                                             "entropy (nats)": round(math.log(2) / 2, 3), "answers without a phase": 0.25}
    assert after_of({"unavailable": NEEDS_GPU}) == {"unavailable": NEEDS_GPU}
    for ev in (before, after):
        ev.update(scenario="x", episode_s=10, traces=[])
    pooled = pool([before, after])
    assert summarize(pooled)["queue"] == (20 + 30 + 10 + 14) / 4 and summarize(pooled)["runs"] == 4
    assert len(pooled["agreement"]) == 4
    assert pool([before, {"unavailable": NEEDS_GPU}]) == {"unavailable": NEEDS_GPU}
    assert share_above(after, 2.5) == 0.5


def test_reward_labels():
    assert reward_label({}) == "R_env"
    assert reward_label({"hurdle": 2.7}) == "R_env − H_R(=2.7)"
    assert reward_label({"entropy": "softmax", "tau": 0}) == "R_env + w·R_E (softmax DSE, τ=0)"
    assert reward_label({"hurdle": 3, "entropy": "naive", "w_e": 0.5}) == "R_env − H_R(=3) + 0.5·R_E (naive DSE)"
    with pytest.raises(ValueError, match="RewardConfig.entropy"):
        reward_label({"entropy": "bogus"})


def test_paper_backbones_say_they_need_a_gpu_and_use_table8():
    assert backbone_unavailable(SURROGATE) is None
    if not torch.cuda.is_available():
        assert backbone_unavailable("Qwen3-8B") == NEEDS_GPU
        out = finetune("Qwen3-8B", "cologne1", {"episodes": 1}, [100])
        assert out["unavailable"] == NEEDS_GPU
        assert evaluate_backbone("LLaMA3-8B", "hangzhou1x1", [100])["unavailable"] == NEEDS_GPU
    cfg = ppo_config("Qwen3-0.6B", "hangzhou1x1")
    assert cfg.load_in_4bit and cfg.actor_lr == 2.5e-5 and cfg.clip_high == 0.5 and cfg.max_new_tokens == 512
    assert ppo_config("Qwen3-8B", "hangzhou1x1").actor_weight_decay == 8e-7
    assert table8_hurdle("LLaMA3-8B", "cologne1", 1.0) == 3.7 and table8_hurdle(SURROGATE, "cologne1", 1.0) == 1.0
    assert ppo_config(SURROGATE, "cologne1").actor_lr == 5e-4
    assert ppo_config(SURROGATE, "cologne1", group_size=4).group_size == 4


def test_finetune_job_runs_caches_and_reports(monkeypatch):
    oracle = {"episodes": 1, "episode_s": 360, "update_every_s": 180, "checkpoint_every_s": 180,
              "reward": {"hurdle": 1.0, "entropy": "softmax", "tau": 1.0}}
    kwargs = dict(oracle=oracle, eval_seeds=[7, 8], select_seed=5, ppo={"group_size": 2}, surrogate=TINY, probe_every=12)
    out = finetune(SURROGATE, "synthetic", **kwargs)
    assert [e["updates"] for e in out["training"]] == [2]
    [stats] = out["training"]
    assert len(stats["update_stats"]) == 2 and all(0 <= u["clip_frac"] <= 1 and u["kl"] >= 0 for u in stats["update_stats"])
    assert [r["checkpoint"] for r in out["selection"]] == ["ep0_t00180.pt", "ep0_t00360.pt"]
    best = min(out["selection"], key=lambda r: (r["deadlock"], r["queue"]))
    assert out["best_checkpoint"].endswith(best["checkpoint"])
    evaluation = out["after"]["synthetic"]
    assert [r["seed"] for r in evaluation["runs"]] == [7, 8]
    decisions = 36
    for run in evaluation["runs"]:
        assert len(run["queue_series"]) == decisions and len(run["r_env"]) == decisions - 1
        assert 0 <= run["invalid_rate"] <= 1
    assert len(evaluation["agreement"]) == 2 * math.ceil(decisions / 12)
    assert all(a["distinct"] <= 2 and 0.5 <= a["modal_share"] <= 1 for a in evaluation["agreement"])
    assert [t["decision"] for t in evaluation["traces"]] == [0, 12, 24]
    assert all(len(t["answers"]) == 2 == len(t["phases"]) for t in evaluation["traces"])
    assert summarize(evaluation)["queue"] == pytest.approx(np.mean([r["queue"] for r in evaluation["runs"]]))
    assert after_of(out) is evaluation
    traces = traces_table({"after": evaluation})
    assert list(traces.index) == [("after", 0), ("after", 12), ("after", 24)]

    def must_not_train(*args, **kw):
        raise AssertionError("a cached fine-tune was trained again")

    monkeypatch.setattr(llm_jobs, "train_together", must_not_train)
    again = finetune(SURROGATE, "synthetic", **kwargs)
    assert again["after"]["synthetic"]["runs"] == evaluation["runs"]


def test_before_evaluation_is_seeded_and_cached():
    first = evaluate_backbone(SURROGATE, "synthetic", [3], episode_s=200, ppo={"group_size": 2}, surrogate=TINY, probe_every=5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMTRAFFIC_FRESH", "1")  # rebuild instead of loading: same seeds, same episode
        second = evaluate_backbone(SURROGATE, "synthetic", [3], episode_s=200, ppo={"group_size": 2}, surrogate=TINY, probe_every=5)
    assert first["runs"] == second["runs"] and first["agreement"] == second["agreement"]
    assert len(first["agreement"]) == 4 and first["traces"][0]["decision"] == 0


def test_one_checkpoint_is_used_without_a_selection_episode(monkeypatch):
    def no_selection(*args, **kw):
        raise AssertionError("select_best ran with a single checkpoint")

    monkeypatch.setattr(llm_jobs, "select_best_together", no_selection)
    oracle = {"episodes": 1, "episode_s": 180, "update_every_s": 180, "checkpoint_every_s": 180}
    out = finetune(SURROGATE, "synthetic", oracle, [7], ppo={"group_size": 2}, surrogate=TINY)
    assert out["selection"] == [] and out["best_checkpoint"].endswith("ep0_t00180.pt")
    assert len(out["after"]["synthetic"]["runs"][0]["queue_series"]) == 18


def test_fine_tunes_together_are_each_the_solo_fine_tune_and_share_its_cache(monkeypatch, tmp_path):
    oracle = {"episodes": 1, "episode_s": 360, "update_every_s": 180, "checkpoint_every_s": 180,
              "reward": {"entropy": "softmax", "tau": 1.0}}
    jobs = [dict(backbone=SURROGATE, scenario="synthetic", oracle={**oracle, "seed": s, "train_seed": 10 * s},
                 eval_seeds=[7, 8], select_seed=5, ppo={"group_size": 2, "seed": s}, surrogate=TINY, probe_every=12)
            for s in (0, 1)]
    together = llm_jobs.finetune_together(jobs)
    assert together[0]["after"]["synthetic"]["runs"] != together[1]["after"]["synthetic"]["runs"]
    third = {**jobs[1], "oracle": {**oracle, "seed": 2, "train_seed": 20}, "ppo": {"group_size": 2, "seed": 2}}
    assert llm_jobs.together_batches([jobs[0], third, jobs[1]]) == [[0, 2], [1]]  # the cached ones apart

    def must_not_train(*args, **kw):
        raise AssertionError("a fine-tune trained together was trained again")

    with pytest.MonkeyPatch.context() as mp:  # the solo job finds the entry the group wrote
        mp.setattr(llm_jobs, "train_together", must_not_train)
        assert finetune(**jobs[1])["after"] == together[1]["after"]
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path))  # an empty cache: the job trained alone
    alone = finetune(**jobs[1])
    for key in ("training", "selection", "after"):
        assert alone[key] == together[1][key], key
    assert alone["best_checkpoint"].rsplit("/", 1)[1] == together[1]["best_checkpoint"].rsplit("/", 1)[1]
    with pytest.raises(ValueError, match="differ in 'scenario'"):
        llm_jobs.finetune_together([jobs[0], {**jobs[1], "scenario": "cologne1"}])


def test_together_batches_group_what_can_share_a_batch_and_split_evenly():
    base = dict(backbone=SURROGATE, scenario="synthetic", oracle={"episodes": 1}, eval_seeds=[7], surrogate=TINY)
    seeds = [{**base, "ppo": {"seed": s}} for s in range(7)]
    other_place = {**base, "scenario": "cologne1"}
    hotter = {**base, "ppo": {"temperature": 0.5}}
    sweep = {**base, "ppo": {"clip_high": 0.5, "actor_lr": 1e-3}}  # training settings: same batch
    jobs = [*seeds, other_place, hotter, sweep]
    assert llm_jobs.together_batches(jobs, cap=10) == [[0, 1, 2, 3, 4, 5, 6, 9], [7], [8]]
    assert llm_jobs.together_batches(jobs) == [[0, 1, 2, 3], [4, 5, 6, 9], [7], [8]]  # TOGETHER = 5
    assert llm_jobs.together_batches(jobs, cap=3) == [[0, 1], [2, 3, 4], [5, 6, 9], [7], [8]]
    with pytest.raises(ValueError, match="cap"):
        llm_jobs.together_batches(jobs, cap=0)


def test_a_finetune_killed_after_its_selection_resumes_without_the_deleted_checkpoints(monkeypatch):
    """Once the best checkpoint is chosen only it and the last stay on disk, the selection of all
    three recorded first; a run killed in its evaluation resumes from that record."""
    oracle = {"episodes": 1, "episode_s": 360, "update_every_s": 120, "checkpoint_every_s": 120}
    kwargs = dict(oracle=oracle, eval_seeds=[7], select_seed=5, ppo={"group_size": 2, "seed": 3}, surrogate=TINY,
                  probe_every=36)

    class Killed(Exception):
        pass

    def killed(*args, **kw):
        raise Killed

    with monkeypatch.context() as mp:
        mp.setattr(llm_jobs, "evaluate_runs", killed)
        with pytest.raises(Killed):
            finetune(SURROGATE, "synthetic", **kwargs)
    [progress] = [p for p in (study_paths.runs_dir() / "cache" / "tsc_finetune").rglob("progress.json")
                  if json.loads(p.read_text())["config"]["update_every_s"] == 120]
    record = json.loads(progress.read_text())
    kept = sorted(p.name for p in progress.parent.glob("*.pt"))
    assert [r["checkpoint"] for r in record["selection"]] == ["ep0_t00120.pt", "ep0_t00240.pt", "ep0_t00360.pt"]
    assert kept == sorted({record["best"], "ep0_t00360.pt"}) == record["kept"]
    monkeypatch.setattr(llm_jobs, "select_best_together", killed)  # the record stands in for the deleted ones
    out = finetune(SURROGATE, "synthetic", **kwargs)
    assert out["selection"] == record["selection"] and out["best_checkpoint"].endswith(record["best"])
    assert [r["seed"] for r in out["after"]["synthetic"]["runs"]] == [7]
