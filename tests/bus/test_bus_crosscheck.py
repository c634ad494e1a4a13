"""The cross-check against the authors' simulators: log parsing on hand-made records, the stub
model's action convention, and a clear error without their files."""

import math

import numpy as np
import pytest

from llmtraffic.bus import crosscheck as cc
from llmtraffic.study import DataMissingError, data_dir


def test_arrivals_are_the_steps_where_a_position_becomes_a_stop():
    traj = [0, 5, 10, 10, 10, 15, 20, 20, 25, 10]
    assert cc._arrivals(traj, [10, 20]) == {0: [2, 9], 1: [6]}


def test_headways_in_bus_order_keep_overtaking_negative_and_drop_stop_0():
    per_bus = [{0: [0], 1: [100]}, {0: [300], 1: [500]}, {0: [600], 1: [450]}]  # bus 2 overtakes bus 1
    (ours, keys), theirs = cc._headways(per_bus, 2, bus_order=True)
    assert theirs.tolist() == [400, -50]
    assert ours.tolist() == [300, 300, 350, 50] and keys.tolist() == [0, 0, 1, 1]
    _, sorted_theirs = cc._headways(per_bus, 2, bus_order=False)
    assert sorted_theirs.tolist() == [300, 300, 350, 50]


def test_holding_from_their_decision_log_counts_visits_and_held_seconds():
    # bus0 holds twice (10 s) at stop 1 then releases; bus1 releases at once at stop 2; bus0 again at stop 2
    log = [("bus0", 100, 1, None, 0), ("bus1", 102, 2, None, 1), ("bus0", 105, 1, None, 0),
           ("bus0", 110, 1, None, 1), ("bus0", 400, 2, None, 1)]
    got = cc._holding([(*row, 0.0, None) for row in log])
    assert got == {"hold_time_s": 10.0, "hold_time_per_decision_s": 10.0 / 3}


def test_empty_stop_dwell_is_counted_from_their_boarding_records():
    # visit 1: 3 idle seconds then 2 boarders (6 s); visit 2: boards at once; visit 3: idle 1 s
    records = [[100, 0, 0], [101, 0, 0], [102, 0, 0], [103, 0, 6], [400, 1, 3], [700, 2, 0], [701, 2, 3]]
    assert cc._idle(records) == (3, 2, 4.0)


def test_stub_model_uses_their_action_convention():
    hold, release = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert cc.StubModel(rule=True).predict_one_1([500.0, 900.0, 3]).tolist() == hold.tolist()
    assert cc.StubModel(rule=True).predict_one_1([0.0, 900.0, 3]).tolist() == release.tolist()
    assert cc.StubModel(rule=False).predict_one_1([500.0, 900.0, 3]).tolist() == release.tolist()
    assert cc.HeadwayBalance().act(np.array([500.0, 900.0, 0, 0, 3, 0]), {}) == 1.0


def test_without_their_files_the_error_names_make_data(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_DATA", str(tmp_path))
    with pytest.raises(DataMissingError, match="make data"):
        cc.authors_dir("case1")
    with pytest.raises(ValueError, match="unknown case 'case4'"):
        cc.authors_dir("case4")


@pytest.mark.skipif(not (data_dir() / "busholding/authors_code/synthetic_network").exists(),
                    reason="needs the authors' code (make data)")
def test_their_case1_simulator_runs_unmodified_and_the_rule_holds_there_as_in_ours():
    free, ruled = cc.run_authors("case1", 3, rule=False), cc.run_authors("case1", 3, rule=True)
    assert free.values["hold_time_s"] == 0.0 and ruled.values["hold_time_s"] > 0
    assert free.values["passengers"] == ruled.values["passengers"]  # same seed, same demand
    assert free.values["empty_stop_visits"] > 0.05  # their empty-stop dwell shows without holding
    ours = cc.run_ours("case1", 3, rule=True)
    assert ours.values["hold_time_s"] > 0 and ours.values["empty_stop_visits"] == 0.0
    table = cc.table([free, ruled, ours])
    assert table.loc["passengers generated", "authors: no holding"].startswith(str(free.values["passengers"]))
    assert not math.isnan(ours.values["headway_sd_authors_s"])
