"""The agents Tables 3 and 4 report: each loop's final reward, and the expert reward the loops
start from, trained again with validation-based checkpoint selection.

Inside a loop every candidate is trained once and its last checkpoint tested on the design
episodes (the loop's feedback, §4.3). The reported agent of a row is trained like every RL row
of the study (:func:`llmtraffic.bus.jobs.train_each`: same DQN budget, the checkpoint with the
best mean travel time on validation episodes disjoint from the eval and design episodes), so
two rows differ only by their reward, and a reward is not judged by one unlucky last episode.
"""

from __future__ import annotations

import pandas as pd

from ... import study
from .. import scenarios
from ..evaluation import evaluate_method
from ..jobs import train_each
from .jobs import REFERENCES, DesignRun, ReferenceRun
from .tables import reference_rows

EXPERT = REFERENCES[2]
"""The expert-reward RL reference row (RL-local, the loops' warm start)."""


def validated_frame(runs: dict[str, list[DesignRun]], references: list[ReferenceRun], *, dqn: dict,
                    val_seeds: list[int], eval_seeds: list[int], design_seeds: list[int], horizon_s: float,
                    train_horizon_s: float, executor: str = "serial", jobs: int = 1) -> pd.DataFrame:
    """Evaluation rows like :func:`.tables.eval_frame`'s (``method``, ``agent_seed``, ``seed``,
    measures): the fixed references as the reference runs measured them, the expert reference
    and every run's final reward by validated agents (``selected``: the training episode whose
    checkpoint was kept).

    Case 1 only (the loops of Tables 3 and 4 run on it)."""
    final = {(label, r.seed): ("case1", {}, r.final_code, dqn)
             for label, g in runs.items() for r in g if r.counted}
    final |= {(EXPERT, ref.seed): ("case1", {}, "rl_local", dqn) for ref in references}
    agents = train_each(
        final, val_seeds, {"eval_seeds": eval_seeds, "design_seeds": design_seeds}, executor=executor, jobs=jobs,
        train_horizon_s=train_horizon_s, val_horizon_s=horizon_s)
    scenario = scenarios.case1()
    tasks = [dict(method=m, controller=ag.controller(), scenario=scenario, seed=s, horizon_s=horizon_s, agent_seed=a,
                  selected=ag.selected, noun="agent" if m == EXPERT else "design run")
             for (m, a), ag in agents.items() for s in eval_seeds]
    rows = study.run_grid(evaluate_method, tasks, executor=executor, jobs=jobs, desc="validated agents' tests")
    return pd.DataFrame(reference_rows(references, learned=False) + rows)
