"""The LLM-enhanced reward-design loop (bus paper §4.1, §4.4, §4.5).

initialise (cold start from the initializer, or warm start from an expert reward)
→ train agents → test on held-out seeds → analyse → modify → train … with the **refiner**
rejecting a reward whose test travel time is worse than its predecessor's (the last accepted
reward) × (1 + slack) — App. A.4 treats "a modification that performed worse than its
predecessor" as a failure — and asking the designer for a different one. Stop at the iteration
limit, at convergence or at the target. The loop's answer is the **last accepted** reward (§4.4:
refinement continues until the test results meet the criterion); without the refiner every valid
candidate is accepted, so the answer is the last one (the ablation of §5.2.5), not the best so far.

The loop is independent of who designs: a :class:`Designer` answers with reward code (an LLM
through the prompts of Appendix A, or the search designer in ``search.py``), and of how a reward
is trained and tested: ``evaluate(code, iteration) -> Trial`` is given by the caller. Generated code
is data until :func:`validate` accepts it; a candidate that fails validation, or whose training
fails (an exception, a hang killed by the sandbox), goes back to the designer with the reason (the
refiner's error feedback, §4.4) up to ``tries`` times in all, and is recorded; the loop goes on.
When the starting reward itself never becomes valid the loop ends there, with an outcome that says
so (:attr:`Outcome.failure`) instead of raising: a weak model's result, reported with its counts. A
loop from a given start (warm or trivial) in which the designer never wrote a valid reward has the
same outcome: its final reward would be the given one, not the designer's work.

Every designer request is measured (:attr:`Outcome.calls`: role, iteration, requests, tokens, wall
time) when the designer counts its usage (``designer.usage()``, as the LLM designer does).
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd
from tqdm.auto import tqdm


@dataclass
class Trial:
    """Training and test results of one reward."""

    metrics: dict[str, float]
    """Test metrics (``travel_time_s``, ``wait_time_s``, ``headway_sd_s``, ``hold_time_s``, …)."""
    curve: list[float] = field(default_factory=list)
    """Training return per episode."""
    transitions: list[dict] = field(default_factory=list)
    """The last test transitions (state, action, reward, next state) for the analyzer."""
    stop_sd: list[float] = field(default_factory=list)
    """Headway SD per control stop (s), mean over the test episodes, for the analyzer."""

    @property
    def travel_time(self) -> float:
        return float(self.metrics["travel_time_s"])


@dataclass
class Reply:
    """A designer's answer: reward code plus what produced it (kept for the history)."""

    code: str
    prompt: str = ""
    response: str = ""


class Designer(Protocol):
    """Writes and revises reward code. Every method returns a :class:`Reply` with the code."""

    name: str

    def initial(self) -> Reply: ...

    def analyze(self, code: str, trial: Trial) -> str: ...

    def modify(self, code: str, trial: Trial, analysis: str | None) -> Reply: ...

    def refine(self, failed_code: str, failed: Trial, kept_code: str, kept: Trial) -> Reply:
        """A different edit of the kept (last accepted) reward than the failed one (A.4)."""

    def repair(self, code: str, reason: str) -> Reply: ...


ROLES = {"initial": "initializer", "analyze": "analyzer", "modify": "modifier", "refine": "refiner",
         "repair": "repair (error feedback)"}
"""Loop step → the §4 module that made the request."""


@dataclass
class LoopConfig:
    """Settings of the loop and of its ablations (§5.2.5)."""

    iterations: int = 10
    """Rewards trained and tested after the starting one."""
    slack: float | Sequence[float] = 0.10
    """Refiner slack (a list gives one value per iteration; the authors used 0.10 in case 1, 0.01 in case 2)."""
    tries: int = 4
    """K: answers per candidate, the first one included; one that fails validation or training goes
    back to the designer with the reason until a valid one comes or K are spent."""
    candidates: int = 1
    """k rewards per iteration; the best by test travel time goes on."""
    start: str = "warm"
    """``warm`` (an expert reward), ``cold`` (the initializer writes the first reward) or ``none``
    (ablation without initializer: the modifier starts from a holding-penalty-only reward)."""
    analyzer: bool = True
    """False: the modifier sees raw test metrics without the analyzer's diagnosis (ablation)."""
    refiner: bool = True
    """False: every valid reward is accepted, whatever its test result, and the last one is the
    loop's answer (ablation)."""
    target_travel_time_s: float | None = None
    """Stop once an accepted reward's test travel time is at or below this."""
    converge_rel: float = 0.0
    """Stop when the best accepted travel time improved by less than this fraction over ``converge_patience`` iterations (0: never)."""
    converge_patience: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.tries, int) or isinstance(self.tries, bool) or self.tries < 1:
            raise ValueError(f"tries (K, the first attempt included) must be an integer >= 1, got {self.tries!r}")

    def slack_at(self, iteration: int) -> float:
        if isinstance(self.slack, (int, float)):
            return float(self.slack)
        return float(self.slack[min(iteration, len(self.slack) - 1)])


