"""OracleTSC study: signal environment (SUMO or CityFlow), scenarios, LibSignal metrics and baselines.

Names are imported on first use, so that a process that needs only a simulator backend (the
fresh process of :mod:`llmtraffic.signal.backends.remote`) does not import torch.
"""

from importlib import import_module

_WHERE = {
    "baselines": ("IDQN", "SOTL", "Controller", "DeepRLConfig", "FixedTime", "MaxPressure", "PressLight", "train"),
    "env": ("SignalConfig", "SignalEnv", "SignalState", "lane_counts_phase", "negative_queue", "queue_difference"),
    "evaluation": ("evaluate", "evaluate_method", "mean_ci_table", "run_episode"),
    "ippo": ("IPPO", "IPPOConfig", "train_ippo"),
    "scenarios": ("CityFlowScenario", "Scenario", "SyntheticScenario", "load"),
    "state": ("IntersectionState", "LaneCounts", "Movement", "Phase"),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str):
    if name in _MODULE:
        return getattr(import_module(f".{_MODULE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
