"""Our simulator beside the bus authors' testing simulators, on the same seeds (``bus_crosscheck``).

Their code (``busholding/authors_code/`` in the data directory, fetched by ``make data``) is run
unmodified: their ``testing_simulation.py`` imports ``traci`` (case 1) and ``tensorflow``
(case 2) without using them, so empty stub modules stand in; their Q-model is replaced by
:class:`StubModel` (anything with ``predict_one_1``); the case-2 data files are read from
``./data/`` as their code expects (a temporary working directory links to ours). To count how
often their capacity branch fires, the stop's ``_get_boarding_time`` is wrapped (the original
runs unchanged; the wrapper only reads the stop's state afterwards).

From each run we compute the quantities of both definitions (:mod:`llmtraffic.bus.metrics`) and
a measured count of each behaviour of their code that changes holding results: the
case-1 empty-stop dwell (a bus stands at a stop until the next passenger arrives), the case-2
capacity overflow (boarders beyond capacity are dropped yet charged to the dwell), and the
case-2 corridor passengers of line 3986 whose destinations are read from the other line's stop
numbering.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..study import data_path
from . import metrics, scenarios
from .sim import simulate

CASES = {"case1": "synthetic_network", "case2": "real_world"}
HORIZON_S = 4 * 3600  # their analysis scripts hard-code 4 h
MAKE_DATA = "needs the authors' code in the data directory: run `make data`"


class HeadwayBalance:
    """The simple rule of the cross-check, identical in both simulators: hold 5 s more while the
    bus is closer to the bus ahead than to the bus behind on its line (both gaps known, > 0);
    release forced at 90 s by either simulator."""

    mode = "step"
    name = "headway balance"

    def act(self, obs: np.ndarray, info: dict) -> float:
        return float(hold_rule(obs[0], obs[1]))


def hold_rule(forward_m: float, backward_m: float) -> bool:
    return 0 < forward_m < backward_m


class StubModel:
    """Stands in for their Q-network: ``predict_one_1(state)`` returns Q-values whose argmax is
    their action (0 = hold, 1 = release). ``rule`` False: always release."""

    def __init__(self, rule: bool):
        self.rule = rule

    def predict_one_1(self, state) -> np.ndarray:
        hold = self.rule and hold_rule(state[0], state[1])
        return np.array([1.0, 0.0]) if hold else np.array([0.0, 1.0])


class _ZeroReward:
    """Their ``Reward_function`` module: ``reward_function(s, a, s')``; the reward is not used here."""

    @staticmethod
    def reward_function(state, action, next_state) -> float:
        return 0.0


def authors_dir(case: str) -> Path:
    """Their code for ``case``, or :class:`~llmtraffic.study.DataMissingError` naming ``make data``."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; known: {sorted(CASES)}")
    return data_path(f"busholding/authors_code/{CASES[case]}/testing_simulation.py").parent


@contextlib.contextmanager
def _their_imports(folder: Path):
    """Stub ``traci``/``tensorflow`` and put ``folder`` first on the import path, then undo both."""
    saved = {name: sys.modules.get(name) for name in ("traci", "tensorflow", "bus_update")}
    for name in ("traci", "tensorflow"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules.pop("bus_update", None)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _load(case: str) -> types.ModuleType:
    folder = authors_dir(case)
    spec = importlib.util.spec_from_file_location(f"authors_{case}_testing_simulation", folder / "testing_simulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Run:
    """One episode of one simulator: the quantities of the cross-check table."""

    simulator: str
    case: str
    controller: str
    seed: int
    values: dict = field(default_factory=dict)


def run_authors(case: str, seed: int, rule: bool) -> Run:
    """Run their testing simulator for ``case`` on ``seed`` (always release, or the rule)."""
    folder = authors_dir(case)
    with _their_imports(folder), tempfile.TemporaryDirectory() as work, contextlib.chdir(work), _quiet():
        if case == "case2":
            os.symlink(data_path("busholding/pkl/data_case2"), Path(work) / "data")
        module = _load(case)
        counter = _count_overflow(sys.modules["bus_update"]) if case == "case2" else contextlib.nullcontext({})
        with counter as overflow:
            sim = module.Simulation(StubModel(rule), _ZeroReward, HORIZON_S, 5, 5, 3 if case == "case1" else 6, 2)
            sim.run(seed)
        values = _case1_values(sim) if case == "case1" else _case2_values(sim, overflow)
    return Run("authors", case, HeadwayBalance.name if rule else "no holding", seed, values)


@contextlib.contextmanager
def _quiet():
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


@contextlib.contextmanager
def _count_overflow(bus_update: types.ModuleType):
    """Count the calls of their ``set_stop._get_boarding_time`` that hit the capacity branch and
    the passengers that call charged to the dwell without boarding them."""
    original = bus_update.set_stop._get_boarding_time
    found = {"overflow_events": 0, "lost_boarders": 0}

    def counted(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self._unable_board_passengers:  # only the capacity branch leaves someone for the next bus
            found["overflow_events"] += 1
            found["lost_boarders"] += self._num_boarding_passengers_bus0
        return out

    bus_update.set_stop._get_boarding_time = counted
    try:
        yield found
    finally:
        bus_update.set_stop._get_boarding_time = original


def _arrivals(trajectory: list[float], stops: list[float]) -> dict[int, list[int]]:
    """Arrival steps per stop index of one bus, as their analysis scripts find them (the step where
    the position becomes a stop's)."""
    where = {round(p, 2): i for i, p in enumerate(stops)}
    out: dict[int, list[int]] = {}
    for step in range(1, len(trajectory)):
        pos, before = trajectory[step], trajectory[step - 1]
        if pos is not None and round(pos, 2) in where and (before is None or round(before, 2) != round(pos, 2)):
            out.setdefault(where[round(pos, 2)], []).append(step)
    return out


def _headways(per_bus: list[dict[int, list[int]]], n_stops: int, bus_order: bool) -> tuple[np.ndarray, np.ndarray]:
    """(ours: sorted per stop, with stop keys) and (theirs: in bus order without stop 0, or sorted
    with stop 0 for the loop)."""
    ours, keys, theirs = [], [], []
    for s in range(n_stops):
        times = [t for bus in per_bus for t in bus.get(s, [])]
        sorted_h = np.diff(np.sort(times))
        ours.append(sorted_h)
        keys.append(np.full(sorted_h.size, s))
        if bus_order:
            if s > 0:
                theirs.append(np.diff(times))
        else:
            theirs.append(sorted_h)
    return (np.concatenate(ours), np.concatenate(keys)), np.concatenate(theirs)


def _passengers(records: list[list]) -> dict:
    """Travel and waiting times of their passenger records [arrival, destination, board, alight]."""
    arr = np.array([r[0] for r in records], float)
    board = np.array([np.nan if r[2] == -1 else r[2] for r in records], float)
    alight = np.array([np.nan if r[3] == -1 else r[3] for r in records], float)
    done, boarded = ~np.isnan(alight), ~np.isnan(board)
    return {
        "passengers": int(arr.size),
        "travel_time_s": float((alight - arr)[done].mean()),
        "travel_time_censored_s": float(np.where(done, alight, HORIZON_S).mean() - arr.mean()),
        "wait_time_s": float((board - arr)[boarded].mean()),
        "wait_time_censored_s": float(np.where(boarded, board, HORIZON_S).mean() - arr.mean()),
        "incomplete_share": float(1 - done.mean()),
    }


def _holding(decisions: list) -> dict:
    """Both holding-time definitions from their decision log (``_trajectories_for_LLM`` rows: bus,
    step, stop, state, action with 0 = hold 5 s, ...); a visit is a run of one bus's decisions at
    one stop, 5 s apart."""
    visits: list[float] = []
    current: dict[str, tuple[int, int, int]] = {}  # bus -> (stop, step, visit index)
    for bus, step, stop, _, action, *_ in decisions:
        prev = current.get(bus)
        fresh = prev is None or prev[0] != stop or step - prev[1] != 5
        if fresh:
            visits.append(0.0)
        index = len(visits) - 1 if fresh else prev[2]
        current[bus] = (stop, step, index)
        visits[index] += 5.0 if action == 0 else 0.0
    held = np.array(visits)
    return {"hold_time_s": float(held[held > 0].mean()) if (held > 0).any() else 0.0,
            "hold_time_per_decision_s": float(held.mean()) if held.size else 0.0}


def _idle(records: list[list[int]]) -> tuple[int, int, float]:
    """(visits, visits that stood at an empty stop, seconds stood) from one bus's case-1 boarding
    records [step, stop, boarding time]: their loop writes one record per second while nobody boards."""
    visits = idle_visits = 0
    idle_s = 0.0
    prev = None
    for step, stop, board in records:
        if prev is None or prev[1] != stop or step - prev[0] != 1:
            visits += 1
            idle_visits += board == 0
        idle_s += board == 0
        prev = (step, stop)
    return visits, idle_visits, idle_s


def _case1_values(sim) -> dict:
    stops = [666, 1998, 3330, 4662, 5994, 7326, 8658, 9990]
    per_bus = [_arrivals(getattr(sim, f"_trajectory_bus{k}"), stops) for k in range(6)]
    (ours, keys), theirs = _headways(per_bus, len(stops), bus_order=False)
    records = [r for stop in sim._passengers_stop for r in stop.values()]
    idle = np.array([_idle(getattr(sim, f"_boarding_time_record_bus{k}")) for k in range(6)]).sum(axis=0)
    return {
        **_passengers(records), **_holding(sim._trajectories_for_LLM),
        "headway_sd_s": metrics.pooled_sd(ours, keys), "headway_sd_authors_s": float(np.std(theirs)),
        **metrics.headway_implied_wait(ours),
        "empty_stop_visits": float(idle[1] / idle[0]), "idle_s": float(idle[2] / idle[0]),
    }


def _case2_values(sim, overflow: dict) -> dict:
    out: dict = {}
    pooled, pooled_keys, theirs_all = [], [], []
    for line, buses in (("3436", sim._bus3436), ("3986", sim._bus3986)):
        stops = buses[0]._stop_position
        per_bus = [_arrivals(b._trajectory, stops) for b in buses]
        (ours, keys), theirs = _headways(per_bus, len(stops), bus_order=True)
        out[f"headway_sd_authors_s_{line}"] = float(np.std(theirs))
        out[f"headway_sd_s_{line}"] = metrics.pooled_sd(ours, keys)
        pooled.append(ours)
        pooled_keys.append(np.char.add(f"{line}/", keys.astype(str)))
        theirs_all.append(theirs)
    ours, keys = np.concatenate(pooled), np.concatenate(pooled_keys)
    counted = [r for line in (sim._passengers_stop_3436, sim._passengers_stop_3986) for stop in line for r in stop.values()]
    never = [d[0] for stop in sim._common_passengers for d in stop.values()]  # corridor, never boarded
    theirs_metric = _passengers(counted)  # their population leaves out corridor passengers never picked up
    swapped = [d for stop in sim._common_passengers_save for pid, (d, _) in stop.items() if pid.startswith("pas_3986")]
    return {
        **_passengers(counted + never),
        "travel_time_censored_s": theirs_metric["travel_time_censored_s"],
        "wait_time_censored_s": theirs_metric["wait_time_censored_s"],
        **_holding(sim._trajectories_for_LLM),
        "headway_sd_s": metrics.pooled_sd(ours, keys), "headway_sd_authors_s": float(np.std(np.concatenate(theirs_all))),
        **out, **metrics.headway_implied_wait(ours), **overflow,
        "swapped_boarded": len(swapped), "swapped_still_onboard": sum(d[3] == -1 for d in swapped),
    }


def run_ours(case: str, seed: int, rule: bool, authors_dwell: bool = False) -> Run:
    """Our simulator on the same case and seed, with the same rule; ``authors_dwell``: with
    :attr:`~llmtraffic.bus.scenarios.Scenario.empty_stop_dwell` (case 1)."""
    scenario = getattr(scenarios, case)(**({"empty_stop_dwell": True} if authors_dwell else {}))
    result = simulate(scenario, HeadwayBalance() if rule else None, seed=seed, horizon_s=HORIZON_S)
    m, traj = result.metrics, result.trajectories
    keys = ("passengers", "travel_time_s", "travel_time_censored_s", "wait_time_s", "wait_time_censored_s",
            "headway_sd_s", "headway_sd_authors_s", "hold_time_s", "hold_time_per_decision_s", "incomplete_share",
            "implied_wait_s", "regular_wait_s", "full_visits", "passed_up", "idle_s", "service_failure_share")
    values = {k: m[k] for k in keys}
    values["empty_stop_visits"] = float((traj["idle_s"] > 0).mean())
    loops = {ln.name for ln in scenario.lines if ln.is_loop}
    for ln in scenario.lines if len(scenario.lines) > 1 else ():
        mine = traj[traj["line"] == ln.name]
        values[f"headway_sd_authors_s_{ln.name}"] = metrics.authors_headway_sd(mine, loops)
        values[f"headway_sd_s_{ln.name}"] = m["by_line"][ln.name]["headway_sd_s"]
    name = "ours, authors' dwell" if authors_dwell else "ours"
    return Run(name, case, HeadwayBalance.name if rule else "no holding", seed, values)


# ---------------------------------------------------------------- jobs and tables


def authors_job(case: str, seed: int, rule: bool) -> Run:
    """:func:`run_authors`, cached by case, seed, rule and a digest of their code and this module
    (their case-2 run takes minutes)."""
    from .. import study

    folder = authors_dir(case)
    theirs = "".join(sorted(f"{p.name}:{p.stat().st_size}" for p in folder.glob("*.py")))
    params = dict(case=case, seed=seed, rule=rule, theirs=theirs, source=study.source_digest(sys.modules[__name__]))
    return study.cached("bus_crosscheck_authors", params, lambda: run_authors(case, seed, rule))


QUANTITIES = {
    "passengers": "passengers generated",
    "travel_time_s": "travel time, completed trips (s)",
    "travel_time_censored_s": "travel time, authors' definition: unfinished = horizon − arrival (s)",
    "wait_time_s": "waiting time, boarded (s)",
    "wait_time_censored_s": "waiting time, authors' definition (s)",
    "headway_sd_s": "headway SD, ours: pooled within stops (s)",
    "headway_sd_authors_s": "headway SD, authors' definition (s)",
    "headway_sd_authors_s_3436": "headway SD line 3436, authors' definition (s)",
    "headway_sd_authors_s_3986": "headway SD line 3986, authors' definition (s)",
    "hold_time_s": "holding time per visit that held (s)",
    "hold_time_per_decision_s": "holding time per decision visit, authors' definition (s)",
    "incomplete_share": "incomplete share (horizon cut-off included)",
    "implied_wait_s": "headway-implied wait (s)",
    "regular_wait_s": "wait with perfectly regular headways (s)",
}
BEHAVIOURS = {
    "empty_stop_visits": "case 1: share of stop visits standing at an empty stop",
    "idle_s": "case 1: seconds stood at an empty stop per visit",
    "overflow_events": "case 2 (authors): capacity-branch events per run",
    "lost_boarders": "case 2 (authors): boarders dropped by a full bus yet charged to the dwell",
    "full_visits": "case 2 (ours): visits leaving someone behind",
    "passed_up": "case 2 (ours): passengers left behind by a full bus",
    "swapped_boarded": "case 2 (authors): corridor passengers of line 3986 boarded with the other line's stop numbers",
    "swapped_still_onboard": "case 2 (authors): of those, still on board at the end",
}


def _estimate(values: list[float]):
    """Mean and 95 % CI over the seeds that have the quantity (each seed one run of a fixed controller), or None."""
    from ..study import stats

    finite = [v for v in values if v is not None and not math.isnan(v)]
    return stats.mean_ci(finite, of=stats.count(len(finite), "eval seed")) if finite else None


def table(runs: list[Run], labels: dict[str, str] = QUANTITIES, digits: int = 1) -> pd.DataFrame:
    """One row per quantity, one column per (controller, simulator): mean ± 95 % CI half-width
    over the seeds (the estimates in ``table.attrs``); blank where a simulator does not have the quantity."""

    columns = list(dict.fromkeys((r.controller, r.simulator) for r in runs))
    out, found = {}, {}
    for key, label in labels.items():
        places = 3 if key in ("incomplete_share", "empty_stop_visits") else digits
        cells = {f"{s}: {c}": _estimate([r.values.get(key, math.nan) for r in runs if (r.controller, r.simulator) == (c, s)])
                 for c, s in columns}
        if any(e is not None for e in cells.values()):
            out[label] = {name: "" if e is None else e.format(places) for name, e in cells.items()}
            found |= {f"{label} / {name}": e for name, e in cells.items() if e is not None}
    frame = pd.DataFrame.from_dict(out, orient="index").rename_axis("quantity")
    frame.attrs["estimates"] = found
    return frame


def agreement(runs: list[Run], keys: list[str], reference: str = "ours") -> pd.DataFrame:
    """Per quantity and controller: authors' mean minus ours in percent of ours (same seeds)."""

    rows = []
    for controller in dict.fromkeys(r.controller for r in runs):
        for key in keys:
            mean = {s: np.nanmean([r.values.get(key, math.nan) for r in runs
                                   if r.controller == controller and r.simulator == s] or [math.nan])
                    for s in ("authors", reference)}
            if not math.isnan(mean["authors"]) and not math.isnan(mean[reference]) and mean[reference] != 0:
                rows.append({"controller": controller, "quantity": QUANTITIES.get(key, key),
                             "authors − ours (%)": 100 * (mean["authors"] - mean[reference]) / mean[reference]})
    return pd.DataFrame(rows)
