"""Test-session settings: data from ../shared/data (unless LLMTRAFFIC_DATA says otherwise),
figures and runs in a temporary folder so tests never touch the committed figures/."""

import os
import time
from pathlib import Path

import pytest

import llmtraffic  # noqa: F401  (pins torch's CPU kernels before any test module imports torch)

ROOT = Path(__file__).resolve().parents[1]
_shared = ROOT.parent / "shared" / "data"
if not os.environ.get("LLMTRAFFIC_DATA") and _shared.exists():
    os.environ["LLMTRAFFIC_DATA"] = str(_shared)
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True, scope="session")
def _isolated_outputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("study")
    old = {k: os.environ.get(k) for k in ("LLMTRAFFIC_FIGURES", "LLMTRAFFIC_RUNS")}
    os.environ["LLMTRAFFIC_FIGURES"] = str(base / "figures")
    os.environ["LLMTRAFFIC_RUNS"] = str(base / "runs")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def smollm2(_isolated_outputs):
    """SmolLM2-135M-Instruct from its package through the project's loader, fp32 on one thread:
    (model, tokenizer). The dequantized folder is built once per session in the test runs dir."""
    import torch

    from llmtraffic.rl import gguf_weights

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield gguf_weights.load("smollm2-135m")
    torch.set_num_threads(threads)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` (not necessarily a child of this process) has ended within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def gone():
    """:func:`_gone`, for tests that check a process was stopped."""
    return _gone
