"""Wall seconds per simulated 4-h episode of the event-driven bus simulator versus a plain
1-second time-step loop of the same model (how the authors' code runs), without control.

Both loops start from the same :class:`~llmtraffic.bus.sim.Episode` set-up (the same passengers
and the same per-bus link-time generators, both counted in their time); the step loop then
advances every bus second by second, as the authors' code does: move by the link speed,
on reaching a stop scan the stop's waiting passengers, count the dwell down, depart. Its times
are rounded to whole seconds, so its metrics agree with the event-driven ones only roughly
(printed for comparison). Targets on a 2-core machine: case 1 ≤ 0.03 s, case 2 ≤ 0.5 s per
episode, and at least 10× faster than the step loop measured in the same run. Run:

    .venv/bin/python benchmarks/bus_sim.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from llmtraffic.bus import scenarios, simulate
from llmtraffic.bus.sim import Episode


def step_loop(scenario, seed: int) -> dict:
    """The same model advanced in 1-s steps; returns mean travel and waiting times."""
    ep = Episode(scenario, seed)
    pax, horizon = ep.pax, int(ep.horizon_s)
    lines_of = {}  # passengers' serving lines, as the event-driven queues define them
    for (line, node), queues in ep.queues.items():
        for q in queues:
            for pid in q.ids.tolist():
                lines_of.setdefault(pid, set()).add(line)
    waiting = {}  # node -> passenger ids in arrival order
    for pid in np.argsort(pax.arrival_s, kind="stable").tolist():
        waiting.setdefault(int(pax.origin[pid]), []).append(pid)
    board = np.full(pax.arrival_s.size, np.nan)
    alight = np.full(pax.arrival_s.size, np.nan)
    buses = [bus for line in ep.buses for bus in line]
    state = {}
    for bus in buses:  # stop, position, speed, dwell countdown, onboard ids, phase
        stop = bus.start_stop if bus.start_stop is not None else -1
        pos = bus.ln.positions_m[stop] if stop >= 0 else 0.0
        state[bus.name] = {"stop": stop, "lap": 0, "pos": pos, "speed": 0.0, "dwell": 0,
                           "onboard": [], "phase": "arrive" if stop >= 0 else "access"}
    for t in range(horizon + 1):
        for bus in buses:
            if t < bus.start_s:
                continue
            s, ln = state[bus.name], bus.ln
            if s["phase"] == "done":
                continue
            if s["phase"] == "access":
                s["speed"] = ln.positions_m[0] / ln.access_s if ln.access_s else math.inf
                s["stop"], s["phase"] = 0, "move"
                s["target"] = ln.positions_m[0]
            if s["phase"] == "move":
                s["pos"] += s["speed"]
                if s["pos"] + 1e-9 < s["target"]:
                    continue
                s["pos"], s["phase"] = s["target"], "arrive"
            if s["phase"] == "arrive":
                node = ln.nodes[s["stop"]]
                stay = [p for p in s["onboard"] if pax.destination[p] != node]
                gone = len(s["onboard"]) - len(stay)
                for p in s["onboard"]:
                    if pax.destination[p] == node:
                        alight[p] = t
                room = math.inf if scenario.capacity is None else scenario.capacity - len(stay)
                boarded = []
                for p in waiting.get(node, []):  # scan every passenger of the stop, as the authors do
                    if len(boarded) >= room or pax.arrival_s[p] > t:
                        break
                    if np.isnan(board[p]) and bus.line in lines_of[p]:
                        board[p] = t
                        boarded.append(p)
                s["onboard"] = stay + boarded
                dwell = max(scenario.board_s * len(boarded), scenario.alight_s * gone, scenario.min_dwell_s)
                s["dwell"], s["phase"] = math.ceil(dwell), "dwell"
            if s["phase"] == "dwell":
                s["dwell"] -= 1
                if s["dwell"] > 0:
                    continue
                last = s["stop"] == ln.n_stops - 1
                if last and not ln.is_loop:
                    s["phase"] = "done"
                    continue
                link = ep._link_time(bus, s["stop"])
                nxt = 0 if last else s["stop"] + 1
                s["lap"] += last
                start = ln.positions_m[s["stop"]] + (s["lap"] - last) * (ln.loop_m or 0.0)
                s["target"] = ln.positions_m[nxt] + s["lap"] * (ln.loop_m or 0.0)
                s["speed"] = (s["target"] - start) / link
                s["stop"], s["phase"], s["pos"] = nxt, "move", start
    done = ~np.isnan(alight)
    boarded = ~np.isnan(board)
    return {
        "travel_time_s": float(np.mean(alight[done] - pax.arrival_s[done])),
        "wait_time_s": float(np.mean(board[boarded] - pax.arrival_s[boarded])),
    }


def count_events(scenario, seed: int) -> int:
    """simpy events processed in one uncontrolled episode."""
    ep = Episode(scenario, seed)
    n = 0
    step = ep.env.step

    def counted():
        nonlocal n
        n += 1
        step()

    ep.env.step = counted
    ep.next_decision()
    return n


def seconds(fn, repeats: int) -> float:
    times = []
    for seed in range(repeats):
        t = time.perf_counter()
        fn(seed)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    targets = {"case1": 0.03, "case2": 0.5}
    for name, scenario in (("case1", scenarios.case1()), ("case2", scenarios.case2())):
        simulate(scenario, seed=99)  # warm-up (imports, first calls)
        event_s = seconds(lambda s: simulate(scenario, seed=s), args.repeats)
        step_s = seconds(lambda s: step_loop(scenario, s), max(1, args.repeats // 2))
        m = simulate(scenario, seed=0).metrics
        ref = step_loop(scenario, 0)
        events = count_events(scenario, 0)
        print(
            f"{name}: event-driven {event_s:.4f} s/episode (target <= {targets[name]} s: "
            f"{'ok' if event_s <= targets[name] else 'MISSED'}), {events} simpy events "
            f"({events / event_s:,.0f} events/s), {m['bus_arrivals']} bus arrivals, {m['passengers']} passengers; "
            f"1-s step loop {step_s:.3f} s/episode; ratio {step_s / event_s:.1f}x (target >= 10x: "
            f"{'ok' if step_s / event_s >= 10 else 'MISSED'})"
        )
        print(
            f"    travel time {m['travel_time_s']:.0f} s vs step loop {ref['travel_time_s']:.0f} s; "
            f"waiting {m['wait_time_s']:.0f} s vs {ref['wait_time_s']:.0f} s"
        )


if __name__ == "__main__":
    main()
