"""The reward-design loop end to end on the bus simulator, offline with the rule-based designer."""

import numpy as np
import pytest

from llmtraffic.bus import rewards, scenarios
from llmtraffic.bus.reward_design.experiment import EXPERT_CODE, DesignSetup, design_reward
from llmtraffic.bus.reward_design.loop import LoopConfig
from llmtraffic.bus.reward_design.rules import RulesDesigner, Weights
from llmtraffic.rl.dqn import DQNConfig


def test_expert_code_is_the_rl_local_reward():
    namespace = {}
    exec(compile(EXPERT_CODE, "<expert>", "exec"), namespace)  # our own template, not generated code
    rng = np.random.default_rng(0)
    for _ in range(50):
        s, s2 = rng.uniform(0, 3000, 6), rng.uniform(0, 3000, 6)
        s[2:4] = s2[2:4] = 0.0
        a = int(rng.integers(2))
        assert namespace["reward"](s, a, s2) == pytest.approx(rewards.rl_local(s, a, s2))
    # co-located buses (both headways 0) are fully bunched, as in rl_local, not perfectly balanced
    bunched = np.array([0.0, 0.0, 0.0, 0.0, 10.0, 5.0])
    assert namespace["reward"](bunched, 1, bunched) == rewards.rl_local(bunched, 1, bunched) == -100.5


@pytest.mark.slow
def test_rules_loop_on_case1_never_accepts_beyond_the_slack():
    setup = DesignSetup(
        scenario=scenarios.case1(),
        dqn=DQNConfig(hidden=(32, 32), episodes=2, updates_per_episode=20, batch_size=32,
                      learning_starts=64, eps_decay_episodes=2, obs_scale=(1776, 1776, 1, 1, 50, 90)),
        test_seeds=[0, 1], train_horizon_s=3600, test_horizon_s=3600,
    )
    loop = LoopConfig(iterations=3, slack=0.05)
    outcome, best = design_reward(setup, RulesDesigner(scheduled_headway_s=320.0), loop, progress=False)
    h = outcome.history()
    assert len(h) == 4 and h["valid"].all()
    start = h.loc[0, "travel_time_s"]
    assert (h.loc[h["accepted"], "travel_time_s"] <= start * 1.05 + 1e-9).all()
    assert best.trial.travel_time == h["travel_time_s"].min()
    assert len(best.trial.curve) == 2 and len(best.trial.transitions) == 20
    assert set(best.trial.transitions[0]) == {"agent", "state", "action", "reward", "next_state"}
    # the agent that comes back is the one trained on the best reward: same test result again
    from llmtraffic.bus.evaluation import evaluate
    again = np.mean([evaluate(setup.scenario, best.controller, s, 3600)["travel_time_s"] for s in (0, 1)])
    assert again == pytest.approx(best.trial.travel_time)


def test_rules_reward_reads_the_three_value_state_of_case1():
    from llmtraffic.bus.reward_design.rules import render
    from llmtraffic.bus.reward_design.sandbox import example_transitions, validate_reward_code

    code = render(Weights(long_hold=1.0, onboard=2.0))
    assert validate_reward_code(code, transitions=example_transitions(3)).ok
    namespace = {}
    exec(compile(code, "<rules>", "exec"), namespace)  # our own template, not generated code
    # 3-value state [forward, backward, onboard]: onboard 25 → holding costs 0.5 + 2 · 25 / 50
    assert namespace["reward"]([100, 100, 25], 1, [100, 100, 25]) == pytest.approx(-1.5)
