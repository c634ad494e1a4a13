"""HoldingEnv: AEC protocol, §3.2 states, 5-s transitions, reward-function errors."""

import math

import numpy as np
import pandas as pd
import pytest
from pettingzoo.test import api_test, seed_test

from llmtraffic.bus import HoldingEnv, scenarios, simulate
from llmtraffic.bus.env import RewardFunctionError


def play(env, policy, seed):
    """Run one episode; returns the (agent, obs, info, action) of every decision."""
    env.reset(seed=seed)
    steps = []
    for agent in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        action = policy(obs, info)
        steps.append((agent, obs, info, action))
        env.step(action)
    return steps


def test_the_environment_passes_the_pettingzoo_api_test():
    api_test(HoldingEnv(scenarios.case1(), lambda s, a, n: 0.0), num_cycles=40)


def test_the_environment_passes_the_pettingzoo_seed_test():
    seed_test(lambda: HoldingEnv(scenarios.case1(), lambda s, a, n: 0.0), num_cycles=40)


def test_missing_headways_are_nan_to_controllers_and_equal_to_themselves():
    from llmtraffic.bus.controllers import Feedback

    env = HoldingEnv(scenarios.case2(), lambda s, a, n: 0.0)  # open lines: the first bus has no leader
    steps = play(env, lambda obs, info: 0, seed=0)
    missing = [info for _, _, info, _ in steps if math.isnan(info["forward_time_headway_s"])]
    assert missing and all(Feedback().act(None, info) == 0.0 for info in missing)
    assert missing[0]["forward_time_headway_s"] == math.nan  # equal to a NaN, unlike a NaN
    shifted = missing[0]["forward_time_headway_s"] + 1.0
    assert type(shifted) is float and math.isnan(shifted)  # arithmetic gives plain NaN


def test_always_releasing_reproduces_the_uncontrolled_simulation():
    env = HoldingEnv(scenarios.case2(), lambda s, a, n: 0.0, horizon_s=3600)
    steps = play(env, lambda obs, info: 0, seed=7)
    assert len(steps) > 100
    pd.testing.assert_frame_equal(
        env.result().trajectories, simulate(scenarios.case2(), seed=7, horizon_s=3600).trajectories, check_exact=True
    )


def test_always_holding_is_cut_at_90_s_in_5_s_steps():
    env = HoldingEnv(scenarios.case1(demand_scale=0), lambda s, a, n: 0.0)
    steps = play(env, lambda obs, info: 1, seed=0)
    held = [obs[5] for agent, obs, info, a in steps]
    assert held[:19] == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 65.0, 70.0,
                         75.0, 80.0, 85.0, 0.0]
    traj = env.result().trajectories
    assert (traj["hold_s"].iloc[:-10] == 90.0).all()
    # bus 1 reaches stop 0 at 440 s, before bus 0 (held until 210 s) reaches stop 1 at 450 s
    assert steps[0][0] == steps[18][0] == "stop_0" and steps[18][2]["bus"] == "loop#1"


def test_states_are_the_space_headways_of_section_3_2():
    env = HoldingEnv(scenarios.case1(demand_scale=0), lambda s, a, n: 0.0)
    steps = play(env, lambda obs, info: 0, seed=0)
    first = steps[0][1]
    np.testing.assert_array_equal(first, [0, 0, 0, 0, 0, 0])  # alone on the loop, nothing on board
    late = [(obs, info) for agent, obs, info, a in steps if info["time_s"] > 2000]
    # six buses 320 s apart at 5.55 m/s are 1776 m apart; no other line on a loop of one line
    for obs, _ in late:
        assert obs[0] == pytest.approx(1776.0) and obs[1] == pytest.approx(1776.0)
        assert obs[2] == obs[3] == obs[4] == obs[5] == 0.0
    info = late[0][1]
    assert info["forward_time_headway_s"] == pytest.approx(320.0)
    assert info["backward_time_headway_s"] == pytest.approx(320.0)
    assert info["scheduled_headway_s"] == 320.0


def test_case1_offers_the_three_value_state_of_appendix_a5():
    env = HoldingEnv(scenarios.case1(state_dim=3), lambda s, a, n: 0.0)
    steps = play(env, lambda obs, info: 0, seed=1)
    assert env.observation_space("stop_0").shape == (3,)
    assert all(obs.shape == (3,) for _, obs, _, _ in steps)
    assert max(obs[2] for _, obs, _, _ in steps) > 0  # onboard count is the third value


def test_other_line_headways_are_zero_exactly_where_no_other_line_stops():
    scenario = scenarios.case2()
    env = HoldingEnv(scenario, lambda s, a, n: 0.0, horizon_s=3600)
    steps = play(env, lambda obs, info: 0, seed=3)
    shared = set(scenario.shared_nodes)
    at_shared = np.array([info["stop"] in shared for _, _, info, _ in steps])
    other = np.array([obs[2:4] for _, obs, _, _ in steps])
    assert (other[~at_shared] == 0).all()
    assert (other[at_shared] > 0).any(axis=1).mean() > 0.9


