"""The study's view of :mod:`llmtraffic.paths` (kept so ``study.paths`` names stay valid)."""

from ..paths import ROOT, DataMissingError, data_dir, data_path, figures_dir, runs_dir

__all__ = ["ROOT", "DataMissingError", "data_dir", "data_path", "figures_dir", "runs_dir"]
