"""The bus-holding study (bus paper): event-driven simulator, scenarios, holding environment,
classic controllers, metrics and plots.

    from llmtraffic.bus import scenarios, controllers, simulate
    result = simulate(scenarios.case1(), controllers.Feedback(), seed=0)
    result.metrics["headway_sd_s"]
"""

from . import controllers, scenarios
from .controllers import Controller
from .sim import EpisodeResult, simulate

__all__ = ["Controller", "EpisodeResult", "HoldingEnv", "controllers", "scenarios", "simulate"]


def __getattr__(name: str):
    # the environment imports pettingzoo/gymnasium; load it only when asked for
    if name == "HoldingEnv":
        from .env import HoldingEnv

        return HoldingEnv
    raise AttributeError(name)
