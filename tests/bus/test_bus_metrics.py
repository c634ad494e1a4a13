"""Metrics of the bus study on hand-made trajectories and passengers: our definitions beside the
authors', service failures, the room for holding, and the authors' case-1 dwell option."""

import math

import numpy as np
import pandas as pd
import pytest

from llmtraffic.bus import controllers, scenarios, simulate
from llmtraffic.bus.metrics import (
    authors_headway_sd, censored_times, headway_implied_wait, hold_per_decision_visit, measure_key,
    nominal_ride_s, pooled_sd, service_failure,
)
from llmtraffic.bus.scenarios import Line, Scenario


def toy(capacity=None, trips=(), n_dispatch=1, headway=1000.0, **kw) -> Scenario:
    """One open line: stops at 0 m and 1000 m, a 200-s link, no random demand, stop 0 controlled."""
    ln = Line(name="A", label="line A", nodes=(0, 1), positions_m=(0.0, 1000.0), link_s=(200.0,),
              headway_s=headway, rates_ph=((0.0,), (0.0,)), od=((0.0, 1.0), (0.0, 0.0)),
              first_dispatch_s=100.0, n_dispatch=n_dispatch)
    return Scenario(name="toy", lines=(ln,), stop_names=("a", "b"), horizon_s=3600.0, control_stops=(0,),
                    capacity=capacity, trips=tuple(trips), **kw)


def traj(rows) -> pd.DataFrame:
    """Trajectory rows (bus, stop, arrival, departure, hold, left_behind) of line A."""
    frame = pd.DataFrame(rows, columns=["bus", "stop", "arrival_s", "departure_s", "hold_s", "left_behind"])
    return frame.assign(line="A", initial=False)


def pax(rows) -> pd.DataFrame:
    """Passengers (arrival, board, alight) of line A from stop 0 to stop 1."""
    frame = pd.DataFrame(rows, columns=["arrival_s", "board_s", "alight_s"], dtype=float)
    return frame.assign(line="A", rode="A", origin=0, destination=1)


def test_authors_headway_sd_keeps_bus_order_drops_stop_0_and_uses_one_global_mean():
    t = traj([("A#0", 0, 0, 0, 0, 0), ("A#1", 0, 999, 999, 0, 0), ("A#2", 0, 5, 5, 0, 0),
              ("A#0", 1, 100, 100, 0, 0), ("A#1", 1, 400, 400, 0, 0), ("A#2", 1, 350, 350, 0, 0),
              ("A#0", 2, 200, 200, 0, 0), ("A#1", 2, 500, 500, 0, 0), ("A#2", 2, 800, 800, 0, 0)])
    # stop 1 in bus order: 300, -50 (A#2 overtook A#1); stop 2: 300, 300 -> np.std of the four
    assert authors_headway_sd(t) == pytest.approx(math.sqrt(22968.75))
    # a loop line sorts arrivals in time instead (case 1) and keeps stop 0: 5, 994 | 250, 50 | 300, 300
    assert authors_headway_sd(t, {"A"}) == pytest.approx(np.std([5, 994, 250, 50, 300, 300]))
    # ours sorts and pools within stops: stop 1 (250, 50) deviates ±100, stop 2 not at all; dof 2
    h = np.array([250.0, 50.0, 300.0, 300.0])
    assert pooled_sd(h, np.array([1, 1, 2, 2])) == pytest.approx(100.0)


def test_censored_times_count_unfinished_trips_up_to_the_horizon():
    p = pax([(100, 200, 400), (3000, 3500, np.nan), (3500, np.nan, np.nan)])
    got = censored_times(p, 3600.0)
    assert got["travel_time_censored_s"] == pytest.approx((300 + 600 + 100) / 3)
    assert got["wait_time_censored_s"] == pytest.approx((100 + 500 + 100) / 3)


