"""One executor for the study's grids of (seed × scenario × method) jobs.

``run_grid(fn, jobs)`` calls ``fn(**job)`` for every job and returns the results in job order,
serially, in local processes, or on a Ray cluster. Jobs must carry their own seeds (the executor
adds no randomness), so the same grid gives the same results under all three. Cached artifacts a
job uses in a worker process are noted in this process's provenance, as if the job ran here.
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from . import provenance

EXECUTORS = ("serial", "processes", "ray")


def grid(**axes: Iterable[Any]) -> list[dict[str, Any]]:
    """Cartesian product of named axes: ``grid(seed=[0, 1], method=["a"])`` → list of job dicts."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(list(v) for v in axes.values()))]


def run_grid(
    fn: Callable[..., Any],
    tasks: Iterable[Mapping[str, Any]],
    executor: str = "serial",
    jobs: int | None = None,
    desc: str = "tasks",
) -> list[Any]:
    """Run ``fn(**task)`` for each task; results in task order.

    ``executor``: ``serial``; ``processes`` (``jobs`` local processes, spawned so that no torch
    or SUMO state of this process leaks into them, and kept for the next grid of this process, see
    :func:`_pool`; ``fn`` must be importable, i.e. defined in a module);
    ``ray`` (connects to ``$RAY_ADDRESS`` or starts a local cluster with ``jobs`` CPUs).
    """
    tasks = [dict(task) for task in tasks]
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    bar = tqdm(total=len(tasks), desc=desc, leave=False)
    try:
        if executor == "serial":
            results = []
            for task in tasks:
                results.append(fn(**task))
                bar.update()
            return results
        if executor == "processes":
            return _processes(fn, tasks, jobs or os.cpu_count() or 1, bar)
        return _ray(fn, tasks, jobs, bar)
    finally:
        bar.close()


def _call(fn: Callable[..., Any], job: dict[str, Any]) -> tuple[Any, list[dict]]:
    """Run one job in a worker; return its result and the cached artifacts it used (a worker
    runs many jobs, so the ones an earlier job used are forgotten first)."""
    provenance.forget_artifacts()
    result = fn(**job)
    return result, provenance.artifacts()


def _collect(outcome: tuple[Any, list[dict]]) -> Any:
    result, used = outcome
    for entry in used:
        provenance.note_artifact(entry)
    return result


def _processes(fn, jobs, workers, bar) -> list[Any]:
    if getattr(fn, "__module__", None) == "__main__" or "<locals>" in getattr(fn, "__qualname__", ""):
        raise ValueError(
            f"executor 'processes' needs an importable function; {fn!r} is defined in a notebook "
            "or inside another function. Move it into lib/llmtraffic/ or use executor 'serial' or 'ray'."
        )
    results: list[Any] = [None] * len(jobs)
    pool = _pool(workers)
    futures = {pool.submit(_call, fn, job): i for i, job in enumerate(jobs)}
    try:
        for future in as_completed(futures):
            results[futures[future]] = _collect(future.result())
            bar.update()
    except BaseException as err:
        for future in futures:
            future.cancel()
        if isinstance(err, (BrokenProcessPool, KeyboardInterrupt)):
            _drop_pool()
        raise
    return results


_POOL: tuple[tuple, ProcessPoolExecutor] | None = None
"""The worker processes of the last ``processes`` grid, and what they were started under."""


def _pool(workers: int) -> ProcessPoolExecutor:
    """Spawned workers, reused from the last grid when nothing they were started under changed:
    the worker count, the environment, ``sys.path`` and the library's source files (a worker
    imports the library once; a notebook's grids would otherwise pay that import, ~9 s for the
    LLM jobs, per grid and worker)."""
    global _POOL
    key = (workers, tuple(sorted(os.environ.items())), tuple(sys.path), _source_stamp())
    if _POOL is not None and _POOL[0] == key:
        return _POOL[1]
    _drop_pool()
    _POOL = key, ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=exit_quietly_on_interrupt)
    return _POOL[1]


def exit_quietly_on_interrupt() -> None:
    """Make SIGINT end this process at once, without a traceback. Workers share the notebook
    kernel's process group, so the interrupt that shuts a kernel down at the end of every
    notebook reached them too, and each printed a ``KeyboardInterrupt`` traceback into the log
    of a run that had succeeded. An interrupted grid loses its running jobs either way (the
    caller drops the pool); cached results are written atomically, so none is left half done."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(1))


def _source_stamp() -> tuple[tuple[str, int], ...]:
    """Modification times of the library's modules: edited code gets fresh workers."""
    root = Path(__file__).resolve().parents[1]
    return tuple((str(p), p.stat().st_mtime_ns) for p in sorted(root.rglob("*.py")))


@atexit.register
def _drop_pool() -> None:
    global _POOL
    if _POOL is not None:
        _POOL[1].shutdown(wait=True, cancel_futures=True)
        _POOL = None


def _ray_init(ray, workers: int | None, attempts: int = 3) -> None:
    """Connect to ``$RAY_ADDRESS`` or start a local cluster.

    Ray gives a starting raylet a fixed 30 s to register; on a loaded machine it can miss that,
    so a local start is retried (a failed start leaves nothing running)."""
    address = os.environ.get("RAY_ADDRESS")
    for attempt in range(1, attempts + 1):
        try:
            ray.init(
                address=address or None,
                num_cpus=None if address else (workers or os.cpu_count()),
                include_dashboard=False,
                log_to_driver=False,
            )
            return
        except Exception as err:
            if address or "timed out during startup" not in str(err) or attempt == attempts:
                raise
            ray.shutdown()


def _ray(fn, jobs, workers, bar) -> list[Any]:
    import ray

    if not ray.is_initialized():
        _ray_init(ray, workers)
    remote = ray.remote(_call)
    refs = [remote.remote(fn, job) for job in jobs]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(jobs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        results[index[done[0]]] = _collect(ray.get(done[0]))
        bar.update()
    return results
