"""The study harness: profiles and parameters, the papermill runner, outputs with provenance,
the figure gallery, the data directory, sweeps and the artifact cache.

Notebooks use::

    from llmtraffic import study
    ctx = study.begin("bus_case1", globals())
    results = study.run_grid(fn, study.grid(seed=seeds, method=methods), executor=executor, jobs=jobs)
    agent = study.cached("dqn", params, lambda: train(...))
    study.plot_series(ax, episodes, {"LLM": runs_llm, "RL": runs_rl})  # seeds × episodes: mean + CI band
    study.save_figure(fig, "headway_sd_by_stop", caption="...")
    summary = study.tables.summarize(rows, ["travel_s"], reference="RL-global")  # runs: agent seeds
    study.save_table(summary.frame, "table1", paper=paper_values, caption=summary.caption)
    study.save_table(settings, "settings", caption="DQN settings", descriptive=True)
    study.claim("llm_vs_rl_global", "bus", "§5.2.2, Table 1", "...", "travel (%)", "table1",
                ours=summary.differences["LLM", "travel_s"], paper_value=-3.73)
"""

from . import stats, tables
from .cache import cached, cached_together, dependency_digest, is_cached, source_digest
from .claims import agents_label, claim
from .context import Context, begin, current
from .executor import grid, run_grid
from .outputs import plot_series, save_figure, save_table
from .provenance import DirtyTreeError
from .paths import DataMissingError, data_dir, data_path, figures_dir, runs_dir

__all__ = [
    "Context", "DataMissingError", "DirtyTreeError", "agents_label", "begin", "cached", "cached_together", "claim", "current", "data_dir",
    "data_path", "dependency_digest", "figures_dir", "grid", "is_cached", "plot_series", "run_grid", "runs_dir",
    "save_figure", "save_table", "source_digest", "stats", "tables",
]