TRIVIAL_REWARD = '''def reward(current_state, action, next_state):
    # Starting point without an initializer: only a small holding penalty.
    return -1.0 if action == 1 else 0.0
'''


@dataclass
class Step:
    """One row of the loop's history."""

    iteration: int
    role: str
    """initial | modify | refine | repair."""
    code: str
    ok: bool
    reason: str = ""
    prompt: str = ""
    response: str = ""
    analysis: str = ""
    trial: Trial | None = None
    accepted: bool = False
    attempt: int = 1
    """Try of its candidate, 1 to K."""
    written: bool = True
    """Whether the designer wrote this code (False for the given warm or trivial start)."""


@dataclass
class Outcome:
    steps: list[Step]
    final_code: str | None
    """The last accepted reward: the loop's answer (None when no starting reward was valid)."""
    final: Trial | None
    failure: str = ""
    """Why the loop has no answer of the designer's (``no valid reward in K tries …``); empty when it has one."""
    calls: list[dict] = field(default_factory=list)
    """One row per designer call: ``iteration``, ``role`` (:data:`ROLES`), ``requests``,
    ``prompt_tokens``, ``completion_tokens``, ``llm_s`` (the LLM's wall time, as recorded for an
    answer replayed from the cassette) and ``wall_s`` (the call's time in this run)."""

    @property
    def ok(self) -> bool:
        """Whether the loop has a final reward that the designer's work chose."""
        return self.final_code is not None and not self.failure

    def history(self) -> pd.DataFrame:
        """One row per candidate: iteration, role, try, check, accepted, test metrics."""
        rows = []
        for s in self.steps:
            row = {"iteration": s.iteration, "role": s.role, "try": s.attempt, "written": s.written, "valid": s.ok,
                   "accepted": s.accepted, "reason": s.reason}
            if s.trial is not None:
                row.update(s.trial.metrics)
            rows.append(row)
        return pd.DataFrame(rows)


