"""A reward that validates but explodes on states met only in training (issue 12): training stops
with `RewardFunctionError` naming the state, the loop records the candidate as failed and goes on,
and the reward is never selected."""

import numpy as np
import pytest

from llmtraffic.bus import HoldingEnv, scenarios
from llmtraffic.bus.reward_design.candidates import DesignSetup, design_reward, expert_code
from llmtraffic.bus.reward_design.loop import LoopConfig, Reply
from llmtraffic.bus.reward_design.sandbox import SandboxedReward, example_transitions, validate_reward_code
from llmtraffic.bus.env import RewardFunctionError
from llmtraffic.rl.dqn import DQNConfig

# No example transition has a forward headway in (500, 1400) m; training on case 1 meets many.
EXPLODES = '''def reward(current_state, action, next_state):
    if 500.0 < current_state[0] < 1400.0:
        return 1e300
    return -abs(next_state[0] - next_state[1]) / 100.0
'''


class Once:
    """A designer whose one modification is `EXPLODES` (the loop asks nothing else here)."""

    name = "explodes"

    def analyze(self, code, trial):
        return ""

    def modify(self, code, trial, analysis):
        return Reply(EXPLODES)

    def repair(self, code, reason):
        raise AssertionError("tries is 1: no repair")


def test_the_reward_validates_on_the_examples():
    assert validate_reward_code(EXPLODES, transitions=example_transitions()).ok


@pytest.mark.parametrize("value", ["1e300", "float('nan')", "2e3"])
def test_the_environment_names_the_state_where_a_sandboxed_reward_breaks_its_bound(value):
    code = EXPLODES.replace("1e300", value)
    with SandboxedReward(code) as reward:
        env = HoldingEnv(scenarios.case1(), reward, seed=0, horizon_s=3600)
        env.reset(seed=0)
        with pytest.raises(RewardFunctionError, match=r"agent 'stop_\d+', current_state=\[\d") as err:
            for _ in env.agent_iter():
                env.step(1)
    assert "outside [-1000, 1000]" in str(err.value) or "must be finite" in str(err.value)


def test_the_exploding_candidate_fails_and_the_loop_keeps_the_expert():
    setup = DesignSetup(
        scenario=scenarios.case1(),
        dqn=DQNConfig(hidden=(16,), episodes=1, updates_per_episode=5, batch_size=32, learning_starts=64,
                      eps_decay_episodes=1, obs_scale=(1776, 1776, 1, 1, 50, 90)),
        design_seeds=[0], train_horizon_s=1800, test_horizon_s=1800,
    )
    outcome, best = design_reward(setup, Once(), LoopConfig(iterations=1, tries=1), progress=False)
    history = outcome.history()
    assert history["valid"].tolist() == [True, False]
    assert history.loc[1, "reason"].startswith("training or testing failed: RewardFunctionError: ")
    assert "current_state [" in history.loc[1, "reason"]  # the sandbox names the transition it scored
    assert outcome.final_code == expert_code(setup.scenario.state_dim) == best.code
    assert np.isfinite(best.trial.travel_time)
    # the designer wrote nothing valid: the kept expert reward is not its result
    assert not outcome.ok and outcome.failure == ("no valid reward in 1 tries (1 answers invalid: 1 × failed in "
                                                  "training; the loop kept its warm start)")
