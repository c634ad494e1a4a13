"""Table 1's real-backbone rows: which zero-shot episodes run, H_R from their R_env, the fine-tune specs."""

import pytest

from llmtraffic.signal import real_rows as rr
from llmtraffic.signal.llm_experiments import Row

RUN = {"episode_s": 1800, "episodes": 1, "update_every_s": 360, "buffer_s": 400, "checkpoint_every_s": 1800,
       "agent_seeds": [0, 1], "eval_seeds": [100, 101, 102], "finetune_eval_seeds": [100], "free_episode_s": 600,
       "zero_shot_only_episode_s": 200, "zero_shot_only_eval_seeds": [100], "ppo": {"prompt": "brief", "answer": "constrained"}}


def test_zero_shot_rows_greedy_on_cityflow_play_one_episode_and_free_rows_their_own_length():
    jobs = {(sc, name): spec for sc, name, spec in
            rr.zero_shot_jobs(["smollm2-135m"], ["qwen2.5-coder-1.5b"], ["cologne1", "hangzhou1x1"], RUN)}
    assert len(jobs) == 2 * 3 + 2 * 2
    greedy = jobs[("hangzhou1x1", "SmolLM2-135M-Instruct zero-shot, constrained, greedy")]
    assert greedy["eval_seeds"] == [100] and greedy["ppo"] == {"prompt": "brief", "answer": "constrained", "temperature": 0.0}
    assert jobs[("cologne1", "SmolLM2-135M-Instruct zero-shot, constrained, greedy")]["eval_seeds"] == [100, 101, 102]
    free = jobs[("cologne1", "SmolLM2-135M-Instruct zero-shot, free, sampled")]
    assert free["episode_s"] == 600 and free["ppo"]["answer"] == "free"
    qwen = [spec for (sc, name), spec in jobs.items() if spec["backbone"] == "qwen2.5-coder-1.5b"]
    assert {s["episode_s"] for s in qwen} == {200} and all(s["eval_seeds"] == [100] for s in qwen)


def test_hurdles_come_from_the_zero_shot_constrained_sampled_r_env_and_reach_the_oracle_reward():
    name = rr.zero_shot("smollm2-135m", "constrained, sampled")
    evaluation = {"episode_s": 1800, "runs": [{"r_env": list(range(6))}, {"r_env": list(range(6, 11))}]}
    hurdle = rr.hurdles({"cologne1": {name: Row(name, evaluation)}}, ["smollm2-135m"], ["cologne1"])
    assert hurdle.loc[("cologne1", "SmolLM2-135M-Instruct"), "H_R"] == pytest.approx(7.0)
    specs = rr.finetune_specs(["smollm2-135m"], ["cologne1"], RUN, hurdle, 0.0, 5.0, 50)["cologne1"]
    tuned = specs[rr.tuned("smollm2-135m", RUN)]
    assert tuned["oracle"]["reward"] == {"hurdle": 7.0, "entropy": "softmax", "tau": 0.0} and tuned["eval_seeds"] == [100]
    control = specs[rr.control("smollm2-135m", RUN)]["oracle"]
    assert control["reward"] == {} and control["random_reward_std"] > 0 and control["episode_s"] == 1800
    assert rr.tuned("smollm2-135m", RUN).endswith("constrained)")
