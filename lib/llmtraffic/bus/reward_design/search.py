"""Search designer (no LLM): a seeded stochastic search over reward programs that plays each LLM role.

A *program* is a set of weighted components from a library (:data:`LIBRARY`) — own headway
balance, its change, the squared deviation from the ideal headway, line-wide variability at
shared stops, a holding cost, an onboard-weighted delay cost, a penalty past a holding
threshold, a bonus for holding a bus that is closer to its leader than to its follower — rendered
as real Python reward code (:func:`render`) that goes through the same validation, sandbox and
training as an LLM's answer. The roles of §4:

* **Initializer** (A.1): draws a program from the components the task description allows (single
  vs multi-line state, 3 vs 6 values): one headway term, one holding cost and up to two more, with
  random weights. It never returns the expert program, so a cold start differs from the warm one.
* **Analyzer** (A.3): computes diagnostics of the test episodes it is given (holding share and mean
  hold, bunching among the shown decisions, headway SD overall and by stop, training convergence,
  correlation of the rewards tried so far with their travel time) and writes them as text ending
  in ``suggestion:`` lines.
* **Modifier** (A.2): reads the ``suggestion:`` lines of the analysis and applies one of them with
  a random strength; given raw results instead (the analyzer ablated) it edits at random. Every
  call draws a fresh edit, so the ``k`` samples of an Eureka-style iteration differ.
* **Critic** (§5.2.4 variant): the analysis comes from the code alone — the candidate is probed on
  hand-made transitions in the sandbox (does it prefer holding a bus close to its leader and
  releasing a balanced one?) — and the modifier draws several edits, ranks them with that
  independent scorer and returns the best before any training.
* **Refiner** (A.4): back to the last accepted program and a different edit than the failed one.

All randomness comes from one ``numpy`` generator seeded from the loop's seed. Tables call it
"search designer (no LLM)": it shows what the loop's settings do without an LLM and is the floor
an LLM should clear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .loop import TRIVIAL_REWARD, Reply, Trial
from .sandbox import SandboxedReward

LABEL = "search designer (no LLM)"
EXPERT_LABEL = "expert reward (RL-local, the warm start)"
"""Who the warm start's first comment names: an LLM shown it must not read it as the search's."""


@dataclass(frozen=True)
class Component:
    """One term of a reward program: ``r += w · term`` (the term carries its sign)."""

    name: str
    group: str
    """``headway`` (regularity), ``cost`` (holding costs) or ``shaping`` (a direct hint)."""
    text: str
    """Python lines adding the term; ``{w}`` is the weight, ``{t}`` the threshold (s),
    ``{onboard}`` the state index of onboard passengers."""
    weights: tuple[float, float]
    """Range the initializer draws the weight from (log-uniform); edits stay within ×0.25–×2 of it."""
    note: str
    threshold: tuple[float, float] | None = None
    multi_line: bool = False
    """Needs other-line headways (several lines sharing stops)."""
    held: bool = False
    """Needs the elapsed holding time (the 6-value state)."""


LIBRARY = (
    Component("balance", "headway", "r -= {w} * 100.0 * imbalance(next_state[0], next_state[1])",
              (0.3, 2.0), "own headway balance one step later (0 midway between neighbours, -100 bunched)"),
    Component("improve", "headway",
              "r += {w} * 100.0 * (imbalance(current_state[0], current_state[1]) - imbalance(next_state[0], next_state[1]))",
              (0.5, 3.0), "decrease of the own headway imbalance over the step"),
    Component("ideal", "headway", "r -= {w} * 100.0 * imbalance(next_state[0], next_state[1]) ** 2",
              (0.3, 2.0), "squared deviation of the headways from the ideal (their mean)"),
    Component("line_wide", "headway",
              "if next_state[2] > 0 and next_state[3] > 0:  # a stop shared with another line\n"
              "        r -= {w} * 100.0 * spread(next_state[0:4])",
              (0.2, 1.5), "headway variability across the lines sharing the stop (CV)", multi_line=True),
    Component("hold", "cost", "r -= {w} * hold", (0.1, 3.0), "cost of each hold step"),
    Component("onboard", "cost", "r -= {w} * hold * next_state[{onboard}] / 50.0",
              (0.1, 3.0), "delay of the passengers on board while held"),
    Component("long_hold", "cost", "r -= {w} * hold * (1.0 if next_state[5] > {t} else 0.0)",
              (0.5, 5.0), "extra penalty once the bus has been held past a threshold", threshold=(20.0, 80.0), held=True),
    Component("hold_gap", "shaping",
              "r += {w} * hold * 100.0 * (current_state[1] - current_state[0]) / max(current_state[0] + current_state[1], 1.0)",
              (0.05, 0.5), "holding pays when the bus is closer to its leader than to its follower"),
)
BY_NAME = {c.name: c for c in LIBRARY}
GROUPS = ("headway", "cost", "shaping")


@dataclass(frozen=True)
class Program:
    """Weights (and thresholds) of the components present, in library order."""

    weights: tuple[tuple[str, float], ...]
    thresholds: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, weights: dict[str, float], thresholds: dict[str, float] | None = None) -> Program:
        order = [c.name for c in LIBRARY]
        t = {k: v for k, v in (thresholds or {}).items() if k in weights}
        return cls(tuple(sorted(((k, round(float(v), 4)) for k, v in weights.items()), key=lambda kv: order.index(kv[0]))),
                   tuple(sorted(((k, round(float(v), 1)) for k, v in t.items()), key=lambda kv: order.index(kv[0]))))

    @property
    def w(self) -> dict[str, float]:
        return dict(self.weights)

    @property
    def t(self) -> dict[str, float]:
        return dict(self.thresholds)

    def describe(self) -> str:
        return ", ".join(f"{k} {v:g}" + (f" (after {self.t[k]:g} s)" if k in self.t else "") for k, v in self.weights)


EXPERT = Program.of({"balance": 1.0, "hold": 0.5})
"""The warm start: RL-local (``rewards.rl_local``) as a program; a test checks the rendered code."""
TRIVIAL = Program.of({"hold": 1.0})
"""What :data:`~.loop.TRIVIAL_REWARD` (the start without initializer) is as a program."""

HEADER = '''def reward(current_state, action, next_state):
    # {label}: {summary}
    def imbalance(a, b):
        total = a + b
        return abs(a - b) / total if total > 0 else 1.0  # buses at the same spot: fully bunched

    def spread(h):
        m = sum(h) / len(h)
        return (sum((x - m) ** 2 for x in h) / len(h)) ** 0.5 / m if m > 0 else 0.0

    hold = 1.0 if action == 1 else 0.0
    r = 0.0
'''


def render(p: Program, state_dim: int, label: str = LABEL) -> str:
    """Reward code of a program for a ``state_dim``-value state (onboard at [4], or [2] in case 1);
    ``label`` names who chose the program in its first comment."""
    onboard = 4 if state_dim >= 6 else 2
    lines = [HEADER.format(label=label, summary=p.describe())]
    for name, w in p.weights:
        c = BY_NAME[name]
        lines.append(f"    # {c.note}\n    " + c.text.format(w=repr(w), t=repr(p.t.get(name, 0.0)), onboard=onboard) + "\n")
    lines.append("    return float(r)\n")
    return "".join(lines)


def allowed(multi_line: bool, state_dim: int) -> list[Component]:
    """Components the task description admits."""
    return [c for c in LIBRARY if (multi_line or not c.multi_line) and (state_dim >= 6 or not c.held)]


@dataclass(frozen=True)
class Edit:
    """One change of a program: ``scale`` a group or component up/down, ``add`` or ``remove`` a
    component, move a ``threshold``. Written and parsed as ``suggestion: <kind> <target> [<dir>]``."""

    kind: str
    target: str
    direction: str = ""

    def text(self) -> str:
        return f"suggestion: {self.kind} {self.target}" + (f" {self.direction}" if self.direction else "")


SUGGESTION = re.compile(r"^\s*-?\s*suggestion:\s*(scale|add|remove|threshold)\s+(\w+)(?:\s+(up|down))?", re.M)


def parse_suggestions(text: str) -> list[Edit]:
    return [Edit(kind, target, direction or "") for kind, target, direction in SUGGESTION.findall(text)]


def probe(state_dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Probe transitions for the critic: pairs (hold, release) from states along a 2000-m spacing.

    Holding lets the leader gain 28 m and the follower close 28 m (5 s at 5.55 m/s, as
    ``sandbox.example_transitions``); releasing keeps the spacing. Returns states, actions, next
    states and the preferred sign of r(hold) − r(release) (+1 when the bus is closer to its leader)."""
    states, actions, nexts, want = [], [], [], []
    for forward in (200.0, 500.0, 800.0, 1200.0, 1500.0, 1800.0):
        backward = 2000.0 - forward
        s = np.array([forward, backward, 0.0, 0.0, 30.0, 10.0])
        held = s + np.array([28.0, -28.0, 0.0, 0.0, 0.0, 5.0])
        released = s * np.array([1, 1, 1, 1, 1, 0])
        keep = slice(None) if state_dim >= 6 else [0, 1, 4]
        states += [s[keep], s[keep]]
        actions += [1, 0]
        nexts += [held[keep], released[keep]]
        want.append(1.0 if forward < backward else -1.0)
    return np.array(states), np.array(actions), np.array(nexts), np.array(want)


