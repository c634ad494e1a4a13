"""Classic holding controllers: their formulas and what they do to bunching."""

import math

import numpy as np
import pytest

from llmtraffic.bus import Controller, controllers, scenarios, simulate
from llmtraffic.bus.metrics import headway_sd_by_hour

SEEDS = range(4)


def info(forward, backward=math.nan, headway=300.0):
    return {"forward_time_headway_s": forward, "backward_time_headway_s": backward, "scheduled_headway_s": headway}


def test_feedback_holds_slack_plus_alpha_times_the_headway_deficit():
    fb = controllers.Feedback(alpha=0.6, slack_s=30.0)
    obs = np.zeros(6)
    assert fb.act(obs, info(250.0)) == pytest.approx(30 + 0.6 * 50)
    assert fb.act(obs, info(400.0)) == 0.0  # late bus: no holding
    assert fb.act(obs, info(0.0)) == 90.0  # capped
    assert fb.act(obs, info(math.nan)) == 0.0  # no previous bus
    assert controllers.Feedback(headway_s=200.0, slack_s=0.0).act(obs, info(150.0)) == pytest.approx(30.0)


def test_two_way_feedback_aims_at_the_midpoint_between_its_neighbours():
    tw = controllers.TwoWayFeedback()
    obs = np.zeros(6)
    assert tw.act(obs, info(200.0, 300.0)) == 50.0
    assert tw.act(obs, info(300.0, 200.0)) == 0.0
    assert tw.act(obs, info(250.0, math.nan)) == 50.0  # one-way fallback: 1.0 * (300 - 250), no slack


def test_controllers_follow_the_protocol():
    for c in (controllers.NoHolding(), controllers.Feedback(), controllers.TwoWayFeedback()):
        assert isinstance(c, Controller) and c.mode == "duration"
    with pytest.raises(ValueError, match="alpha"):
        controllers.Feedback(alpha=1.5)


def test_without_holding_buses_bunch_more_and_more_over_the_four_hours():
    by_hour = np.array([headway_sd_by_hour(simulate(scenarios.case1(), seed=s)) for s in SEEDS])
    mean = by_hour.mean(axis=0)
    assert len(mean) == 4
    assert mean[0] < mean[1] < mean[2] < mean[3]
    assert mean[3] > 2 * mean[0]


@pytest.mark.parametrize("controller", [controllers.Feedback(), controllers.TwoWayFeedback()], ids=["one-way", "two-way"])
def test_feedback_control_reduces_headway_sd_on_case1(controller):
    for seed in SEEDS:
        free = simulate(scenarios.case1(), seed=seed).metrics
        held = simulate(scenarios.case1(), controller, seed=seed).metrics
        assert held["headway_sd_s"] < 0.6 * free["headway_sd_s"]
        assert held["hold_time_s"] > 0


def test_feedback_control_reduces_headway_sd_on_case2():
    for seed in SEEDS[:2]:
        free = simulate(scenarios.case2(), seed=seed, horizon_s=7200).metrics
        held = simulate(scenarios.case2(), controllers.Feedback(), seed=seed, horizon_s=7200).metrics
        assert held["headway_sd_s"] < free["headway_sd_s"]
        for line in ("3436", "3986"):
            assert held["by_line"][line]["headway_sd_s"] < free["by_line"][line]["headway_sd_s"]


class HoldWhileTooClose:
    """A step-mode controller: hold while the bus is closer to the bus ahead than behind."""

    mode = "step"

    def __init__(self):
        self.calls = []

    def act(self, obs, info):
        self.calls.append(info["held_s"])
        return int(obs[0] < obs[1])


def test_step_mode_controllers_are_asked_every_5_s_and_also_regularise():
    free = simulate(scenarios.case1(), seed=0).metrics
    ctrl = HoldWhileTooClose()
    held = simulate(scenarios.case1(), ctrl, seed=0)
    assert set(ctrl.calls) <= {5.0 * k for k in range(18)}
    assert max(ctrl.calls) > 0
    assert held.metrics["headway_sd_s"] < free["headway_sd_s"]
    assert (held.trajectories["hold_s"] % 5 == 0).all()
