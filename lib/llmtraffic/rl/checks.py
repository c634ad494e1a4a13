"""The one check every reward value passes before a learner stores it.

A reward that is finite in float64 can still overflow the float32 replay (1e300 → inf), and
an enormous finite one makes the squared TD error overflow within a few updates: either way the
loss and the weights turn NaN without an error. Every value is therefore checked where it enters
the replay (and, for the bus environment, where it is computed, to name the state).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

REWARD_BOUND = 1e6
"""Largest |reward| a learner accepts. With γ ≤ 0.99 a Q-value stays below 1e8 and its squared
TD error below 1e16, far inside float32 (max ≈ 3.4e38). Rewards are far smaller in practice
(the bus prompts ask for |r| ≤ 1e3; the signal rewards are scaled queue lengths)."""


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned a value a learner cannot use (non-finite in float32 or
    outside ±`REWARD_BOUND`); the message names the value and the state."""


def check_reward(value, where: str | Callable[[], str]) -> float:
    """`value` as a float, or `RewardFunctionError` naming `where` (agent, state, action); a
    callable ``where`` is only called to word an error (formatting states on every one of a
    training run's hundreds of thousands of rewards costs more than the reward itself)."""
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise RewardFunctionError(f"reward {value!r} is not a number for {_words(where)}") from error
    if not -REWARD_BOUND <= number <= REWARD_BOUND:  # NaN fails both comparisons
        with np.errstate(over="ignore"):
            finite = bool(np.isfinite(np.float32(number)))
        if not finite:
            raise RewardFunctionError(f"reward function returned {number} for {_words(where)}; it is not finite in float32")
        raise RewardFunctionError(f"reward function returned {number:.6g} for {_words(where)}, outside "
                                  f"[-{REWARD_BOUND:g}, {REWARD_BOUND:g}]")
    return number


def _words(where: str | Callable[[], str]) -> str:
    return where() if callable(where) else where
