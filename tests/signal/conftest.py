"""Shared fixtures of the signal tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def torch_one_thread():
    """One torch thread for the module's tests (the test machine's cores are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