def critic_score(code: str, state_dim: int) -> tuple[float, str]:
    """Share of probe states where the reward prefers the right action (0 when the code fails)."""
    states, actions, nexts, want = probe(state_dim)
    try:
        with SandboxedReward(code) as fn:
            r = fn.batch(states, actions, nexts)
    except Exception as err:  # the critic judges; a crash is a verdict, not an error of the loop
        return 0.0, f"the code fails on probe states ({type(err).__name__})"
    gap = r[0::2] - r[1::2]
    right = np.sign(gap) == want
    close, far = want > 0, want < 0
    return float(right.mean()), (f"prefers holding a bus close to its leader in {int(right[close].sum())} of {int(close.sum())} "
                                 f"probe states and releasing one far from it in {int(right[far].sum())} of {int(far.sum())}")


class SearchDesigner:
    """The :class:`~.loop.Designer` protocol answered by a seeded search over :data:`LIBRARY` programs."""

    name = "search"

    def __init__(self, scheduled_headway_s: float, multi_line: bool, state_dim: int, seed: int = 0,
                 critic: bool = False, hold_limit_s: float = 20.0, sd_limit: float = 0.25, pool: int = 4):
        self.headway_s, self.multi_line, self.state_dim = scheduled_headway_s, multi_line, state_dim
        self.hold_limit_s, self.sd_limit, self.pool, self.critic = hold_limit_s, sd_limit, pool, critic
        self.rng = np.random.default_rng(seed)
        self.components = allowed(multi_line, state_dim)
        self.programs: dict[str, Program] = {self.code(EXPERT): EXPERT, render(EXPERT, state_dim, EXPERT_LABEL): EXPERT,
                                             TRIVIAL_REWARD: TRIVIAL}
        self.edits: dict[str, Edit] = {}
        self.tried: list[tuple[float, float]] = []
        """(mean test reward, travel time) of every analysed reward: the analyzer's memory."""
        self.analyses: dict[str, str] = {}

    # ----------------------------------------------------------------- programs and code
    def code(self, p: Program) -> str:
        return render(p, self.state_dim)

    def program(self, code: str) -> Program:
        if code not in self.programs:
            raise ValueError("the search designer can only edit rewards it wrote (or the expert/trivial start)")
        return self.programs[code]

    def _reply(self, p: Program, note: str, edit: Edit | None = None) -> Reply:
        code = self.code(p)
        self.programs[code] = p
        if edit is not None:
            self.edits[code] = edit
        return Reply(code, prompt=note, response=p.describe())

    def _weight(self, c: Component) -> float:
        lo, hi = c.weights
        return float(np.exp(self.rng.uniform(np.log(lo), np.log(hi))))

    # ----------------------------------------------------------------- initializer (A.1)
    def initial(self) -> Reply:
        by_group = {g: [c for c in self.components if c.group == g] for g in GROUPS}
        while True:
            chosen = [by_group["headway"][self.rng.integers(len(by_group["headway"]))],
                      by_group["cost"][self.rng.integers(len(by_group["cost"]))]]
            rest = [c for c in self.components if c not in chosen]
            extra = self.rng.integers(0, 3)
            chosen += [rest[i] for i in self.rng.choice(len(rest), size=extra, replace=False)]
            p = Program.of({c.name: self._weight(c) for c in chosen},
                           {c.name: self.rng.uniform(*c.threshold) for c in chosen if c.threshold})
            if p != EXPERT:
                setting = f"{'several lines' if self.multi_line else 'one line'}, {self.state_dim}-value state"
                return self._reply(p, f"initializer: components allowed for {setting}: "
                                      + ", ".join(c.name for c in self.components))

    # ----------------------------------------------------------------- analyzer (A.3)
    def analyze(self, code: str, trial: Trial) -> str:
        text = self._critique(code) if self.critic else self._diagnose(trial)
        self.analyses[code] = text
        return text

    def _diagnose(self, trial: Trial) -> str:
        m, tr = trial.metrics, trial.transitions
        actions = np.array([t["action"] for t in tr], float)
        rewards = np.array([t["reward"] for t in tr], float)
        pairs = np.array([t["state"][:2] for t in tr], float).reshape(-1, 2)
        bunched = int((pairs.min(axis=1) < 0.15 * pairs.sum(axis=1)).sum()) if len(pairs) else 0
        hold_s, sd = float(m.get("hold_time_s", 0.0)), float(m.get("headway_sd_s", 0.0))
        lines = ["Diagnostics of the test episodes:",
                 f"- mean holding time per bus and control stop {hold_s:.1f} s; "
                 f"{100 * actions.mean() if len(actions) else 0:.0f} % of the last {len(actions)} decisions hold",
                 f"- headway SD {sd:.1f} s = {sd / self.headway_s:.2f} × the scheduled headway"]
        if trial.stop_sd:
            worst = np.argsort(trial.stop_sd)[::-1][:3]
            lines.append("- largest headway SD at stops " + ", ".join(f"{i} ({trial.stop_sd[i]:.0f} s)" for i in worst))
        lines.append(f"- bunching: {bunched} of {len(pairs)} shown decisions have a bus within 15 % of its pair's spacing from a neighbour")
        converged = _converged(trial.curve)
        lines.append(f"- training return {'levelled off' if converged else 'still changing'} over the last third of training")
        if len(rewards):
            self.tried.append((float(rewards.mean()), trial.travel_time))
        corr = _correlation(self.tried)
        if corr is not None:
            lines.append(f"- correlation of mean test reward with travel time over {len(self.tried)} rewards tried: {corr:+.2f}")
        edits = self._suggest(hold_s, sd, bunched, len(pairs), converged, corr)
        return "\n".join(lines + ["Suggestions:"] + [f"- {e.text()}" for e in edits])

    def _suggest(self, hold_s, sd, bunched, shown, converged, corr) -> list[Edit]:
        out = []
        if hold_s < 1.0:  # agents never hold: control is priced too high or regularity too little
            out += [Edit("scale", "cost", "down"), Edit("add", "hold_gap"), Edit("scale", "headway", "up")]
        elif hold_s > self.hold_limit_s:
            out += [Edit("scale", "cost", "up"), Edit("add", "onboard")]
            if self.state_dim >= 6:
                out.append(Edit("add", "long_hold"))
        if sd > self.sd_limit * self.headway_s or (shown and bunched > shown / 4):
            out += [Edit("scale", "headway", "up"), Edit("add", "improve"), Edit("add", "ideal")]
        if corr is not None and corr > 0.3:  # higher reward went with longer travel: change the regularity term
            out += [Edit("add", "ideal"), Edit("remove", "balance"), Edit("add", "balance")]
        if not converged:
            out.append(Edit("remove", "shaping"))
        return list(dict.fromkeys(out)) or [Edit("scale", "headway", "down"), Edit("scale", "cost", "down")]

    def _critique(self, code: str) -> str:
        score, said = critic_score(code, self.state_dim)
        p = self.program(code)
        out = [f"Review of the code alone (no training or test results): it {said}."]
        edits = []
        if score < 1.0:
            edits += [Edit("add", "hold_gap"), Edit("scale", "cost", "down" if "hold_gap" not in p.w else "up")]
        if len(p.weights) > 4:
            edits.append(Edit("remove", "shaping"))
        edits = edits or [Edit("scale", "headway", "up")]
        return "\n".join(out + ["Suggestions:"] + [f"- {e.text()}" for e in edits])

    # ----------------------------------------------------------------- modifier (A.2)
    def modify(self, code: str, trial: Trial, analysis: str | None) -> Reply:
        base = self.program(code)
        suggested = parse_suggestions(analysis or "")
        if self.critic:
            return self._ranked(base, suggested)
        edit = self._pick(suggested) if suggested else self._random_edit(base)
        how = "guided by the analysis" if suggested else "at random (no analysis to follow)"
        return self._reply(self._apply(base, edit), f"modifier {how}: {edit.text()}", edit)

    def _ranked(self, base: Program, suggested: list[Edit]) -> Reply:
        """Critic variant: draw ``pool`` edits, rank them with the critic scorer, keep the best."""
        drawn = [self._pick(suggested) if suggested and self.rng.random() < 0.5 else self._random_edit(base)
                 for _ in range(self.pool)]
        scored = [(critic_score(self.code(self._apply(base, e)), self.state_dim)[0], i, e) for i, e in enumerate(drawn)]
        score, _, edit = max(scored)
        note = "critic ranked " + "; ".join(f"{e.text()}: {s:.2f}" for s, _, e in scored)
        return self._reply(self._apply(base, edit), note, edit)

    def _pick(self, edits: list[Edit]) -> Edit:
        return edits[self.rng.integers(len(edits))]

    def _random_edit(self, p: Program) -> Edit:
        present, absent = list(p.w), [c.name for c in self.components if c.name not in p.w]
        kinds = ["scale"] + (["add"] if absent else []) + (["remove"] if len(present) > 1 else []) \
            + (["threshold"] if p.t else [])
        kind = kinds[self.rng.integers(len(kinds))]
        if kind == "add":
            return Edit("add", absent[self.rng.integers(len(absent))])
        if kind == "threshold":
            return Edit("threshold", list(p.t)[self.rng.integers(len(p.t))], "up" if self.rng.random() < 0.5 else "down")
        target = present[self.rng.integers(len(present))]
        return Edit(kind, target, ("up" if self.rng.random() < 0.5 else "down") if kind == "scale" else "")

    def _targets(self, p: Program, target: str) -> list[str]:
        if target in GROUPS:
            return [n for n in p.w if BY_NAME[n].group == target]
        return [target] if target in BY_NAME else []

    def _apply(self, p: Program, e: Edit) -> Program:
        """The edited program; an edit that cannot apply (nothing of that group, a component the
        state cannot feed) falls back to a random edit, so the modifier always changes something."""
        w, t = p.w, p.t
        names = self._targets(p, e.target)
        allowed_names = {c.name for c in self.components}
        factor = float(np.exp(self.rng.uniform(np.log(1.3), np.log(2.5))))
        if e.kind == "scale" and names:
            for n in names:
                lo, hi = BY_NAME[n].weights
                w[n] = float(np.clip(w[n] * (factor if e.direction == "up" else 1 / factor), lo / 4, hi * 2))
        elif e.kind == "add" and e.target in allowed_names and e.target not in w:
            c = BY_NAME[e.target]
            w[e.target] = self._weight(c)
            if c.threshold:
                t[e.target] = self.rng.uniform(*c.threshold)
        elif e.kind == "remove" and names and len(w) > len(names):
            for n in names:
                w.pop(n)
                t.pop(n, None)
        elif e.kind == "threshold" and e.target in t:
            lo, hi = BY_NAME[e.target].threshold
            t[e.target] = float(np.clip(t[e.target] + (15.0 if e.direction == "up" else -15.0), lo / 2, hi * 1.5))
        new = Program.of(w, t)
        return new if new != p else self._apply(p, self._random_edit(p))

    # ----------------------------------------------------------------- refiner (A.4) and repair
    def refine(self, failed_code: str, failed: Trial, best_code: str, best: Trial) -> Reply:
        base, failed_edit = self.program(best_code), self.edits.get(failed_code)
        options = [e for e in parse_suggestions(self.analyses.get(best_code, "")) if e != failed_edit]
        edit = self._pick(options) if options else self._random_edit(base)
        return self._reply(self._apply(base, edit), f"refiner: back to the kept reward, instead of "
                                                    f"{failed_edit.text() if failed_edit else 'the failed edit'}: {edit.text()}", edit)

    def repair(self, code: str, reason: str) -> Reply:
        # its own code only fails by size (|r| above the bound): halve every weight
        p = self.program(code)
        return self._reply(Program.of({k: v / 2 for k, v in p.weights}, p.t), f"repair after: {reason}")


def _converged(curve: list[float]) -> bool:
    """Training return levelled off: the last third varies by less than 10 % of its mean magnitude."""
    if len(curve) < 6:
        return True
    tail = np.asarray(curve[-max(2, len(curve) // 3):], float)
    return float(np.std(tail)) <= 0.1 * max(abs(float(np.mean(tail))), 1e-9)


def _correlation(tried: list[tuple[float, float]]) -> float | None:
    if len(tried) < 3:
        return None
    r, tt = np.array(tried).T
    if r.std() == 0 or tt.std() == 0:
        return None
    return float(np.corrcoef(r, tt)[0, 1])
