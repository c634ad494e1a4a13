"""The reward-design loop end to end on the bus simulator, offline with the search designer."""

import numpy as np
import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design.candidates import DesignSetup, design_reward
from llmtraffic.bus.reward_design.loop import LoopConfig
from llmtraffic.bus.reward_design.search import SearchDesigner
from llmtraffic.rl.dqn import DQNConfig


@pytest.mark.slow
def test_search_loop_on_case1_never_accepts_beyond_the_slack_of_the_predecessor():
    setup = DesignSetup(
        scenario=scenarios.case1(),
        dqn=DQNConfig(hidden=(32, 32), episodes=2, updates_per_episode=20, batch_size=32,
                      learning_starts=64, eps_decay_episodes=2, obs_scale=(1776, 1776, 1, 1, 50, 90)),
        design_seeds=[0, 1], train_horizon_s=3600, test_horizon_s=3600,
    )
    loop = LoopConfig(iterations=3, slack=0.05)
    outcome, best = design_reward(setup, SearchDesigner(320.0, False, 3, seed=0), loop, progress=False)
    h = outcome.history()
    assert len(h) == 4 and h["valid"].all() and h["role"].iloc[0] == "initial"
    kept = h.loc[0, "travel_time_s"]
    for _, row in h.iloc[1:].iterrows():  # each accepted reward within 5 % of its predecessor
        assert row["accepted"] == (row["travel_time_s"] <= kept * 1.05)
        kept = row["travel_time_s"] if row["accepted"] else kept
    assert best.trial.travel_time == h.loc[h["accepted"], "travel_time_s"].iloc[-1]  # the last accepted
    assert len(best.trial.curve) == 2 and len(best.trial.transitions) == 20 and len(best.trial.stop_sd) == 8
    assert set(best.trial.transitions[0]) == {"agent", "state", "action", "reward", "next_state"}
    # the agent that comes back is the one trained on the best reward: same test result again
    from llmtraffic.bus.evaluation import evaluate
    again = np.mean([evaluate(setup.scenario, best.controller, s, 3600)["travel_time_s"] for s in (0, 1)])
    assert again == pytest.approx(best.trial.travel_time)
