"""OracleTSC study: signal environment (SUMO or CityFlow), scenarios, LibSignal metrics and baselines.

Names are imported on first use, so that a process that needs only a simulator backend (the
fresh process of :mod:`llmtraffic.signal.backends.remote`) does not import torch.
"""

from importlib import import_module

_WHERE = {
    "baselines": ("IDQN", "SOTL", "Controller", "DeepRLConfig", "FixedTime", "MaxPressure", "PressLight", "train"),
    "env": ("SignalConfig", "SignalEnv", "SignalState", "lane_counts_phase", "negative_queue", "queue_difference"),
    "evaluation": ("evaluate", "evaluate_method", "mean_ci_table", "run_episode"),
    "scenarios": ("CityFlowScenario", "Scenario", "SyntheticScenario", "load"),
    "state": ("IntersectionState", "LaneCounts", "Movement", "Phase"),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}
_RL = {"IPPO": "IPPO", "IPPOConfig": "IPPOConfig", "train_ippo": "train_ippo"}
"""IPPO lives in :mod:`llmtraffic.rl.ippo`, beside the LLM's PPO."""

__all__ = sorted([*_MODULE, *_RL])


def __getattr__(name: str):
    if name in _MODULE:
        return getattr(import_module(f".{_MODULE[name]}", __name__), name)
    if name in _RL:
        return getattr(import_module("llmtraffic.rl.ippo"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