def run_loop(
    designer: Designer,
    evaluate: Callable[[str, int], Trial],
    validate: Callable[[str], tuple[bool, str]],
    cfg: LoopConfig,
    expert_code: str | None = None,
    progress: bool = True,
) -> Outcome:
    """Run the paradigm of §4 and return every step, the last accepted reward and its results.

    ``validate(code) -> (ok, reason)`` checks code before any training; ``evaluate(code, i)``
    trains agents on the reward and tests them (the caller runs generated code sandboxed).
    """
    steps: list[Step] = []
    calls: list[dict] = []

    def ask(role: str, iteration: int, call: Callable[[], Any]) -> Any:
        """One designer call, measured (requests and tokens from ``designer.usage()`` when it has one)."""
        before, start = _usage(designer), time.perf_counter()
        answer = call()
        after = _usage(designer)
        calls.append({"iteration": iteration, "role": ROLES[role], "wall_s": time.perf_counter() - start,
                      **{k: after[k] - before[k] for k in after}})
        return answer

    def obtain(make: Callable[[], Reply], iteration: int, role: str, given: bool) -> Step | None:
        """Ask, validate, send failures back with their reason (K tries in all), then train and test."""
        reply = make() if given else ask(role, iteration, make)
        for attempt in range(1, cfg.tries + 1):
            ok, reason = validate(reply.code)
            step = Step(iteration, role if attempt == 1 else "repair", reply.code, ok, reason, reply.prompt,
                        reply.response, attempt=attempt, written=not (given and attempt == 1))
            steps.append(step)
            if ok:
                try:
                    step.trial = evaluate(reply.code, iteration)
                    if not math.isfinite(step.trial.travel_time):
                        raise ValueError(f"test travel time is {step.trial.travel_time}")
                    return step
                except Exception as err:  # generated code may fail in ways validation cannot see
                    step.ok = False
                    step.reason = f"training or testing failed: {type(err).__name__}: {err}"
                    step.response += "\n" + traceback.format_exc(limit=3)
            if attempt < cfg.tries:
                reply = ask("repair", iteration, lambda r=reply, why=step.reason: designer.repair(r.code, why))
        return None

    def candidates(make: Callable[[], Reply], iteration: int, role: str, given: bool = False) -> Step | None:
        found = [s for s in (obtain(make, iteration, role, given) for _ in range(cfg.candidates)) if s is not None]
        return min(found, key=lambda s: s.trial.travel_time) if found else None

    if cfg.start == "warm":
        if expert_code is None:
            raise ValueError("start='warm' needs expert_code (an expert reward to start from)")
        first = lambda: Reply(expert_code)  # noqa: E731
    elif cfg.start == "cold":
        first = designer.initial
    elif cfg.start == "none":
        first = lambda: Reply(TRIVIAL_REWARD)  # noqa: E731
    else:
        raise ValueError(f"start must be 'warm', 'cold' or 'none', got {cfg.start!r}")

    current = candidates(first, 0, "initial", given=cfg.start != "cold")
    if current is None:
        return Outcome(steps, None, None, no_valid_reward(steps, cfg.tries), calls)
    current.accepted = True
    best_by_iteration = [current.trial.travel_time]
    rejected: Step | None = None
    bar = tqdm(range(1, cfg.iterations + 1), desc=f"reward design ({designer.name})", disable=not progress)
    for i in bar:
        if rejected is not None:
            make = lambda r=rejected, c=current: designer.refine(r.code, r.trial, c.code, c.trial)  # noqa: E731
            role = "refine"
        else:
            analysis = (ask("analyze", i, lambda c=current: designer.analyze(c.code, c.trial))
                        if cfg.analyzer else None)
            current.analysis = analysis or ""
            make = lambda c=current, a=analysis: designer.modify(c.code, c.trial, a)  # noqa: E731
            role = "modify"
        step = candidates(make, i, role)
        rejected = None
        if step is not None:
            threshold = current.trial.travel_time * (1 + cfg.slack_at(i))
            if cfg.refiner and step.trial.travel_time > threshold:
                step.reason = (f"refiner: travel time {step.trial.travel_time:.1f} s > kept "
                               f"{current.trial.travel_time:.1f} s × (1 + {cfg.slack_at(i):g})")
                rejected = step
            else:
                step.accepted = True
                current = step
        best_by_iteration.append(min(best_by_iteration[-1], current.trial.travel_time))
        bar.set_postfix(kept_tt=f"{current.trial.travel_time:.1f}")
        if cfg.target_travel_time_s is not None and current.trial.travel_time <= cfg.target_travel_time_s:
            break
        if cfg.converge_rel > 0 and len(best_by_iteration) > cfg.converge_patience:
            old = best_by_iteration[-1 - cfg.converge_patience]
            if (old - best_by_iteration[-1]) / old < cfg.converge_rel:
                break
    bar.close()
    written = [s for s in steps if s.written]
    if written and not any(s.ok for s in written):  # the given start is all the loop has
        return Outcome(steps, current.code, current.trial, no_valid_reward(steps, cfg.tries, kept=cfg.start), calls)
    return Outcome(steps, current.code, current.trial, calls=calls)


def _usage(designer: Designer) -> dict[str, int]:
    usage = getattr(designer, "usage", None)
    u = usage() if usage is not None else {}
    return {"requests": u.get("calls", 0), "prompt_tokens": u.get("prompt_tokens", 0),
            "completion_tokens": u.get("completion_tokens", 0), "llm_s": u.get("latency_s", 0.0)}


REASON_KINDS = (("training or testing failed", "failed in training"), ("syntax error", "syntax error"),
                ("no function reward", "no reward function"), ("must take 3 arguments", "wrong signature"),
                ("not allowed", "not allowed (import, name, attribute)"), ("reward returned", "non-finite or extreme value"))
"""Substring of a rejection reason → its kind in the counts of :func:`no_valid_reward`."""


def reason_kind(reason: str) -> str:
    return next((kind for text, kind in REASON_KINDS if text in reason), "other")


def no_valid_reward(steps: list[Step], tries: int, kept: str = "") -> str:
    """The labelled outcome of a loop in which the designer wrote no valid reward, with its counts
    (``kept``: the given start the loop kept, ``warm`` or ``none``)."""
    written = [s for s in steps if s.written]
    reasons: dict[str, int] = {}
    for s in written:
        kind = reason_kind(s.reason) if s.code.strip() else "no code in the answer"
        reasons[kind] = reasons.get(kind, 0) + 1
    counts = ", ".join(f"{n} × {kind}" for kind, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    candidates = sum(s.role != "repair" for s in written)
    per = f" per candidate, {candidates} candidates" if candidates > 1 else ""
    start = {"warm": "; the loop kept its warm start", "none": "; the loop kept its trivial start"}.get(kept, "")
    return f"no valid reward in {tries} tries{per} ({len(written)} answers invalid: {counts}{start})"


def summary(outcome: Outcome) -> dict[str, Any]:
    df = outcome.history()
    return {
        "candidates": len(df),
        "invalid": int((~df["valid"]).sum()),
        "rejected_by_refiner": int((df["valid"] & ~df["accepted"]).sum()),
        "final_travel_time_s": outcome.final.travel_time if outcome.ok else float("nan"),
        "failure": outcome.failure,
    }
