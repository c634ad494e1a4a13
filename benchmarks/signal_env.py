"""Seconds per 3600-s episode through SignalEnv versus a bare libsumo loop (target ratio ≤ 1.5).

Both drive the same controller logic (FixedTime(30), MaxPressure(t_min=10)) with the same
10-s slots and 5-s clearances on the same scenario and seed. The bare loop reads only what the
controller needs (lane vehicle counts) and keeps no metrics; SignalEnv also builds the §3.1
observation, the reward and the episode metrics. Run:

    .venv/bin/python benchmarks/signal_env.py [--scenario cologne1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import libsumo as ls

from llmtraffic.signal import FixedTime, MaxPressure, SignalConfig, SignalEnv, load, run_episode
from llmtraffic.signal.env import clearance


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


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cologne1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scenario, cfg = load(args.scenario), SignalConfig()
    env = SignalEnv(scenario, cfg, seed=args.seed)
    phases, tls = env.phases, env.tls
    print(f"scenario {scenario.name}, {cfg.episode_s}-s episodes, median of {args.repeats}, {ls.getVersion()[1]}")
    print(f"{'controller':<24}{'SignalEnv s':>12}{'bare s':>10}{'ratio':>8}")
    for name, controller, method in (("FixedTime(30)", FixedTime(30), "fixed"),
                                     ("MaxPressure(10)", MaxPressure(10), "pressure")):
        ours, bare = [], []
        for _ in range(args.repeats):
            ours.append(timed(lambda: run_episode(env, controller, args.seed)))
            env._stop()  # hand libsumo to the bare loop
            bare.append(timed(lambda: bare_episode(scenario, phases, tls, method, args.seed, cfg)))
        o, b = statistics.median(ours), statistics.median(bare)
        print(f"{name:<24}{o:>12.3f}{b:>10.3f}{o / b:>8.2f}")
    env.close()


if __name__ == "__main__":
    main()
