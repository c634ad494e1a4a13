

import pytest



@pytest.fixture
def outdirs(tmp_path, monkeypatch):
    """Fresh figures/ and runs/ folders for one test."""
    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    return tmp_path
