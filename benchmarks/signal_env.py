"""Seconds per 3600-s episode through SignalEnv versus a bare simulator loop, libsumo and CityFlow.

Targets: ratio ≤ 1.5 over libsumo (Cologne1), ≤ 1.2 over CityFlow (Hangzhou 1x1). Both loops
drive the same controller logic (FixedTime(30), MaxPressure(t_min=10)) with the same 10-s slots
and 5-s clearances on the same scenario and seed. The bare loop reads only what the controller
needs (lane vehicle counts) and keeps no metrics; SignalEnv also builds the §3.1 observation,
the reward and the episode metrics (in this process: ``fresh_process`` off). Run:

    .venv/bin/python benchmarks/signal_env.py [--scenario cologne1] [--cityflow hangzhou1x1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import libsumo as ls

from llmtraffic.signal import FixedTime, MaxPressure, SignalConfig, SignalEnv, load, run_episode
from llmtraffic.signal.backends.cityflow import acquire, release
from llmtraffic.signal.backends.sumo import clearance


def bare_episode(scenario, phases, tls: str, method: str, seed: int, cfg: SignalConfig) -> None:
    """The controller logic written directly against libsumo."""
    ls.start(["sumo", "-c", str(scenario.sumo_config(seed)), "--seed", str(seed), "--step-length", "1",
              "--time-to-teleport", str(cfg.time_to_teleport), "--no-step-log", "true",
              "--no-warnings", "true", "--duration-log.disable", "true"])
    ls.trafficlight.setRedYellowGreenState(tls, phases[0].sumo_state)
    phase, green_s, t = 0, 0, 0
    while t < cfg.episode_s:
        if method == "fixed":
            action = (t // 30) % len(phases)
        elif green_s < 10:
            action = phase
        else:
            count = ls.lane.getLastStepVehicleNumber
            pressure = [sum(count(m.in_lane) - count(m.out_lane) for m in p.movements) for p in phases]
            action = max(range(len(phases)), key=pressure.__getitem__)
        green = cfg.decision_s
        if action != phase:
            ls.trafficlight.setRedYellowGreenState(tls, clearance(phases[phase].sumo_state, phases[action].sumo_state))
            for _ in range(cfg.clearance_s):
                ls.simulationStep()
            ls.trafficlight.setRedYellowGreenState(tls, phases[action].sumo_state)
            phase, green_s, green = action, 0, cfg.decision_s - cfg.clearance_s
        for _ in range(green):
            ls.simulationStep()
        green_s += green
        t += cfg.decision_s
    ls.close()


def bare_cityflow_episode(env: SignalEnv, method: str, seed: int, cfg: SignalConfig) -> None:
    """The same controller logic written directly against the CityFlow engine (the env's own)."""
    env._stop()  # the env gives its engine back and takes one again on its next reset
    sim = env.sim
    eng, node, light, red, phases = acquire(sim.source), sim.node, sim._light, sim._red, env.phases
    try:
        _bare_cityflow_loop(eng, node, light, red, phases, method, seed, cfg)
    finally:
        release(sim.source, eng)


def _bare_cityflow_loop(eng, node, light, red, phases, method: str, seed: int, cfg: SignalConfig) -> None:
    eng.reset()
    eng.set_random_seed(seed)
    eng.set_tl_phase(node, light[0])
    phase, green_s, t = 0, 0, 0
    while t < cfg.episode_s:
        if method == "fixed":
            action = (t // 30) % len(phases)
        elif green_s < 10:
            action = phase
        else:
            count = eng.get_lane_vehicle_count()
            pressure = [sum(count[m.in_lane] - count[m.out_lane] for m in p.movements) for p in phases]
            action = max(range(len(phases)), key=pressure.__getitem__)
        green = cfg.decision_s
        if action != phase:
            eng.set_tl_phase(node, red)
            for _ in range(cfg.clearance_s):
                eng.next_step()
            eng.set_tl_phase(node, light[action])
            phase, green_s, green = action, 0, cfg.decision_s - cfg.clearance_s
        for _ in range(green):
            eng.next_step()
        green_s += green
        t += cfg.decision_s


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


CONTROLLERS = (("FixedTime(30)", FixedTime(30), "fixed"), ("MaxPressure(10)", MaxPressure(10), "pressure"))


def compare(env: SignalEnv, bare, repeats: int, seed: int) -> None:
    print(f"{'controller':<24}{'SignalEnv s':>12}{'bare s':>10}{'ratio':>8}")
    for name, controller, method in CONTROLLERS:
        ours, raw = [], []
        for _ in range(repeats):
            ours.append(timed(lambda: run_episode(env, controller, seed)))
            raw.append(timed(lambda: bare(method)))
        o, b = statistics.median(ours), statistics.median(raw)
        print(f"{name:<24}{o:>12.3f}{b:>10.3f}{o / b:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cologne1", help="SUMO scenario")
    parser.add_argument("--cityflow", default="hangzhou1x1", help="CityFlow scenario ('' to skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = SignalConfig()
    scenario = load(args.scenario)
    with SignalEnv(scenario, cfg, seed=args.seed) as env:
        print(f"scenario {scenario.name}, {cfg.episode_s}-s episodes, median of {args.repeats}, {ls.getVersion()[1]}")

        def bare_sumo(method):
            env._stop()  # hand libsumo to the bare loop
            bare_episode(scenario, env.phases, env.tls, method, args.seed, cfg)

        compare(env, bare_sumo, args.repeats, args.seed)
    if args.cityflow:
        with SignalEnv(args.cityflow, cfg, seed=args.seed) as env:
            print(f"\nscenario {env.scenario.name}, {cfg.episode_s}-s episodes, median of {args.repeats}, "
                  f"{env.sim.version()}")
            compare(env, lambda method: bare_cityflow_episode(env, method, args.seed, cfg), args.repeats, args.seed)


if __name__ == "__main__":
    main()
