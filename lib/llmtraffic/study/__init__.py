"""The study harness: data directory, outputs, provenance, sweeps and the papermill runner."""

from .paths import DataMissingError, data_dir, data_path, figures_dir, runs_dir

__all__ = ["DataMissingError", "data_dir", "data_path", "figures_dir", "runs_dir"]
