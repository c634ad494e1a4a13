"""OracleTSC study: SUMO signal environment, scenarios, LibSignal metrics and baselines."""

from .baselines import IDQN, SOTL, Controller, DeepRLConfig, FixedTime, MaxPressure, PressLight, train
from .env import SignalConfig, SignalEnv, SignalState, lane_counts_phase, negative_queue, queue_difference
from .evaluation import evaluate, evaluate_method, mean_std_table, run_episode
from .ippo import IPPO, PPOConfig, train_ippo
from .scenarios import Scenario, SyntheticScenario, load
from .state import IntersectionState, LaneCounts, Movement, Phase

__all__ = [
    "IDQN", "IPPO", "PPOConfig", "SOTL", "Controller", "DeepRLConfig", "FixedTime", "IntersectionState", "LaneCounts",
    "MaxPressure", "Movement", "Phase", "PressLight", "Scenario", "SignalConfig", "SignalEnv",
    "SignalState", "SyntheticScenario", "evaluate", "evaluate_method", "lane_counts_phase", "load",
    "mean_std_table", "negative_queue", "queue_difference", "run_episode", "train", "train_ippo",
]
