"""Scenarios: what the data gives, the generated systems, and the errors for malformed input."""

import dataclasses
import pickle

import numpy as np
import pytest

from llmtraffic.bus import scenarios, simulate
from llmtraffic.bus.scenarios import Line, Scenario


def test_case1_is_the_appendix_a5_loop():
    sc = scenarios.case1()
    (loop,) = sc.lines
    assert loop.positions_m == (666.0, 1998.0, 3330.0, 4662.0, 5994.0, 7326.0, 8658.0, 9990.0)
    assert loop.link_s == (240.0,) * 8 and loop.access_s == 120.0 and loop.loop_m == 10656.0
    assert (loop.n_dispatch, loop.headway_s, sc.capacity, sc.board_s, sc.alight_s) == (6, 320.0, None, 3.0, 0.0)
    assert sc.control_stops == tuple(range(8)) and sc.shared_nodes == ()
    assert "10,656 m" in sc.describe()


def test_case1_demand_matches_its_definition():
    # per stop a base rate from 40..180 pax/h times [0.6, 0.8, 1.2, 0.5]: 3.1 h-equivalents of 110 pax/h
    counts = [simulate(scenarios.case1(), seed=s).metrics["passengers"] for s in range(6)]
    assert 8 * 3.1 * 40 < min(counts) and max(counts) < 8 * 3.1 * 180
    assert abs(np.mean(counts) - 8 * 3.1 * 110) < 0.15 * 8 * 3.1 * 110
    half = simulate(scenarios.case1(demand_scale=0.5), seed=0).metrics["passengers"]
    assert half < 0.7 * simulate(scenarios.case1(), seed=0).metrics["passengers"]


def test_case2_comes_from_the_authors_data():
    sc = scenarios.case2()
    a, b = sc.lines
    assert (a.name, a.label, b.name, b.label) == ("3436", "line 1", "3986", "line 52")
    assert a.n_stops == b.n_stops == 27 and len(a.link_s) == 26
    assert len(sc.shared_nodes) == 8 and len(sc.stop_names) == 46
    assert [a.nodes[i] for i, _ in scenarios.CASE2_SHARED] == [b.nodes[j] for _, j in scenarios.CASE2_SHARED]
    assert a.preplaced == tuple(range(26, -1, -2)) and a.first_dispatch_s == 300.0
    assert a.link_s[:3] == (63.0, 103.0, 221.0) and a.positions_m[1] == 351.57
    # 9613 boardings of line 3436 in the data, less those at the terminal (nobody boards there)
    assert np.sum(a.rates_ph) == 9613 - (13 + 9 + 2 + 11)
    assert sc.capacity == 120 and 26 not in [a.nodes.index(v) for v in sc.control_stops if v in a.nodes]


def test_case2_demand_can_be_scaled_and_rebalanced_towards_the_shared_corridor():
    assert np.sum(scenarios.case2(demand_scale=0.7).lines[0].rates_ph) == pytest.approx(0.7 * 9578)
    for share in (0.0, 0.1, 0.25):
        sc = scenarios.case2(shared_share=share)
        for ln in sc.lines:
            rates = np.asarray(ln.rates_ph).sum(axis=1)
            od = np.asarray(ln.od)
            shared = np.array([v in sc.shared_nodes for v in ln.nodes])
            inside = (rates[:, None] * od * np.outer(shared, shared)).sum()
            assert inside / rates.sum() == pytest.approx(share)
            assert rates.sum() == pytest.approx(np.sum(scenarios.case2().line(ln.name).rates_ph))


def test_case3_infers_shared_stops_from_identical_names():
    sc = scenarios.case3()
    assert [ln.name for ln in sc.lines] == ["103", "111", "14", "38", "55", "68"]
    names = [n.split(" ", 1)[1].split(" = ")[0] for n in sc.stop_names]
    shared = {names[v] for v in sc.shared_nodes}
    assert shared == {"灯市西口", "美术馆", "沙滩路口西", "西安门", "北京三十九中学", "辟才胡同东口", "厂桥路口南"}
    xianmen = names.index("西安门")
    assert sum(xianmen in ln.nodes for ln in sc.lines) == 4
    two = scenarios.case3(lines=("103", "111"), demand_scale=1.0)
    assert len(two.shared_nodes) == 3
    assert np.sum(two.lines[0].rates_ph) * 2 == pytest.approx(np.sum(sc.lines[0].rates_ph))


