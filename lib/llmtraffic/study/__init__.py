"""The study harness: profiles and parameters, the papermill runner, outputs with provenance,
the figure gallery, the data directory, sweeps and the artifact cache.

Notebooks use::

    from llmtraffic import study
    ctx = study.begin("bus_case1", globals())
    results = study.run_grid(fn, study.grid(seed=seeds, method=methods), executor=executor, jobs=jobs)
    agent = study.cached("dqn", params, lambda: train(...))
    study.save_figure(fig, "headway_sd_by_stop", caption="...")
    study.save_table(df, "table1", paper=paper_values, caption="...")
    study.claim("llm_vs_rl_global", "bus", "§5.2.2, Table 1", "...", "travel (%)", "table1",
                ours=study.stats.paired_difference(llm, rl_global, relative=True), paper_value=-3.73)
"""

from . import stats
from .cache import cached, source_digest
from .claims import claim
from .context import Context, begin, current
from .executor import grid, run_grid
from .outputs import save_figure, save_table
from .paths import DataMissingError, data_dir, data_path, figures_dir, runs_dir

__all__ = [
    "Context", "DataMissingError", "begin", "cached", "claim", "current", "data_dir", "data_path",
    "figures_dir", "grid", "run_grid", "runs_dir", "save_figure", "save_table", "source_digest", "stats",
]
