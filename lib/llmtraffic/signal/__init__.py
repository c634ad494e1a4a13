"""OracleTSC study: SUMO signal environment, scenarios, LibSignal metrics and baselines."""

from .baselines import SOTL, Controller, FixedTime, MaxPressure
from .env import SignalConfig, SignalEnv, SignalState, lane_counts_phase, negative_queue, queue_difference
from .evaluation import evaluate, run_episode
from .scenarios import Scenario, SyntheticScenario, load
from .state import IntersectionState, LaneCounts, Movement, Phase

__all__ = [
    "SOTL", "Controller", "FixedTime", "IntersectionState", "LaneCounts", "MaxPressure", "Movement",
    "Phase", "Scenario", "SignalConfig", "SignalEnv", "SignalState", "SyntheticScenario", "evaluate",
    "lane_counts_phase", "load", "negative_queue", "queue_difference", "run_episode",
]