def test_generic_systems_are_fixed_per_index_and_within_the_stated_ranges():
    assert scenarios.generic(4) == scenarios.generic(4)
    assert scenarios.generic(4) != scenarios.generic(5)
    sizes = set()
    for index in range(scenarios.N_GENERIC):
        sc = scenarios.generic(index)
        assert 2 <= len(sc.lines) <= 10 and sc.shared_nodes
        sizes.add(len(sc.lines))
        for ln in sc.lines:
            assert 16 <= ln.n_stops <= 25
            per_stop = np.asarray(ln.rates_ph).sum(axis=1)
            assert ((100 <= per_stop[:-1]) & (per_stop[:-1] <= 1100)).all() and per_stop[-1] == 0
    assert len(sizes) >= 5
    with pytest.raises(ValueError, match="index"):
        scenarios.generic(30)


def test_a_generic_system_simulates_with_passengers_changing_lines_on_shared_stops():
    result = simulate(scenarios.generic(1), seed=0, horizon_s=3600)
    pax = result.passengers
    assert len(pax) > 1000 and (pax["rode"] != pax["line"]).sum() > 0


def base_line(**change):
    fields = dict(
        name="A", label="A", nodes=(0, 1, 2), positions_m=(0.0, 500.0, 900.0), link_s=(60.0, 50.0),
        headway_s=300.0, rates_ph=((10.0,), (5.0,), (0.0,)), od=((0, 0.5, 0.5), (0, 0, 1), (0, 0, 0)),
    )
    return Line(**{**fields, **change})


@pytest.mark.parametrize("change, field", [
    (dict(positions_m=(0.0, 500.0, 400.0)), "positions_m"),
    (dict(rates_ph=((10.0,), (-1.0,), (0.0,))), "rates_ph"),
    (dict(od=((0, 0.5, 0.4), (0, 0, 1), (0, 0, 0))), "od"),
    (dict(od=((0, 0.5, 0.5), (0.5, 0, 0.5), (0, 0, 0))), "od"),
    (dict(link_s=(60.0,)), "link_s"),
    (dict(preplaced=(3,)), "preplaced"),
])
def test_malformed_lines_raise_errors_naming_the_field(change, field):
    with pytest.raises(ValueError, match=f"line 'A'.*'{field}'"):
        base_line(**change)


def test_malformed_scenarios_raise_errors_naming_the_field():
    def make(**change):
        fields = dict(name="s", lines=(base_line(),), stop_names=("a", "b", "c"), horizon_s=3600.0, control_stops=(0, 1))
        return Scenario(**{**fields, **change})

    make()
    with pytest.raises(ValueError, match="'control_stops'"):
        make(control_stops=(7,))
    with pytest.raises(ValueError, match="'trips'.*unknown line 'B'"):
        make(trips=((10.0, "B", 0, 1),))
    with pytest.raises(ValueError, match="'state_dim'"):
        make(state_dim=4)
    with pytest.raises(ValueError, match="unknown line 'Z'"):
        make().line("Z")
    with pytest.raises(ValueError, match="unknown line"):
        scenarios.case3(lines=("103", "999"))
    with pytest.raises(ValueError, match=r"unknown scenario field\(s\) \['speed'\]"):
        scenarios.case1(speed=3)
    with pytest.raises(ValueError, match="horizon_s=18000 exceeds the 4 h"):
        simulate(scenarios.case1(), horizon_s=5 * 3600)
    with pytest.raises(ValueError, match="shared_share"):
        scenarios.case2(shared_share=1.5)


def test_data_pickles_may_hold_numpy_scalars_only(tmp_path, monkeypatch):
    folder = tmp_path / "busholding" / "pkl"
    folder.mkdir(parents=True)
    (folder / "evil.pkl").write_bytes(pickle.dumps(dataclasses.replace))  # a global outside numpy
    (folder / "fine.pkl").write_bytes(pickle.dumps([np.float64(1.5), 2]))
    monkeypatch.setenv("LLMTRAFFIC_DATA", str(tmp_path))
    assert scenarios.load_pickle("busholding/pkl/fine.pkl") == [1.5, 2]
    with pytest.raises(ValueError, match="evil.pkl.*refusing to load dataclasses.replace"):
        scenarios.load_pickle("busholding/pkl/evil.pkl")