def test_transitions_carry_the_state_5_s_later_and_the_reward_of_that_pair():
    def reward(s, a, n):
        return (n[5] - s[5]) + 1000 * a

    env = HoldingEnv(scenarios.case2(), reward, horizon_s=1800)
    rng = np.random.default_rng(0)
    steps = play(env, lambda obs, info: int(rng.random() < 0.5), seed=2)
    transitions = env.pop_transitions()
    assert env.pop_transitions() == []
    assert len(transitions) == len(steps)
    for t in transitions:
        assert t.reward == reward(t.state, t.action, t.next_state)
        if t.action == 1 and not t.done:
            assert t.next_state[5] == t.state[5] + 5.0  # held 5 s more, nobody boarded
            assert t.next_state[4] == t.state[4]
        elif t.action == 0:
            assert t.next_state[5] == 0.0
    assert sum(t.done for t in transitions) <= len(env.possible_agents)
    by_agent = {}
    for agent, obs, info, action in steps:
        by_agent.setdefault(agent, []).append(obs)
    opened = sorted((t.agent, tuple(t.state)) for t in transitions)
    assert opened == sorted((a, tuple(o)) for a, obs_list in by_agent.items() for o in obs_list)


def test_agents_collect_their_rewards_through_last():
    env = HoldingEnv(scenarios.case1(), lambda s, a, n: 1.0 + a, seed=5)
    env.reset()
    seen = 0.0
    for agent in env.agent_iter():
        _, reward, term, trunc, _ = env.last()
        seen += reward
        env.step(None if term or trunc else 1)
    total = sum(t.reward for t in env.pop_transitions())
    assert seen == total > 0


def test_reset_without_seed_draws_new_episodes_and_seeds_repeat_them():
    env = HoldingEnv(scenarios.case1(), lambda s, a, n: 0.0, seed=9)
    runs = []
    for seed in (None, None, 9):
        env.reset(seed=seed)
        for agent in env.agent_iter():
            _, _, term, trunc, _ = env.last()
            env.step(None if term or trunc else 0)
        runs.append(env.result().metrics["travel_time_s"])
    assert runs[0] == runs[2] != runs[1]


@pytest.mark.parametrize("bad", [lambda s, a, n: 1 / 0, lambda s, a, n: math.nan, lambda s, a, n: "x"])
def test_a_broken_reward_function_names_the_agent_and_the_state(bad):
    env = HoldingEnv(scenarios.case1(), bad)
    env.reset(seed=0)
    with pytest.raises(RewardFunctionError, match=r"agent 'stop_\d+', current_state=\[") as err:
        for agent in env.agent_iter():
            env.step(0)
    assert "next_state=" in str(err.value)


def test_an_invalid_action_is_refused():
    env = HoldingEnv(scenarios.case1(), lambda s, a, n: 0.0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action of agent 'stop_0'"):
        env.step(2)


def test_buses_held_together_at_one_stop_each_get_their_transitions():
    env = HoldingEnv(scenarios.case2(), lambda s, a, n: float(a), horizon_s=3600)
    steps = play(env, lambda obs, info: 1, seed=4)
    transitions = env.pop_transitions()
    assert len(transitions) == len(steps)
    times = {}
    for agent, obs, info, action in steps:
        times.setdefault((agent, info["time_s"]), set()).add(info["bus"])
    assert max(len(buses) for buses in times.values()) >= 2  # two buses held at one stop at once


def test_infos_off_leaves_infos_empty_and_changes_nothing_else():
    """The DQN trainer turns infos off to save their cost: the episode must be the same one."""
    rng = np.random.default_rng(0)
    coin = lambda obs, info: int(rng.random() < 0.3)  # noqa: E731 - a seeded random holding rule
    on = HoldingEnv(scenarios.case2(), lambda s, a, n: float(a), horizon_s=3600)
    with_infos = play(on, coin, seed=3)
    rng = np.random.default_rng(0)
    off = HoldingEnv(scenarios.case2(), lambda s, a, n: float(a), horizon_s=3600, infos=False)
    without = play(off, coin, seed=3)
    assert len(with_infos) == len(without) > 100
    assert all(info for _, _, info, _ in with_infos) and not any(info for _, _, info, _ in without)
    assert [(a, o.tolist(), x) for a, o, _, x in with_infos] == [(a, o.tolist(), x) for a, o, _, x in without]
    pd.testing.assert_frame_equal(on.result().trajectories, off.result().trajectories, check_exact=True)


def test_a_controller_that_reads_no_info_is_simulated_exactly_as_one_that_gets_it():
    class Hold:  # holds 5 s at every other decision, never reading info
        mode = "step"

        def __init__(self, uses_info):
            self.uses_info, self.n, self.seen = uses_info, 0, []

        def act(self, obs, info):
            self.n += 1
            self.seen.append(bool(info))
            return float(self.n % 2)

    blind, told = Hold(False), Hold(True)
    a = simulate(scenarios.case1(), blind, seed=4, horizon_s=3600)
    b = simulate(scenarios.case1(), told, seed=4, horizon_s=3600)
    assert blind.n == told.n > 50 and not any(blind.seen) and all(told.seen)
    pd.testing.assert_frame_equal(a.trajectories, b.trajectories, check_exact=True)
