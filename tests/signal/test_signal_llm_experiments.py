"""Experiment rows: agent seeds, shared jobs named as such, the control rows' jobs."""

import pytest

from llmtraffic.signal import llm_experiments, llm_jobs
from llmtraffic.signal.controls import RANDOM_REWARD
from llmtraffic.signal.llm_experiments import AGENT_SEED_STRIDE, agent_job, finetune_rows


def test_agent_job_seeds_training_episodes_and_ppo():
    spec = {"backbone": "b", "scenario": "s", "oracle": {"episodes": 3}, "ppo": {"group_size": 4}, "eval_seeds": [100]}
    job = agent_job(spec, 2)
    assert job["oracle"] == {"episodes": 3, "train_seed": 2 * AGENT_SEED_STRIDE, "seed": 2}
    assert job["ppo"] == {"group_size": 4, "seed": 2} and spec["ppo"] == {"group_size": 4}  # the spec is left alone


def test_rows_run_each_distinct_job_once_and_name_shared_ones(monkeypatch):
    calls, groups = [], []

    def fake_finetune(backbone, scenario, oracle, eval_seeds, select_seed=50, ppo=None, surrogate=None):
        calls.append((oracle["reward"].get("hurdle", 0), oracle["seed"]))
        runs = [{"seed": s, "queue": 10 + oracle["seed"], "deadlock": False} for s in eval_seeds]
        return {"params": {"oracle": {"scenario": scenario}}, "training": [{"queue": 1.0}, {"queue": 0.5}],
                "after": {scenario: {"scenario": scenario, "episode_s": 10, "runs": runs, "agreement": [], "traces": []}}}

    def fake_together(jobs):
        groups.append(sorted((j["oracle"]["reward"].get("hurdle", 0), j["oracle"]["seed"]) for j in jobs))
        return [fake_finetune(**job) for job in jobs]

    monkeypatch.setattr(llm_jobs, "finetune_together", fake_together)
    spec = {"backbone": "b", "scenario": "s", "eval_seeds": [100, 101], "oracle": {"reward": {}}}
    rows = finetune_rows({"R_env": spec, "Fig. 9, H_R = 0": spec, "hurdle": {**spec, "oracle": {"reward": {"hurdle": 2}}}},
                         agent_seeds=[0, 1])
    assert sorted(calls) == [(0, 0), (0, 1), (2, 0), (2, 1)]  # the shared row did not train again
    assert groups == [[(0, 0), (0, 1), (2, 0), (2, 1)]]  # the rows of one intersection train together
    assert rows["Fig. 9, H_R = 0"].same_as == "R_env" and rows["R_env"].same_as == "" and rows["hurdle"].same_as == ""
    runs = rows["R_env"].evaluation["runs"]
    assert [(r["agent_seed"], r["seed"], r["queue"]) for r in runs] == [(0, 100, 10), (0, 101, 10), (1, 100, 11), (1, 101, 11)]
    assert llm_experiments.training_curves(rows["hurdle"]) == [[1.0, 0.5], [1.0, 0.5]]
    with pytest.raises(ValueError, match="agent_seeds is empty"):
        finetune_rows({"x": spec}, [])
    assert RANDOM_REWARD == "PPO, random reward"


def test_real_backbone_labels_and_settings():
    from llmtraffic.signal.llm_experiments import real_oracle, real_setting, rewordings

    run = {"episodes": 1, "episode_s": 300, "update_every_s": 100, "buffer_s": 400, "checkpoint_every_s": 300,
           "ppo": {"prompt": "brief", "prompt_history": 0, "lora_layers": 4, "stop_text": "</signal>", "max_new_tokens": 10}}
    assert real_setting(run) == ("1 PPO episode(s) of 300 s (paper: 3600 s), an update every 100 s on the last 400 s, "
                                 "answers free, brief prompt with 0 past decision(s), 10 new tokens, answers stopped at </signal>, "
                                 "LoRA on the top 4 layers, fp32 base")
    assert real_setting({**run, "ppo": {}}).endswith("paper prompt with 2 past decision(s), 512 new tokens, "
                                                      "LoRA on every layer, fp32 base")
    assert real_oracle(run, 5.0, {"hurdle": 3.0}) == {"episodes": 1, "episode_s": 300, "update_every_s": 100,
                                                      "buffer_s": 400, "checkpoint_every_s": 300,
                                                      "invalid_penalty": 5.0, "reward": {"hurdle": 3.0}}
    assert rewordings({}) == "—"
    assert rewordings({"agreement": [{"rewordings": 2}, {"rewordings": 0}, {}, {"rewordings": 1}]}) == "3 in 2/4 probes"