def test_holding_time_per_decision_visit_divides_by_every_decided_visit():
    t = traj([("A#0", 0, 100, 130, 30, 0), ("A#1", 0, 1100, 1100, 0, 0), ("A#2", 0, 3590, np.nan, 0, 0),
              ("A#0", 1, 330, 330, 0, 0)])  # stop 1 is the last stop: no decision there
    assert hold_per_decision_visit(t, toy()) == 15.0


def test_service_failure_counts_only_passengers_who_could_have_finished():
    # 2 headways (2000 s) + a 200-s ride: arrivals up to 1400 s could finish by 3600 s
    p = pax([(100, np.nan, np.nan), (1300, 1500, 1700), (1500, np.nan, np.nan)])
    t = traj([("A#0", 0, 100, 100, 0, 3), ("A#1", 0, 1100, 1100, 0, 0), ("A#2", 0, 2100, 2100, 0, 2)])
    got = service_failure(toy(), t, p, 3600.0)
    assert got == {"finishable": 2, "service_failure_share": 0.5, "passed_up": 5, "full_visits": 2}


def test_a_full_bus_passing_up_passengers_is_counted_in_the_simulation():
    trips = [(10.0, "A", 0, 1), (20.0, "A", 0, 1), (30.0, "A", 0, 1)]
    m = simulate(toy(capacity=2, trips=trips, n_dispatch=2, headway=300.0)).metrics
    assert (m["passed_up"], m["full_visits"], m["service_failure_share"]) == (1, 1, 0.0)


def test_nominal_ride_goes_forward_round_a_loop():
    p = pd.DataFrame({"line": ["loop", "loop"], "origin": [7, 2], "destination": [0, 5]})
    assert nominal_ride_s(scenarios.case1(), p).tolist() == pytest.approx([240.0, 720.0])


def test_headway_implied_wait_and_its_regular_counterpart():
    got = headway_implied_wait(np.array([100.0, 300.0]))
    assert got == {"implied_wait_s": 125.0, "regular_wait_s": 100.0}
    # perfectly regular headways leave no room
    assert headway_implied_wait(np.full(5, 320.0)) == {"implied_wait_s": 160.0, "regular_wait_s": 160.0}


def test_definitions_are_selectable_by_name_and_unknown_ones_are_named():
    assert measure_key("travel_time_s", "authors") == "travel_time_censored_s"
    assert measure_key("headway_sd_s") == "headway_sd_s"
    with pytest.raises(ValueError, match="unknown definition 'paper'"):
        measure_key("hold_time_s", "paper")
    with pytest.raises(ValueError, match="unknown measure 'delay'"):
        measure_key("delay")


def test_authors_case1_dwell_stands_at_an_empty_stop_until_the_next_passenger():
    # bus at stop 0 at t = 100 finds nobody; the passenger arriving at 150 s boards at once
    trips = [(150.0, "A", 0, 1)]
    theirs = simulate(toy(trips=trips, empty_stop_dwell=True))
    first = theirs.trajectories.iloc[0]
    assert (first["arrival_s"], first["idle_s"], first["boarded"], first["departure_s"]) == (100.0, 50.0, 1, 153.0)
    assert theirs.passengers.iloc[0][["board_s", "alight_s"]].tolist() == [150.0, 353.0]
    # with nobody coming the bus never leaves; ours (the paper's text) leaves at once
    assert math.isnan(simulate(toy(empty_stop_dwell=True)).trajectories.iloc[0]["departure_s"])
    ours = simulate(toy(trips=trips)).trajectories.iloc[0]
    assert (ours["departure_s"], ours["idle_s"], ours["boarded"]) == (100.0, 0.0, 0)


def test_authors_dwell_applies_before_holding_and_only_without_boarders():
    # a passenger waiting at the first visit: no idle time; hold 10 s after the 3-s boarding
    trips = [(50.0, "A", 0, 1)]
    r = simulate(toy(trips=trips, empty_stop_dwell=True), controllers.FixedHold("A#0", 103.0, 10.0))
    first = r.trajectories.iloc[0]
    assert (first["idle_s"], first["hold_s"], first["departure_s"]) == (0.0, 10.0, 113.0)
