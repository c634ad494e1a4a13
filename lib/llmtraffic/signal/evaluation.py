"""Drive a controller through one :class:`SignalEnv` episode and report LibSignal's metrics."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, replace
from typing import Protocol

import pandas as pd

from .baselines import SOTL, Controller, FixedTime, MaxPressure
from .env import SignalConfig, SignalEnv
from .rules import has
from .scenarios import Scenario, load
from .state import IntersectionState


def run_episode(env: SignalEnv, controller: Controller, seed: int) -> dict:
    """Play one episode of ``env`` (already open) with ``controller``; returns its metrics."""
    _, info = env.reset(seed=seed)
    if hasattr(controller, "reset"):
        controller.reset(seed)
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(controller.act(info["state"]))
        done = terminated or truncated
    return {**env.summary(), "queue_series": list(env.metrics.queues)}


def evaluate(scenario: Scenario | str, controller: Controller, seed: int = 0, episode_s: int = 3600,
             config: SignalConfig | None = None) -> dict:
    """One seeded episode of ``controller`` on ``scenario``.

    The same seed gives the same numbers whatever ran before in this process: a SUMO episode
    runs in a fresh process (``SignalConfig.fresh_process``), a CityFlow one on a reset engine.

    Returns ``travel_time_s``, ``travel_time_all_s``, ``queue``, ``delay``, ``delay_rl``,
    ``throughput``, ``arrived`` (see :mod:`llmtraffic.signal.metrics`, under the rule set
    ``config.rules``, :mod:`llmtraffic.signal.rules`), ``deadlock`` and ``deadlock_time_s``, the
    per-decision ``queue_series``, and the settings that produced them (scenario, simulator and its
    version, controller, seed, the :class:`SignalConfig` fields, the rule set included).
    """
    cfg = replace(config or SignalConfig(), episode_s=episode_s, fresh_process=True)
    scenario = load(scenario)
    with SignalEnv(scenario, cfg, seed=seed) as env:
        result = run_episode(env, controller, seed)
        version = env.sim.version()
    return {**result, "scenario": scenario.name, "simulator": scenario.simulator,
            "simulator_version": version, "controller": repr(controller), "seed": seed,
            **{f"config_{k}": v for k, v in asdict(cfg).items()}}


class TogetherController(Protocol):
    """Answers for several episodes at once (:func:`evaluate_together`)."""

    def reset(self, seeds: Sequence[int]) -> None: ...

    def act(self, episodes: Sequence[int], states: Sequence[IntersectionState]) -> list[int]:
        """The phase of each of ``episodes`` (indices into the seeds), given its state."""

    def label(self, episode: int) -> str: ...


def evaluate_together(scenario: Scenario | str, controller: TogetherController, seeds: Sequence[int],
                      episode_s: int = 3600, config: SignalConfig | None = None) -> list[dict]:
    """:func:`evaluate` of one episode per seed, played in lockstep: at each decision the
    controller answers for every episode still running in one call (an LLM policy samples them
    in one batch). Each episode runs on its own simulator (SUMO in its own process), so its
    numbers are :func:`evaluate`'s for its seed whenever the controller's answers are."""
    if not seeds:
        raise ValueError("evaluate_together: no seeds")
    cfg = replace(config or SignalConfig(), episode_s=episode_s, fresh_process=True)
    scenario = load(scenario)
    with ExitStack() as stack:
        envs = [stack.enter_context(SignalEnv(scenario, cfg, seed=seed)) for seed in seeds]
        infos = [env.reset(seed=seed)[1] for env, seed in zip(envs, seeds)]
        controller.reset(seeds)
        running = list(range(len(seeds)))
        while running:
            actions = controller.act(running, [infos[i]["state"] for i in running])
            still = []
            for i, action in zip(running, actions, strict=True):
                _, _, terminated, truncated, infos[i] = envs[i].step(action)
                if not (terminated or truncated):
                    still.append(i)
            running = still
        results = [{**env.summary(), "queue_series": list(env.metrics.queues), "simulator_version": env.sim.version()}
                   for env in envs]
    return [{**r, "scenario": scenario.name, "simulator": scenario.simulator, "controller": controller.label(i),
             "seed": seed, **{f"config_{k}": v for k, v in asdict(cfg).items()}}
            for i, (r, seed) in enumerate(zip(results, seeds))]


# Table 1 of the OracleTSC paper ----------------------------------------------------------

CLASSIC = {
    "FixedTime (t_fixed=10)": lambda: FixedTime(10),
    "FixedTime (t_fixed=30)": lambda: FixedTime(30),
    "MaxPressure": lambda: MaxPressure(t_min=10),
    "SOTL": lambda: SOTL(t_min=5, min_green_vehicle=3, max_red_vehicle=6),
}
"""The fixed-control and rule-based rows of Table 1, as LibSignal configures them."""

COLUMNS = {"travel_time_s": "Travel Time", "queue": "Queue", "delay": "Delay", "throughput": "Throughput",
           "travel_time_all_s": "Travel Time (all)"}
"""Result keys → Table 1 column names on SUMO, where LibSignal's travel time counts arrived
vehicles only (the last column is ours: unfinished trips counted too)."""
CITYFLOW_COLUMNS = {"travel_time_all_s": "Travel Time", "queue": "Queue", "delay": "Delay",
                    "throughput": "Throughput", "travel_time_s": "Travel Time (arrived)"}
"""The same on CityFlow, whose own (and LibSignal's) travel time counts unfinished trips."""


def table_columns(scenario: str) -> dict[str, str]:
    """:data:`COLUMNS` or :data:`CITYFLOW_COLUMNS`, by the scenario's simulator."""
    return CITYFLOW_COLUMNS if load(scenario).simulator == "cityflow" else COLUMNS


def evaluate_method(method: str, scenario: str, seed: int, episode_s: int = 3600,
                    controller: Controller | None = None, rules: str = "study") -> dict:
    """:func:`evaluate` for a named row of Table 1; ``controller`` for trained ones; ``rules``:
    the environment's rule set (:mod:`llmtraffic.signal.rules`). Under LibSignal's rules a
    trained row's ``delay`` is LibSignal's RL-agent delay (``delay_rl``: its RL agents average
    over roads where its classic agents sum over lanes)."""
    if controller is None:
        if method not in CLASSIC:
            raise ValueError(f"method {method!r} needs a trained controller; classic ones: {sorted(CLASSIC)}")
        controller = CLASSIC[method]()
    result = evaluate(scenario, controller, seed=seed, episode_s=episode_s, config=SignalConfig(rules=rules))
    if has(rules, "delay") and method not in CLASSIC:
        result = {**result, "delay": result["delay_rl"], "delay_summed": result["delay"]}
    return {"method": method, **result}


def mean_ci_table(rows: pd.DataFrame, methods: list[str], scenario: str,
                  columns: dict[str, str] | None = None) -> pd.DataFrame:
    """Table 1 layout for one scenario: mean ± 95 % CI half-width over each method's independent
    runs (:func:`llmtraffic.study.stats.estimate`: a trained method's agent seeds, each the mean of
    its eval episodes; a fixed controller's eval seeds), n with its unit, plus deadlocked episodes.

    Deadlocked episodes stay in the means (as in LibSignal's numbers) and are counted, with the
    times they began, in the ``Deadlocks`` column; a method with any deadlocked episode has its
    cells marked ``jammed:``, so that no comparison reads a jammed run as an improvement (a short
    travel time there means few vehicles arrived). The estimates stay in ``table.attrs``.
    """
    from llmtraffic.study import stats

    out, found, columns = {}, {}, columns or COLUMNS
    for method in methods:
        runs = rows[(rows["method"] == method) & (rows["scenario"] == scenario)]
        if runs.empty:
            continue
        cells = {}
        stuck = runs[runs["deadlock"]]
        for key, name in columns.items():
            digits = 0 if key == "throughput" else (2 if key == "delay" else 1)
            found[f"{method} / {name}"] = est = stats.estimate(runs.astype({key: float}), key)
            cells[name] = ("jammed: " if len(stuck) else "") + est.format(digits)
        cells["n"] = stats.unit_of(runs)
        cells["Deadlocks"] = f"{len(stuck)}/{len(runs)} episodes" + (
            " (from " + ", ".join(f"{t:.0f} s" for t in stuck["deadlock_time_s"]) + ")" if len(stuck) else "")
        out[method] = cells
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis("Method")
    table.attrs["estimates"] = found
    return table
