"""Drive a controller through one :class:`SignalEnv` episode and report LibSignal's metrics."""

from __future__ import annotations

from dataclasses import asdict, replace

import libsumo as ls

from .baselines import Controller
from .env import SignalConfig, SignalEnv
from .scenarios import Scenario, load


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

    Returns ``travel_time_s``, ``travel_time_all_s``, ``queue``, ``delay``, ``throughput``
    (see :mod:`llmtraffic.signal.metrics`), ``deadlock`` and ``deadlock_time_s``, the per-decision
    ``queue_series``, and the settings that produced them (scenario, controller, seed,
    ``time_to_teleport``, SUMO version).
    """
    cfg = replace(config or SignalConfig(), episode_s=episode_s)
    scenario = load(scenario)
    with SignalEnv(scenario, cfg, seed=seed) as env:
        result = run_episode(env, controller, seed)
    return {**result, "scenario": scenario.name, "controller": repr(controller), "seed": seed,
            **{f"config_{k}": v for k, v in asdict(cfg).items()},
            "sumo_version": ls.getVersion()[1]}
