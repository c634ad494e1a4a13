from pathlib import Path

import pytest


@pytest.fixture
def outdirs(tmp_path, monkeypatch):
    """Fresh figures/ and runs/ folders for one test."""
    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    return tmp_path


@pytest.fixture
def claims_ctx(outdirs, monkeypatch):
    """A study context for the fixture notebook with no claims recorded yet."""
    from llmtraffic import study
    from llmtraffic.study import claims

    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(Path(__file__).parent / "fixtures" / "notebooks" / "fx_plot.ipynb"))
    monkeypatch.setenv("LLMTRAFFIC_PROFILE", "smoke")
    claims._recorded.clear()
    return study.begin("fx_plot", {"n": 7, "scale": 0.5, "label": "x", "seeds": [4, 5], "extra": None})
