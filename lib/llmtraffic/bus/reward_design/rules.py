"""Rule-based designer (no LLM): a deterministic reward tuner that stands in for the LLM.

It writes rewards from one template of named components over the §3.2 state and edits their
weights from the analyzer's metrics, as a traffic engineer with simple feedback rules would:

* holding is long (mean holding time above ``hold_limit_s``) → raise the holding penalties;
* headways are irregular (headway SD above ``sd_limit`` × the scheduled headway) → raise the
  headway-balance weights;
* otherwise → lower the holding penalties (control is cheap, so allow more of it).

When the refiner rejects a reward, the designer returns to the best weights and tries the
opposite edit at half strength. Its output goes through the same validation and sandbox as an
LLM's. It is labelled "rule-based designer (no LLM)" everywhere, and doubles as a baseline: what
does an LLM add over feedback rules?
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .loop import Reply, Trial

LABEL = "rule-based designer (no LLM)"


@dataclass(frozen=True)
class Weights:
    balance: float = 1.0
    """× 100 · |h_f − h_b| / (h_f + h_b) one step later (headway balance, as RL-local)."""
    improve: float = 0.0
    """× 100 · decrease of that imbalance over the step (as RL-global's variability change)."""
    hold: float = 0.5
    """Per 5-s hold step."""
    long_hold: float = 0.0
    """Extra per hold step once the bus has been held over 60 s (as App. B's 1.5× penalty)."""
    onboard: float = 0.0
    """Per hold step × onboard passengers / 50 (delay of the people on the bus, as App. B)."""

    def scaled(self, names: tuple[str, ...], factor: float) -> Weights:
        # a zero weight cannot grow by scaling: seed it at 0.5 before scaling up
        new = {n: (getattr(self, n) or (0.5 if factor > 1 else 0.0)) * factor for n in names}
        return replace(self, **{n: round(v, 6) for n, v in new.items()})


TEMPLATE = '''def reward(current_state, action, next_state):
    # {label}: weighted components; weights tuned from test metrics by fixed rules.
    def imbalance(s):
        total = s[0] + s[1]
        return abs(s[0] - s[1]) / total if total > 0 else 1.0  # a bus at the same spot: fully bunched

    # 6-value state (§3.2): onboard at [4], elapsed holding at [5]; case 1's 3-value state: onboard at [2]
    full = len(next_state) >= 6
    onboard = next_state[4] if full else next_state[2]
    held = next_state[5] if full else 0.0
    hold = 1.0 if action == 1 else 0.0
    r = -{w.balance!r} * 100.0 * imbalance(next_state)
    r += {w.improve!r} * 100.0 * (imbalance(current_state) - imbalance(next_state))
    r -= {w.hold!r} * hold
    r -= {w.long_hold!r} * hold * (1.0 if held > 60 else 0.0)
    r -= {w.onboard!r} * hold * onboard / 50.0
    return float(r)
'''

HOLDING = ("hold", "long_hold", "onboard")
BALANCE = ("balance", "improve")


def render(w: Weights) -> str:
    return TEMPLATE.format(label=LABEL, w=w)


class RulesDesigner:
    """Deterministic designer implementing the loop's :class:`~.loop.Designer` protocol."""

    name = "rules"

    def __init__(self, scheduled_headway_s: float, hold_limit_s: float = 20.0, sd_limit: float = 0.25,
                 step: float = 1.5, start: Weights = Weights()):
        self.scheduled_headway_s = scheduled_headway_s
        self.hold_limit_s = hold_limit_s
        self.sd_limit = sd_limit
        self.step = step
        self.start = start
        self._weights: dict[str, Weights] = {render(start): start}
        self._edit: dict[str, tuple[tuple[str, ...], float]] = {}

    def weights(self, code: str) -> Weights:
        return self._weights.get(code, self.start)

    def _reply(self, w: Weights, edit: tuple[tuple[str, ...], float] | None, note: str) -> Reply:
        code = render(w)
        self._weights[code] = w
        if edit:
            self._edit[code] = edit
        return Reply(code, prompt=note, response=f"weights {w}")

    def initial(self) -> Reply:
        return self._reply(self.start, None, "start weights")

    def _rule(self, trial: Trial) -> tuple[tuple[str, ...], float, str]:
        m = trial.metrics
        if m.get("hold_time_s", 0.0) > self.hold_limit_s:
            return HOLDING, self.step, f"mean holding {m['hold_time_s']:.1f} s > {self.hold_limit_s:g} s: raise holding penalties"
        if m.get("headway_sd_s", 0.0) > self.sd_limit * self.scheduled_headway_s:
            return BALANCE, self.step, (f"headway SD {m['headway_sd_s']:.1f} s > {self.sd_limit:g} × "
                                        f"{self.scheduled_headway_s:g} s: raise headway-balance weights")
        return HOLDING, 1 / self.step, "holding and headways within limits: lower holding penalties"

    def analyze(self, code: str, trial: Trial) -> str:
        return self._rule(trial)[2]

    def modify(self, code: str, trial: Trial, analysis: str | None) -> Reply:
        names, factor, note = self._rule(trial)
        return self._reply(self.weights(code).scaled(names, factor), (names, factor), note)

    def refine(self, failed_code: str, failed: Trial, best_code: str, best: Trial) -> Reply:
        names, factor = self._edit.get(failed_code, (BALANCE, self.step))
        opposite = factor ** -0.5
        note = f"rejected edit ×{factor:.3g} of {', '.join(names)}: back to the best weights, ×{opposite:.3g} instead"
        return self._reply(self.weights(best_code).scaled(names, opposite), (names, opposite), note)

    def repair(self, code: str, reason: str) -> Reply:
        return self._reply(self.weights(code), None, f"repair after: {reason}")
