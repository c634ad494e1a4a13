"""The loop's variants: the §5.2.4 methods and the §5.2.5 ablations, each as loop settings.

Methods (Table 3), each the same designer under other loop settings:

* ``paradigm`` — ours: analyzer + modifier + refiner, warm start from the RL-local expert reward.
* ``eureka`` — Eureka-style: ``k`` samples per iteration (the best by test travel time goes on),
  reflection on the raw training and test statistics (no analyzer), no refiner, cold start.
* ``critic`` — a critic reviews each reward from its code alone (no training or test feedback)
  and the modifier follows it; no refiner; cold start. The seed names the variant without a
  protocol; this is our reading.
* ``one_shot`` — the initializer's reward, trained once, no iteration.

Ablations (Table 4), each one change from ``paradigm``: ``cold`` (the initializer writes the
first reward), ``no_analyzer`` (the modifier sees raw results), ``no_refiner`` (every valid
reward is accepted and the last one is the answer), ``no_initializer`` (the modifier starts from
a holding-penalty-only reward).
"""

from __future__ import annotations

from dataclasses import replace

from .loop import LoopConfig

METHODS = ("paradigm", "eureka", "critic", "one_shot")

ABLATIONS = {
    "cold": {"start": "cold"},
    "no_analyzer": {"analyzer": False},
    "no_refiner": {"refiner": False},
    "no_initializer": {"start": "none"},
}

VARIANTS = (*METHODS, *ABLATIONS)

NAMES = {
    "paradigm": "paradigm (ours)", "eureka": "Eureka-style", "critic": "critic", "one_shot": "one-shot",
    "cold": "cold start", "no_analyzer": "without analyzer", "no_refiner": "without refiner",
    "no_initializer": "without initializer",
}
"""Row names of the variants in Tables 3 and 4."""


def loop_settings(variant: str, base: LoopConfig, k: int = 3) -> tuple[LoopConfig, bool]:
    """Loop settings of a variant and whether its designer works as a critic."""
    if variant in ABLATIONS:
        return replace(base, **ABLATIONS[variant]), False
    if variant == "paradigm":
        return base, False
    if variant == "eureka":
        return replace(base, candidates=k, analyzer=False, refiner=False, start="cold"), False
    if variant == "critic":
        return replace(base, refiner=False, start="cold"), True
    if variant == "one_shot":
        return replace(base, iterations=0, start="cold"), False
    raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
