"""Execute notebooks with papermill, after validating every notebook's parameters.

Each notebook runs in its own ``papermill`` process (so ``--jobs N`` can run several at once and
one notebook's state never leaks into the next) and is written to ``runs/<profile>/<stem>.ipynb``.
After a notebook succeeds, the outputs in ``figures/<stem>/`` that this run did not write are
removed (:func:`prune_stale`), so the gallery never shows a figure the code no longer makes.

Before the first notebook starts, the data the selected notebooks declare (metadata
``llmtraffic.data``) is fetched and verified (:func:`prepare_data`, the step of ``make data``).
What cannot be fetched is reported once, and the notebooks that need it are skipped, not started.
"""

from __future__ import annotations

import fnmatch
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm.auto import tqdm

from ..paths import DATA_ENV, NEEDS_ENV, is_under
from . import claims, findings, gallery, provenance, verify
from .atomic import atomic_write_text, folder_lock
from .data import ensure, files_under, folders_for, notebook_needs
from .params import ParamError, check_profile, differences, load_profile, notebook_parameters, validate
from .paths import ROOT, figures_dir, runs_dir
from . import plan as gpu_plan
from .preflight import ResourceError, check_settings, load_study_checks, resource_problems


DEFAULT_JOBS = max(1, min(os.cpu_count() or 1, 4))
"""Notebooks at once by default: every core (at most 4; each notebook may run a process pool of its own)."""
GRACE_S = 30.0
"""Seconds an interrupted notebook has to stop (its kernel stops its LLM server) before its
processes are killed."""
KERNEL_START_TRIES = 3
"""Starts a notebook gets when its kernel dies before running a cell: kernels launched at once
race for ZMQ ports (jupyter_client), a failure of the machine, not of the notebook."""
KERNEL_START_ERRORS = ("Kernel died before replying to kernel_info", "Kernel didn't respond in")


@dataclass
class Plan:
    stem: str
    notebook: Path
    params: dict[str, Any]
    """What papermill injects: the profile's values and the user's settings."""
    changed: dict[str, Any] = field(default_factory=dict)
    """The parameters whose values differ from the profile's (file over the notebook's defaults)."""
    full: dict[str, Any] = field(default_factory=dict)
    """Every parameter's value, defaults included (what the pre-flight checks see)."""
    data: tuple[str, ...] = ()
    """The data folders the notebook needs with these parameters (:func:`~llmtraffic.study.data.notebook_needs`)."""


@dataclass
class Outcome:
    stem: str
    ok: bool
    seconds: float
    output: Path
    error: str = ""
    log: list[str] = field(default_factory=list)
    started: float = 0.0
    """``time.time()`` when :func:`execute` began; outputs older than this are from an earlier run."""
    skipped: bool = False
    """Not started: data it declares is missing (``error`` says which)."""


