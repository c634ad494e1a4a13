"""Cached experiment jobs of the reward-design notebooks (bus paper §5.2.2–5.2.5).

``bus_llm_sensitivity`` (§5.2.3), ``bus_llm_methods`` (§5.2.4, Table 3), ``bus_ablation`` (§5.2.5,
Table 4) and the LLM rows of ``bus_case1`` (§5.2.2) run these jobs through ``study.run_grid``:

* :func:`design_run` — one loop (designer × variant × agent seed) and its final reward's agent on
  the evaluation episodes → :class:`DesignRun`;
* :func:`reference_run` — no holding, feedback control and the expert-reward DQN (the warm start's
  agent) on the same episodes → :class:`ReferenceRun`;
* :func:`direct_run` — the LLM-direct controller (App. A.5) → :class:`DirectRun`.

Every job is cached by its parameters and, through ``study.cached``, by the source of the code it
depends on (the loop, the designers, the prompts, the training), so editing any of it reruns it.

A row that cannot run here (an LLM row without an ``llm`` config) comes back as the same dataclass
with ``unavailable`` saying why, never as a magic string in a table cell. The designer is the search
designer (no LLM) unless an ``llm`` config is given: that alone selects the LLM designer, and the
row is labelled with its model (the model card's name for a local model, and the paper's LLM it
stands in for when given). A loop that ran but whose model wrote no valid reward in K tries is a
design run with its start's result, not a missing run: ``failure`` says so with its counts, ``kept``
names the start it kept (the warm start, or the trivial one when a cold start's initializer wrote
nothing valid), and that start's agent is evaluated.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ... import study
from ...llm import LLM, from_config
from ...llm.models import MODELS, title
from ...rl.dqn import DQNConfig
from .. import scenarios
from ..controllers import Feedback, NoHolding
from ..evaluation import evaluate, evaluate_lines
from ..scenarios import Scenario
from . import designer as llm_designer, variants
from .direct import LLMDirect
from .candidates import Designed, DesignSetup, design_reward, expert_code, train_and_test
from .loop import TRIVIAL_REWARD, Designer, LoopConfig, Outcome
from .prompts import Setting
from .search import LABEL, SearchDesigner

NEEDS_LLM = "not run: needs an LLM backend (set the llm parameter)"
"""Why an LLM row is empty when no ``llm`` config is given."""

SCENARIOS = {"case1": scenarios.case1, "case2": scenarios.case2}

SEARCH, LLM_DESIGNER = "search", "llm"
"""The two designer kinds a job runs: the search designer, or the LLM of the ``llm`` config."""


def designer_label(llm: dict | None, paper_llm: str = "", decoding: str = "free") -> str:
    """How tables and figures name a designer: the model of the ``llm`` config (a local model by its
    model card's name), the paper's LLM it stands in for, and a decoding variant; or the search designer."""
    if llm is None:
        return LABEL
    model = str(llm.get("model") or Path(llm.get("cassette", "replay")).stem)
    name = title(model) if model in MODELS or llm.get("backend") == "local" else model  # a replay keeps the label
    return name + (f" (paper: {paper_llm})" if paper_llm else "") + ("" if decoding == "free" else f" · {decoding} decoding")


def with_cassette(llm: dict | None) -> dict | None:
    """``llm`` with a recording cassette when it names none: ``llm/<model>.jsonl`` under the runs
    directory, so every request of a study is kept and the run can be replayed offline
    (``cache: {path: llm/<model>.jsonl, mode: replay}``) at no cost."""
    if llm is None or llm.get("cache") or llm.get("backend") == "replay":
        return llm
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(llm.get("model", "llm")))
    return {**llm, "cache": {"path": f"llm/{name}.jsonl", "mode": "record"}}


def make_designer(llm: dict | None, scenario: Scenario, critic: bool = False, seed: int = 0,
                  decoding: str = "free", max_tokens: int | dict[str, int] = 1500) -> tuple[Designer, LLM | None]:
    """The search designer (seeded from ``seed``), or an LLM designer built from the ``llm`` config."""
    setting = Setting.of(scenario)
    if llm is None:
        headway = float(np.mean([line.headway_s for line in scenario.lines]))
        return SearchDesigner(headway, setting.multi_line, setting.state_dim, seed=seed, critic=critic), None
    model = from_config(llm)
    return llm_designer.LLMDesigner(model, setting, critic=critic, seed=seed, decoding=decoding,
                                    max_tokens=max_tokens), model


@dataclass
class DesignRun:
    """One loop (designer × variant × agent seed) and its final reward tested on evaluation episodes."""

    designer: str
    """Row label of the designer (:func:`designer_label`)."""
    variant: str
    seed: int
    outcome: Outcome | None = None
    """Every candidate, its check, test metrics on the design seeds and the refiner's verdict."""
    eval_rows: list[dict] = field(default_factory=list)
    """The final reward's agent on each evaluation episode: ``seed`` and the
    :func:`~llmtraffic.bus.evaluation.evaluate` measures."""
    usage: dict | None = None
    """LLM cost of the loop (``Usage.as_dict()``); None for the search designer."""
    wall_s: float = 0.0
    """Wall time of the loop when it ran (not when it came from the cache)."""
    unavailable: str = ""
    """Why this row did not run (empty when it did)."""
    final_code: str = ""
    """The reward the run's agents train on: the loop's answer or, when its designer wrote no valid
    reward, the start it kept (:attr:`kept`)."""
    kept: str = ""
    """The start the run kept because its designer wrote no valid reward (a value of :data:`KEPT`);
    empty when the designer's work chose the final reward."""

    @property
    def label(self) -> str:
        return f"{variants.NAMES[self.variant]} · {self.designer}"

    @property
    def failure(self) -> str:
        """``no valid reward in K tries (…)`` when the loop ran and found no starting reward."""
        return self.outcome.failure if self.outcome is not None else ""

    @property
    def has_reward(self) -> bool:
        """Whether the loop ran and its designer's work chose its final reward."""
        return not self.unavailable and self.outcome is not None and self.outcome.ok

    @property
    def counted(self) -> bool:
        """Whether the run has a final reward and evaluation rows: its designer's, or the start it
        kept. A design run that found nothing is a run with its start's result, not a missing run."""
        return not self.unavailable and bool(self.final_code)


KEPT = {"warm": "its warm start (the RL-local expert reward)",
        "cold": "the trivial start (holding penalty only: the initializer wrote no valid reward in K tries)",
        "none": "its trivial start (holding penalty only)"}
"""What a design run whose designer wrote no valid reward keeps, by the loop's start."""


def design_of(runs: dict[str, list[DesignRun]], agent_seeds: list[int]) -> dict[tuple[str, int], int]:
    """(row label, agent seed) → the seed of the design run whose final reward that agent seed
    trains. A row with a design run per agent seed trains each run's own reward. A row with fewer
    runs (an LLM row: each request costs minutes of CPU here) trains its runs' rewards in turn, an
    agent seed's own run first, so that the row still has an agent per agent seed;
    :func:`shared_designs` says so. Runs that kept their start count (:attr:`DesignRun.counted`)."""
    out: dict[tuple[str, int], int] = {}
    for label, g in runs.items():
        done = {r.seed: r for r in g if r.counted}
        if {r.seed for r in g} >= set(agent_seeds):
            out |= {(label, seed): seed for seed in done}
        elif done:
            kept = list(done)
            out |= {(label, a): a if a in done else kept[i % len(kept)] for i, a in enumerate(agent_seeds)}
    return out


def trained_rewards(runs: dict[str, list[DesignRun]], agent_seeds: list[int]) -> dict[tuple[str, int], str]:
    """(row label, agent seed) → the final reward code that agent seed trains (:func:`design_of`)."""
    codes = {(label, r.seed): r.final_code for label, g in runs.items() for r in g if r.counted}
    return {(label, a): codes[(label, d)] for (label, a), d in design_of(runs, agent_seeds).items()}


def shared_designs(runs: dict[str, list[DesignRun]], agent_seeds: list[int]) -> dict[str, str]:
    """Row label → ``"5 agents trained on the final reward of 1 design run (seed 0)"`` for the
    rows whose agents share design runs (:func:`trained_rewards`): their intervals cover training,
    not design, variation."""
    out = {}
    for label, g in runs.items():
        done = [r.seed for r in g if r.counted]
        if done and not {r.seed for r in g} >= set(agent_seeds):
            runs_ = "1 design run" if len(done) == 1 else f"{len(done)} design runs"
            out[label] = (f"{len(agent_seeds)} agents trained on the final reward of {runs_} "
                          f"(seed{'' if len(done) == 1 else 's'} {', '.join(map(str, done))})")
    return out


def _setup(scenario: str, dqn: dict, seed: int, design_seeds: list[int], horizon_s: float | None,
           train_horizon_s: float | None) -> DesignSetup:
    return DesignSetup(scenario=SCENARIOS[scenario](), dqn=DQNConfig(**{**dqn, "seed": seed}),
                       design_seeds=list(design_seeds), train_horizon_s=train_horizon_s, test_horizon_s=horizon_s)


def _candidate_trainer(params: dict):
    key = {name: params[name] for name in ("seed", "dqn", "design_seeds", "horizon_s", "train_horizon_s", "scenario")}

    def train(setup: DesignSetup, code: str) -> Designed:
        return study.cached("bus_reward_candidate", {**key, "code": code}, lambda: train_and_test(setup, code))

    return train


def design_run(*, designer: str, llm: dict | None, variant: str, seed: int, dqn: dict, design_seeds: list[int],
               eval_seeds: list[int], iterations: int, slack: float | list[float], k: int = 3, tries: int = 4,
               horizon_s: float | None = None, train_horizon_s: float | None = None, scenario: str = "case1",
               decoding: str = "free", max_tokens: int | dict[str, int] = 1500, paper_llm: str = "") -> DesignRun:
    """Run the loop for one designer (``search`` or ``llm``), variant and agent seed (cached).

    ``dqn`` holds :class:`~llmtraffic.rl.dqn.DQNConfig` fields (the seed comes from ``seed``, which
    also seeds the search designer and the LLM's sampling: each request of the run has its own seed,
    none shared with another run, :meth:`~.designer.LLMDesigner.request_seed`); ``design_seeds`` are the episodes the loop tests each
    candidate on (its feedback, §4.3); ``eval_seeds`` are separate episodes on which the final
    reward's agent is reported, so the reported numbers are not the ones the loop selected on.
    ``designer="llm"`` without ``llm`` returns a row that says it needs an LLM backend. ``tries``
    is K, the answers per candidate (first included); ``decoding`` and ``max_tokens`` set the LLM
    designer (:class:`~.designer.LLMDesigner`); ``paper_llm`` names the paper's LLM in the label.
    """
    if designer not in (SEARCH, LLM_DESIGNER):
        raise ValueError(f"designer must be {SEARCH!r} or {LLM_DESIGNER!r} (an llm config selects the model), got {designer!r}")
    if designer == LLM_DESIGNER and llm is None:
        return DesignRun("LLM designer", variant, seed, unavailable=NEEDS_LLM)
    llm = with_cassette(llm) if designer == LLM_DESIGNER else None
    llm_only = dict(decoding=decoding, max_tokens=max_tokens) if llm is not None else {}
    # k only matters to the Eureka-style variant: the other rows of two notebooks that differ in k are one run
    params = dict(llm=llm, variant=variant, seed=seed, dqn=dqn, design_seeds=list(design_seeds),
                  eval_seeds=list(eval_seeds), iterations=iterations, slack=slack,
                  k=k if variant == "eureka" else None, tries=tries,
                  horizon_s=horizon_s, train_horizon_s=train_horizon_s, scenario=scenario, **llm_only)
    label = designer_label(llm, paper_llm, decoding)

    def build() -> DesignRun:
        start = time.perf_counter()
        setup = _setup(scenario, dqn, seed, design_seeds, horizon_s, train_horizon_s)
        settings, critic = variants.loop_settings(variant, LoopConfig(iterations=iterations, slack=slack, tries=tries), k)
        agent, model = make_designer(llm, setup.scenario, critic=critic, seed=seed, **llm_only)
        train = _candidate_trainer(params)
        outcome, final = design_reward(setup, agent, settings, progress=False, train=train)
        kept = "" if outcome.ok else KEPT[settings.start]
        if final is None:  # no valid starting reward: the run keeps the trivial start
            final = train(setup, TRIVIAL_REWARD)
        rows = [{"seed": s, **evaluate(setup.scenario, final.controller, s, horizon_s)} for s in eval_seeds]
        usage = model.usage().as_dict() if model is not None else None
        return DesignRun(label, variant, seed, outcome, rows, usage, time.perf_counter() - start,
                         final_code=final.code, kept=kept)

    run = study.cached("bus_reward_design", params, build)
    run.designer = label  # the label is not part of the cache key
    return run


REFERENCES = ("no holding", "feedback control", "expert RL (RL-local)")


@dataclass
class ReferenceRun:
    """The reference controllers of Tables 3 and 4 for one agent seed."""

    seed: int
    eval_rows: list[dict]
    """``method`` (one of :data:`REFERENCES`), ``seed`` and the evaluation measures per episode."""
    design_travel_time_s: dict[str, float]
    """Mean travel time of each reference on the design seeds (the per-iteration plots' lines)."""


def reference_run(*, seed: int, dqn: dict, design_seeds: list[int], eval_seeds: list[int],
                  horizon_s: float | None = None, train_horizon_s: float | None = None,
                  scenario: str = "case1", **_loop: object) -> ReferenceRun:
    """No holding, feedback control and the DQN trained on the RL-local expert reward (the warm
    start's agent: the same cached candidate the loops start from) on the evaluation and design
    episodes. Accepts and ignores the loop-only arguments of :func:`design_run`."""
    params = dict(seed=seed, dqn=dqn, design_seeds=list(design_seeds), horizon_s=horizon_s,
                  train_horizon_s=train_horizon_s, scenario=scenario)

    def build() -> ReferenceRun:
        setup = _setup(scenario, dqn, seed, design_seeds, horizon_s, train_horizon_s)
        expert = _candidate_trainer(params)(setup, expert_code(setup.scenario.state_dim))
        controllers = dict(zip(REFERENCES, (NoHolding(), Feedback(), expert.controller)))
        rows = [{"method": m, "seed": s, **evaluate(setup.scenario, c, s, horizon_s)}
                for m, c in controllers.items() for s in eval_seeds]
        design = {m: float(np.mean([evaluate(setup.scenario, c, s, horizon_s)["travel_time_s"] for s in design_seeds]))
                  for m, c in controllers.items()}
        return ReferenceRun(seed, rows, design)

    return study.cached("bus_reward_references", {**params, "eval_seeds": list(eval_seeds)}, build)


@dataclass
class DirectRun:
    """The LLM-direct controller (App. A.5) on evaluation episodes."""

    label: str
    rows: list[dict] = field(default_factory=list)
    """``method``, ``seed``, the evaluation measures, ``decisions`` and ``failures`` (unreadable answers)."""
    usage: dict | None = None
    unavailable: str = ""


def direct_run(*, llm: dict | None, eval_seeds: list[int], horizon_s: float | None = None,
               scenario: str = "case1", case_kwargs: dict | None = None, paper_llm: str = "", note: str = "") -> DirectRun:
    """The LLM-direct controller on ``eval_seeds`` (serially: one client; every request in the
    cassette), labelled with the model, the paper's LLM it stands in for and ``note`` (e.g. fewer
    or shorter episodes than other rows). Case 1 gives a row per episode; a multi-line case
    (``case2``, ``case3``) a row per line and ``overall`` (:func:`~llmtraffic.bus.evaluation.evaluate_lines`).
    An episode's last row also holds its decisions, unreadable answers and LLM wall time
    (``llm_s``): one request per decision."""
    if llm is None:
        return DirectRun("LLM-direct", unavailable=NEEDS_LLM)
    kwargs = case_kwargs or {}
    model = from_config(with_cassette(llm))
    label = f"LLM-direct · {designer_label(llm, paper_llm)}" + (f" ({note})" if note else "")
    rows = []
    for seed in eval_seeds:
        case = scenarios.by_name(scenario, **kwargs)
        controller = LLMDirect(model, Setting.of(case), name=label)
        before = model.usage().latency_s
        found = ([{"method": label, "seed": seed, **evaluate(case, controller, seed, horizon_s)}] if scenario == "case1"
                 else evaluate_lines(scenario, kwargs, label, controller, seed, horizon_s))
        found[-1].update(decisions=controller.decisions, failures=controller.failures,
                         llm_s=model.usage().latency_s - before)
        rows += found
    return DirectRun(label, rows, model.usage().as_dict())


def direct_cost(run: DirectRun) -> dict:
    """What one holding decision of the LLM-direct controller costs: decisions, unreadable answers,
    requests, tokens and LLM seconds, in all and per decision."""
    episodes = [r for r in run.rows if "decisions" in r]
    decisions = sum(r["decisions"] for r in episodes)
    u = run.usage or {}
    per = max(decisions, 1)
    return {"episodes": len(episodes), "decisions": decisions, "unreadable answers": sum(r["failures"] for r in episodes),
            "requests": u.get("calls", 0), "prompt tokens per decision": round(u.get("prompt_tokens", 0) / per, 1),
            "completion tokens per decision": round(u.get("completion_tokens", 0) / per, 1),
            "LLM s per decision": round(u.get("latency_s", 0.0) / per, 2), "LLM s in all": round(u.get("latency_s", 0.0), 1)}


def variant_grid(variants_: list[str], agent_seeds: list[int], llm: dict | None, common: dict,
                 executor: str = "serial", jobs: int = 1, llm_iterations: int | dict[str, int] | None = None,
                 llm_seeds: list[int] | dict[str, list[int]] | None = None,
                 **extra) -> tuple[list[DesignRun], list[ReferenceRun]]:
    """Every variant × agent seed with the search designer, then with the LLM (rows that say why
    without ``llm``), and the references, each grid through ``executor``. ``llm_iterations``
    (default ``common["iterations"]``; or per variant, :func:`llm_iterations_of`) and ``llm_seeds``
    (default ``agent_seeds``; or per variant, :func:`llm_seeds_of`): the LLM loops' iterations and
    design runs' seeds, fewer where each request costs minutes of CPU. LLM loops in parallel
    workers each ask their own server and share one cassette (a request being recorded is claimed)."""
    seeds = llm_seeds_of(variants_, agent_seeds, llm_seeds)
    rounds = llm_iterations_of(variants_, common["iterations"], llm_iterations)

    def tasks(designer: str) -> list[dict]:
        if designer != LLM_DESIGNER:
            return [dict(designer=designer, llm=llm, variant=v, seed=s, **extra, **common)
                    for v in variants_ for s in agent_seeds]
        return [dict(designer=designer, llm=llm, variant=v, seed=s, **extra, **{**common, "iterations": rounds[v]})
                for v in variants_ for s in seeds[v]]

    found = study.run_grid(design_run, tasks(SEARCH), executor=executor, jobs=jobs, desc="search-designer loops")
    # this notebook's own LLM rows first, then the rows another notebook shares (SHARED), last seed first: Table 1's
    # notebook builds them first seed first, so two notebooks side by side build different runs instead of one of
    # them waiting on the run the other is building
    mine = tasks(LLM_DESIGNER)
    order = ([i for i, t in enumerate(mine) if t["variant"] not in SHARED]
             + [i for i, t in enumerate(mine) if t["variant"] in SHARED][::-1])
    ran = study.run_grid(design_run, [mine[i] for i in order], executor=executor, jobs=jobs, desc="LLM loops")
    found += [run for _, run in sorted(zip(order, ran), key=lambda pair: pair[0])]
    refs = study.run_grid(reference_run, [dict(seed=s, **common) for s in agent_seeds], executor=executor, jobs=jobs,
                          desc="references")
    return found, refs


SHARED = ("paradigm", "cold")
"""Variants whose design runs Tables 1, 3 and 4 share at ``quick`` (the same loop protocol and settings)."""


def llm_seeds_of(variants_: list[str], agent_seeds: list[int],
                 llm_seeds: list[int] | dict[str, list[int]] | None) -> dict[str, list[int]]:
    """Variant → the seeds of its LLM design runs: ``agent_seeds`` (None), one list for every
    variant, or a list per variant (a variant left out gets the first agent seed alone). Each
    must be a non-empty subset of ``agent_seeds`` (the references run on those)."""
    if llm_seeds is None:
        out = dict.fromkeys(variants_, list(agent_seeds))
    elif isinstance(llm_seeds, dict):
        unknown = sorted(set(llm_seeds) - set(variants_))
        if unknown:
            raise ValueError(f"llm_seeds names variant(s) {unknown} that do not run here; running: {variants_}")
        out = {v: list(llm_seeds.get(v, agent_seeds[:1])) for v in variants_}
    else:
        out = dict.fromkeys(variants_, list(llm_seeds))
    for v, seeds in out.items():
        if not seeds or not set(seeds) <= set(agent_seeds):
            raise ValueError(f"llm_seeds {seeds} ({v}) must be a non-empty subset of agent_seeds {agent_seeds} "
                             "(the references run on those)")
    return out


def llm_iterations_of(variants_: list[str], iterations: int,
                      llm_iterations: int | dict[str, int] | None) -> dict[str, int]:
    """Variant → its LLM loops' iterations: ``iterations`` (None), one number for every variant, or
    one per variant (a variant left out keeps ``iterations``)."""
    if isinstance(llm_iterations, dict):
        unknown = sorted(set(llm_iterations) - set(variants_))
        if unknown:
            raise ValueError(f"llm_iterations names variant(s) {unknown} that do not run here; running: {variants_}")
        out = {v: llm_iterations.get(v, iterations) for v in variants_}
    else:
        out = dict.fromkeys(variants_, llm_iterations or iterations)
    bad = {v: n for v, n in out.items() if not isinstance(n, int) or n < 1}
    if bad:
        raise ValueError(f"llm_iterations must be whole numbers >= 1; got {bad}")
    return out


def iterations_note(variants_: list[str], iterations: int, llm_iterations: int | dict[str, int] | None,
                    llm: dict | None) -> str:
    """``"4 iterations (2 for the LLM rows without analyzer, without initializer)"`` for the captions."""
    rounds = llm_iterations_of(variants_, iterations, llm_iterations)
    fewer: dict[int, list[str]] = {}
    for v, n in rounds.items():
        if n != iterations:
            fewer.setdefault(n, []).append(variants.NAMES[v])
    if not llm or not fewer:
        return f"{iterations} iterations"
    every = len(fewer) == 1 and len(next(iter(fewer.values()))) == len(variants_)
    parts = [f"{n} for the LLM rows" + ("" if every else " " + ", ".join(names)) for n, names in fewer.items()]
    return f"{iterations} iterations ({'; '.join(parts)})"


def design_runs_note(runs: dict[str, list[DesignRun]]) -> str:
    """``"design runs per LLM row: paradigm (ours) 5, Eureka-style 1"`` for the captions ('' without LLM rows)."""
    counts = [f"{variants.NAMES[g[0].variant]} {sum(not r.unavailable for r in g)}"
              for g in runs.values() if g[0].usage is not None]
    return f"design runs per LLM row: {', '.join(counts)}" if counts else ""
