import os
import signal
import sys
import time

import numpy as np
import pytest

from llmtraffic.study import executor, grid, run_grid


def seeded_job(seed: int, scale: float) -> dict:
    """A job whose result depends only on its seed and parameters."""
    rng = np.random.default_rng(seed)
    return {"seed": seed, "scale": scale, "value": float(rng.normal(size=1000).sum() * scale)}


def test_grid_is_the_cartesian_product_in_order():
    assert grid(seed=[0, 1], scale=[1.0, 2.0]) == [
        {"seed": 0, "scale": 1.0}, {"seed": 0, "scale": 2.0},
        {"seed": 1, "scale": 1.0}, {"seed": 1, "scale": 2.0},
    ]


@pytest.mark.slow
def test_serial_processes_and_ray_give_identical_results():
    import ray
    import ray.cloudpickle

    tasks = grid(seed=[3, 1, 4, 1, 5], scale=[1.0, -0.5])
    serial = run_grid(seeded_job, tasks)
    assert len({r["value"] for r in serial}) == 8  # seeds really change the result (two repeated tasks)
    assert run_grid(seeded_job, tasks, executor="processes", jobs=2) == serial
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ray workers cannot import tests/
    try:
        assert run_grid(seeded_job, tasks, executor="ray", jobs=2) == serial
    finally:
        ray.shutdown()


def test_unknown_executor_and_unimportable_function_are_clear_errors():
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        run_grid(seeded_job, [], executor="dask")

    def local(seed):
        return seed

    with pytest.raises(ValueError, match="needs an importable function"):
        run_grid(local, [{"seed": 1}], executor="processes", jobs=1)


def worker_pid(i: int) -> int:
    import os
    import time

    time.sleep(0.2)  # long enough that both workers take jobs
    return os.getpid()


def failing_job(i: int) -> int:
    raise ValueError(f"job {i} failed")


def test_processes_reuse_their_workers_until_the_environment_changes(monkeypatch):
    tasks = [{"i": i} for i in range(4)]
    first = set(run_grid(worker_pid, tasks, executor="processes", jobs=2))
    assert len(first) == 2 and os.getpid() not in first
    assert set(run_grid(worker_pid, tasks, executor="processes", jobs=2)) == first
    with pytest.raises(ValueError, match="job 0 failed"):  # a job's error reaches the caller, the workers live on
        run_grid(failing_job, [{"i": 0}], executor="processes", jobs=2)
    assert set(run_grid(worker_pid, tasks, executor="processes", jobs=2)) == first
    monkeypatch.setenv("LLMTRAFFIC_TEST_POOL", "1")  # workers read the environment once, at their start
    assert set(run_grid(worker_pid, tasks, executor="processes", jobs=2)).isdisjoint(first)


def test_an_interrupt_ends_a_worker_without_a_traceback(capfd, gone):
    """A notebook kernel's shutdown interrupts its whole process group, workers included: each
    worker used to print a KeyboardInterrupt traceback into the log of a run that succeeded."""
    pid = run_grid(worker_pid, [{"i": 0}], executor="processes", jobs=1)[0]
    capfd.readouterr()
    os.kill(pid, signal.SIGINT)
    assert gone(pid)
    executor._drop_pool()  # the pool lost a worker: the next grid starts new ones
    assert "KeyboardInterrupt" not in capfd.readouterr().err
    assert run_grid(worker_pid, [{"i": 0}], executor="processes", jobs=1)[0] != pid