def discover(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Notebooks in ``notebooks_dir`` (sorted), filtered by glob patterns on their stem."""
    found = sorted(p for p in Path(notebooks_dir).glob("*.ipynb") if not p.name.startswith("."))
    if only:
        found = [p for p in found if any(fnmatch.fnmatch(p.stem, pat) for pat in only)]
    return found


def prioritise(notebooks: list[Path], first: list[str] | None = None) -> list[Path]:
    """``notebooks`` with those matching the glob patterns of ``first`` moved to the front, in the
    order of the patterns (the rest keep their order): the longest notebooks started first bound
    a parallel run's wall time."""
    rank = lambda p: next((i for i, pat in enumerate(first or []) if fnmatch.fnmatch(p.stem, pat)), len(first or []))  # noqa: E731
    return sorted(notebooks, key=rank)


def plan(
    notebooks: list[Path], profile: str, params_dir: Path, overrides: dict[str, Any] | None = None, check: bool = True
) -> list[Plan]:
    """Resolve and validate the parameters of every notebook (types, constraints, settings that
    can never work, ``check=False``: types and constraints only); raises :class:`ParamError`
    before anything runs."""
    plans = []
    load_study_checks()  # the studies' checks and planners
    for nb in notebooks:
        declared = notebook_parameters(nb)
        base = validate(nb.stem, load_profile(params_dir, nb.stem, profile), declared)
        values = validate(nb.stem, {**base, **(overrides or {})}, declared)
        full = {**{k: p.default for k, p in declared.items()}, **values}
        for text in gpu_plan.describe(nb.stem, full) if check else []:  # printed before any GPU work
            print(text, file=sys.stderr)
        if check:
            check_settings(nb.stem, full)
        try:
            needs = folders_for(notebook_needs(nb), full)
        except ValueError as err:
            raise ParamError(str(err)) from None
        plans.append(Plan(nb.stem, nb, values, differences(declared, base, values), full, needs))
    return plans


def prepare_data(plans: list[Plan], quiet: bool = False) -> dict[str, str]:
    """Fetch what the plans' notebooks declare (missing or corrupted files only) and return, for
    each notebook whose data is still missing, why it is skipped. The missing files and both
    remedies are printed once, whatever the number of notebooks or files."""
    wanted = files_under({prefix for p in plans for prefix in p.data})
    if not wanted:
        return {}
    report = ensure(wanted, progress=not quiet)
    if not report.missing:
        if not quiet:
            print(report.summary(), file=sys.stderr)
        return {}
    skipped = {}
    for p in plans:
        lacking = sorted({prefix for prefix in p.data for path in report.missing if is_under(path, prefix)})
        if lacking:
            skipped[p.stem] = f"its data is missing ({', '.join(lacking)}): run `make data` with network, or set {DATA_ENV}"
    print(f"{report.problem()}\nSkipped, since they need these files: {', '.join(skipped)}. "
          "The other notebooks run.", file=sys.stderr)
    return skipped


def preflight(plans: list[Plan]) -> None:
    """Raise :class:`ResourceError` naming every notebook whose settings ask for a resource that
    is missing here (an unreachable LLM endpoint, a backbone without weights), before any runs."""
    memo: dict = {}
    by_problem: dict[str, list[str]] = {}
    for p in plans:
        for problem in resource_problems(p.full, memo):
            by_problem.setdefault(problem, []).append(p.stem)
    if by_problem:
        raise ResourceError("\n".join(f"{', '.join(stems)}: {problem}" for problem, stems in by_problem.items()))


def settings_line(p: Plan, profile: str) -> str:
    """The log line naming every parameter that differs from the profile."""
    shown = ", ".join(f"{k}={v!r}" for k, v in p.changed.items()) or "none"
    return f"settings that differ from profile {profile}: {shown}"


def failure_message(stem: str, executed: Path, fallback: str) -> str:
    """``<stem>: cell N (`first line`) raised Error: message`` from papermill's output notebook."""
    try:
        cells = json.loads(executed.read_text())["cells"]
    except (OSError, json.JSONDecodeError, KeyError):
        return f"{stem}: {fallback}"
    code_cells = [c for c in cells if c["cell_type"] == "code"]
    for number, cell in enumerate(code_cells, 1):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors or cell.get("metadata", {}).get("papermill", {}).get("exception"):
            source = "".join(cell["source"]).strip().splitlines()
            first = source[0] if source else ""
            detail = f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else fallback
            return f"{stem}: code cell {number} (`{first[:60]}`) raised {detail}"
    return f"{stem}: {fallback}"


RUNNING: set[subprocess.Popen] = set()
"""The notebooks' papermill processes now running (each in a session of its own, so that only the
runner passes an interrupt on)."""
INTERRUPTED = threading.Event()
"""Set by :func:`interrupt_all`: a notebook that starts after it is interrupted at once."""


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first (from Linux's /proc). Jupyter starts a kernel in a
    session of its own, and the kernel its workers and LLM server, so a process group misses them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop(0))
        todo += children.get(tree[-1], [])
    return tree


def signal_tree(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to a notebook's papermill and every process under it (its kernel, the kernel's
    workers and LLM server), so that a timeout or an interrupt leaves none of them running."""
    for pid in process_tree(proc.pid):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def interrupt_all(grace_s: float = GRACE_S) -> Callable[[], None]:
    """Interrupt every running notebook as Ctrl-C in a terminal would (SIGINT to its processes);
    what is still alive after ``grace_s`` is killed, by a timer (in case a notebook never exits)
    and by the returned ``reap``, which the runner calls before it exits (waiting at most until then)."""
    INTERRUPTED.set()
    procs = list(RUNNING)
    seen = {pid for proc in procs for pid in process_tree(proc.pid)}
    deadline = time.time() + grace_s
    for proc in procs:
        signal_tree(proc, signal.SIGINT)

    def kill_survivors() -> None:  # what ran at the interrupt, and what the live ones started since
        for pid in seen | {pid for proc in procs if proc.poll() is None for pid in process_tree(proc.pid)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def reap() -> None:
        while time.time() < deadline and any(_alive(pid) for pid in seen):
            time.sleep(0.2)
        kill_survivors()

    timer = threading.Timer(grace_s, kill_survivors)
    timer.daemon = True
    timer.start()
    return reap


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def execute(
    p: Plan, profile: str, out_dir: Path, echo=None, timeout_s: float | None = None, fresh: bool = False,
    params_dir: Path = ROOT / "params",
) -> Outcome:
    """Run one notebook with papermill in a subprocess, streaming its log lines to ``echo``;
    ``timeout_s`` kills it (and says so)."""
    start = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{p.stem}.ipynb"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(p.params, fh)
        params_file = fh.name
    env = {
        **os.environ,
        "LLMTRAFFIC_PROFILE": profile,
        "LLMTRAFFIC_NOTEBOOK": str(p.notebook.resolve()),
        "LLMTRAFFIC_PARAMS": str(Path(params_dir).resolve()),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
        "LLMTRAFFIC_FRESH": "1" if fresh else os.environ.get("LLMTRAFFIC_FRESH", ""),
        NEEDS_ENV: json.dumps(list(p.data)),
    }
    cmd = [
        sys.executable, "-m", "papermill", str(p.notebook), str(output), "-f", params_file,
        "--log-output", "--no-progress-bar", "--cwd", str(p.notebook.parent), "-k", "python3",
    ]
    log = [settings_line(p, profile)]
    if echo:
        echo(f"[{p.stem}] {log[0]}")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)  # interrupted by the runner only (interrupt_all)
    RUNNING.add(proc)
    if INTERRUPTED.is_set():  # started while the run was being interrupted
        signal_tree(proc, signal.SIGINT)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        signal_tree(proc, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill) if timeout_s else None
    if timer:
        timer.start()
    try:
        for line in proc.stdout:
            line = line.rstrip()
            log.append(line)
            if echo and line:
                echo(f"[{p.stem}] {line}")
        proc.wait()
    finally:
        RUNNING.discard(proc)
        if timer:
            timer.cancel()
        os.unlink(params_file)
    seconds = time.time() - start
    if proc.returncode == 0:
        return Outcome(p.stem, True, seconds, output, log=log, started=start)
    if timed_out.is_set():
        error = (f"{p.stem}: killed by the timeout after {timeout_s:g} s (--timeout {timeout_s:g}); "
                 "raise --timeout or run a smaller profile")
        return Outcome(p.stem, False, seconds, output, error, log, start)
    tail = next((line for line in reversed(log) if line.strip()), f"papermill exited with status {proc.returncode}")
    return Outcome(p.stem, False, seconds, output, failure_message(p.stem, output, tail), log, start)


def kernel_never_started(log: list[str]) -> bool:
    """True when papermill's log shows the kernel failing to start and no cell executing."""
    return (any(err in line for line in log for err in KERNEL_START_ERRORS)
            and not any("Executing Cell" in line for line in log))


NEVER_PRUNED = frozenset({"run.json", "README.md", "SCORECARD.md"})
"""The figures folder's own files (run summary, gallery, scorecard): :func:`prune_stale` never removes them."""


def _sidecar(path: Path) -> dict | None:
    """The sidecar in ``path`` (a JSON object with a numeric ``created``: an output's or ``claims.json``), else None."""
    if path.suffix != ".json":
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    created = meta.get("created") if isinstance(meta, dict) else None
    return meta if isinstance(created, (int, float)) and not isinstance(created, bool) else None


def _unit_files(name: str, meta: dict) -> set[str]:
    """The files of the unit whose sidecar is ``name``: the sidecar and the plain file names it lists."""
    listed = meta.get("files") or []
    return {name} | {f for f in listed if isinstance(f, str) and f == Path(f).name}


def prune_stale(folder: Path, since: float) -> list[str]:
    """Remove from ``folder`` (one notebook's ``figures/<stem>/``) what a run started at ``since``
    did not write, and return one line per removal.

    Why: a notebook that stops saving an output (renamed, dropped, turned from a table into a
    figure) would otherwise leave the old files behind, and the gallery and scorecard would keep
    showing them beside the new ones as if the current code had made them. Call it only after the
    notebook succeeded, so that a failed run loses nothing.

    Removed: every unit whose sidecar's ``created`` is earlier than ``since`` (the sidecar and each
    file it lists; ``claims.json`` is a unit of its own), and every file that no sidecar lists and
    whose mtime is earlier than ``since`` (an orphan). Kept: subfolders and what they hold, every
    file a sidecar of this run lists, and :data:`NEVER_PRUNED`.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed: list[str] = []
    with folder_lock(folder):  # write_unit holds it too: never prune part of a unit being written
        files = {p.name: p for p in folder.iterdir() if p.is_file() and not p.is_symlink()}
        sidecars = {name: meta for name, path in files.items() if (meta := _sidecar(path)) is not None}
        data = {f for name, meta in sidecars.items() for f in _unit_files(name, meta) - {name}}
        sidecars = {name: meta for name, meta in sidecars.items() if name not in data}  # another unit's data file
        units = {name: _unit_files(name, meta) for name, meta in sidecars.items()}
        fresh = set().union(*(units[name] for name, meta in sidecars.items() if meta["created"] >= since))
        for name, meta in sorted(sidecars.items()):
            if meta["created"] >= since or name in NEVER_PRUNED:
                continue
            for f in sorted(units[name] & set(files) - fresh - NEVER_PRUNED):
                files[f].unlink(missing_ok=True)
            commit = ((meta.get("git") or {}).get("commit") or "unknown")[:7]
            removed.append(f"stale output {meta.get('name') or Path(name).stem} (from commit {commit})")
        listed = set().union(*units.values())
        for name, path in sorted(files.items()):
            if name not in listed and name not in NEVER_PRUNED and path.stat().st_mtime < since:
                path.unlink(missing_ok=True)
                removed.append(f"orphan file {name} (listed by no sidecar)")
    return removed


def run(
    profile: str,
    notebooks_dir: Path = ROOT / "notebooks",
    params_dir: Path = ROOT / "params",
    only: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    jobs: int = DEFAULT_JOBS,
    fail_fast: bool = False,
    fresh: bool = False,
    quiet: bool = False,
    timeout_s: float | None = None,
    first: list[str] | None = None,
) -> list[Outcome]:
    """Validate, check resources, fetch the declared data, then execute the selected notebooks;
    regenerate the gallery at the end.

    Raises (before anything runs) :class:`ParamError` for an unknown profile or parameters that
    can never work, :class:`ResourceError` for a resource the settings ask for that is missing here.
    A notebook whose declared data cannot be fetched is not started: its outcome is ``skipped``.
    """
    check_profile(params_dir, profile)
    if timeout_s is not None and not timeout_s > 0:
        raise ParamError(f"--timeout must be a positive number of seconds, got {timeout_s:g}")
    if jobs < 1:
        raise ParamError(f"--jobs must be at least 1, got {jobs}")
    notebooks = discover(notebooks_dir, only)
    if only and not notebooks:
        raise ParamError(f"--only {' '.join(only)} matches no notebook in {notebooks_dir}")
    notebooks = prioritise(notebooks, first)
    plans = plan(notebooks, profile, params_dir, overrides)
    preflight(plans)
    provenance.check_target(figures_dir())  # a dirty tree fails now, not at its first save
    skipped = prepare_data(plans, quiet)
    speed = provenance.speed_reference()  # before the notebooks load the machine
    cpu_before = _children_cpu_s()
    started = time.time()
    out_dir = runs_dir() / profile
    outcomes: list[Outcome] = []
    runnable = [p for p in plans if p.stem not in skipped]
    bar = tqdm(total=len(runnable), desc=f"notebooks ({profile})", unit="nb", disable=quiet or not runnable)
    echo = None if quiet else bar.write
    stop = threading.Event()

    def one(p: Plan) -> Outcome | None:
        if stop.is_set():
            return None
        outcome = execute(p, profile, out_dir, echo, timeout_s, fresh, params_dir)
        for attempt in range(2, KERNEL_START_TRIES + 1):
            if outcome.ok or not kernel_never_started(outcome.log) or stop.is_set() or INTERRUPTED.is_set():
                break
            retry = f"[{p.stem}] its kernel died before running a cell; start {attempt} of {KERNEL_START_TRIES}"
            bar.write(retry)
            outcome = execute(p, profile, out_dir, echo, timeout_s, fresh, params_dir)
            outcome.log.insert(0, retry)
        bar.update()
        bar.write(f"{'ok  ' if outcome.ok else 'FAIL'} {p.stem} ({outcome.seconds:.0f} s)" + ("" if outcome.ok else f": {outcome.error}"))
        if outcome.ok:  # a failed notebook keeps its old outputs: a failure loses nothing
            try:
                pruned = [f"[{p.stem}] removed {line}" for line in prune_stale(figures_dir() / p.stem, outcome.started)]
            except OSError as err:
                pruned = [f"[{p.stem}] could not remove stale outputs: {err}"]
            for line in pruned:
                outcome.log.append(line)
                bar.write(line)
        if not outcome.ok and fail_fast:
            stop.set()
        return outcome

    # The notebooks run in their own sessions: the runner passes an interrupt on (Ctrl-C, or a
    # SIGTERM from a job scheduler), so that no kernel, worker or LLM server outlives the run.
    main = threading.current_thread() is threading.main_thread()
    on_term = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    INTERRUPTED.clear()
    reap = None
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            try:
                outcomes = [o for o in pool.map(one, runnable) if o is not None]
            except KeyboardInterrupt:
                stop.set()
                reap = interrupt_all()
                raise
    finally:
        if reap is not None:
            reap()
        if main:
            signal.signal(signal.SIGTERM, on_term if on_term is not None else signal.SIG_DFL)
    bar.close()
    record_run(profile, outcomes, time.time() - started, only, started, _children_cpu_s() - cpu_before, speed, skipped)
    claims.rejudge()  # each paper's family Holm-adjusted as it now stands, in every claims.json
    gallery.write()  # after every prune_stale: the gallery and scorecard list only what is left
    if figures_dir().resolve() == (ROOT / "figures").resolve():
        findings.update_readme()
        gallery.update_readme()
    return outcomes + [Outcome(stem, False, 0.0, out_dir / f"{stem}.ipynb", f"{stem}: {why}", skipped=True)
                       for stem, why in skipped.items()]


RUN_SUMMARY = "run.json"
"""``figures/run.json``: the parts of the current code version (one per ``run``, with what it ran
and its wall time) and each notebook's latest time and outcome."""


def study_spans(ends: dict[str, float]) -> dict[str, float]:
    """Per study (the notebook-name prefix before ``_``: bus, tsc), the latest of ``ends``
    (notebook → seconds after the run's start when it finished): how long that study took inside
    the run (run alone, it takes at most about that: the other study only used slots it left free)."""
    spans: dict[str, float] = {}
    for stem, end in ends.items():
        study = stem.split("_", 1)[0]
        spans[study] = max(spans.get(study, 0.0), end)
    return dict(sorted(spans.items()))


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished descendants: the notebooks with
    their kernels and worker processes, each waited for by its parent."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _version_of(summary: dict) -> dict | None:
    """The code version a run summary's parts come from; for a summary written before parts were
    recorded, that of its last run's commit (None where git cannot tell)."""
    if "parts" in summary:
        return summary.get("code_version")
    commit = (summary.get("last_run") or {}).get("commit")
    trees = verify.code_trees(commit) if commit else None
    return None if trees is None else {"id": verify.version_id(trees), "trees": trees, "dirty": False}


def same_version(a: dict | None, b: dict | None) -> bool:
    """Whether two recorded code versions are one (never when either is unknown or dirty)."""
    return bool(a and b and not a.get("dirty") and not b.get("dirty") and a.get("id") == b.get("id"))


def record_run(profile: str, outcomes: list[Outcome], wall_s: float, only: list[str] | None,
               run_start: float, cpu_s: float | None = None, speed: dict[str, float] | None = None,
               skipped: dict[str, str] | None = None) -> Path:
    """Record this run in ``figures/run.json`` as a part of the current code version.

    The parts list what each ``run`` ran and its wall and CPU time, the machine's
    :func:`~llmtraffic.study.provenance.speed_reference` (so that wall times of different days
    compare) and the notebooks skipped for missing data, with why. A run of the same code version
    (:func:`~llmtraffic.study.verify.code_version`) as the recorded parts is appended to them; a
    run of another version, or from uncommitted code, starts a new list. Per notebook: the latest
    time, outcome and commit, and when it started and ended, in seconds after ``run_start``."""
    path = figures_dir() / RUN_SUMMARY
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        summary = {}
    commit = provenance.git_state()["commit"]
    version = verify.code_version()
    parts = gallery.parts(summary) if same_version(version, _version_of(summary)) else []
    notebooks = summary.get("notebooks", {})
    ends = {o.stem: round(o.started + o.seconds - run_start, 1) for o in outcomes}
    for o in outcomes:
        notebooks[o.stem] = {"ok": o.ok, "seconds": round(o.seconds, 1), "profile": profile, "commit": commit,
                             "error": o.error, "start_s": round(o.started - run_start, 1), "end_s": ends[o.stem],
                             "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(o.started + o.seconds))}
    parts.append({
        "profile": profile, "only": only or [], "notebooks": [o.stem for o in outcomes], "commit": commit,
        "dirty": None if version is None else version["dirty"], "wall_s": round(wall_s, 1),
        "jobs_failed": [o.stem for o in outcomes if not o.ok], "skipped": dict(skipped or {}),
        "study_spans_s": study_spans(ends), "cpus": os.cpu_count(), "cpu_s": None if cpu_s is None else round(cpu_s, 1),
        "speed_reference": speed or {},
        "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(run_start + wall_s)),
    })
    summary = {"code_version": version, "parts": parts, "notebooks": dict(sorted(notebooks.items()))}
    return atomic_write_text(path, json.dumps(summary, indent=1) + "\n")
