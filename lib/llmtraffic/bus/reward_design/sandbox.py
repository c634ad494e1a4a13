"""Safe handling of LLM-generated reward code (bus paper §4.2: rewards are generated as Python).

Generated code is data until it passes two checks, and even then it never runs in the
notebook's process:

1. `static_check`: the AST must define ``reward(current_state, action, next_state)`` and use
   only what ``allowlist.py`` lists: its syntax, builtins, attributes and modules (``math``,
   ``numpy``, ``numpy.linalg``), with constant default arguments, and it may change only values
   it creates inside the call (``purity.py``). Anything else is refused with a reason the
   designer can act on.
2. `validate_reward_code` then runs the function on recorded (or example) transitions in a
   separate process (``worker.py``: resource limits, no new file descriptors or processes, the
   user nobody when root, a seccomp system-call allowlist, a fresh namespace per call) under a
   wall-clock timeout, and requires a finite number with \\|r\\| <= 1e3 for every transition.
   In the same worker it then evaluates the batch a second time and once more in reversed
   order (`purity_reason`), and requires identical values for every transition.

Which check catches what state a reward could keep between calls (a reward is a function of
``(current_state, action, next_state)``, bus paper §3.3):

- the allowlist: ``global``/``nonlocal``, classes, generator functions, mutable default
  arguments, attribute stores and ``setattr``/``delattr``; randomness and clocks (``random``,
  ``time``, ``np.random`` cannot be imported or reached) and ``id``/``hash`` (not builtins);
- the purity rule: changing a module-level name (directly, through an alias or a helper's
  argument), an argument, a captured variable or anything a subscript reaches, numpy ``out=``
  into such a value, and iterators kept at module level or captured;
- the worker's fresh namespace per call: module-level values of code that skipped the static
  checks are rebuilt for every transition, so they keep nothing;
- the behavioural check, the net for state outside the code's namespace (the worker's own
  globals or a module reached through an escape, a clock, a random generator): the same batch
  twice catches results that change from call to call (counters, clocks, random draws, a
  cache that changes the value); the reversed batch, compared after undoing the order, catches
  results that depend on the order or position of a transition in the batch (the previous
  transition, the index).
- Not caught: state that never changes the returned values on the validation transitions,
  state that shows only after more calls than the check makes, and differences between worker
  processes (e.g. the hash-seeded iteration order of a set of strings).

`SandboxedReward` is how training calls a validated reward: a long-lived worker process
answers each call (or a batch of transitions per call), a call that takes longer than the
timeout kills the worker and raises `RewardTimeout`, and the next call starts a new one. Every
value it returns is held to the same bound (`RewardFunctionError` otherwise): a reward that
validated on a few transitions may still blow up on states met only in training.
"""

from __future__ import annotations

import ast
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...rl.checks import RewardFunctionError
from .allowlist import check_tree

REWARD_ARGS = ("current_state", "action", "next_state")
TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign)
"""Statements allowed outside functions (plus a docstring)."""
STARTUP_S = 60.0
"""Time a worker may take to start (Python, numpy, limits) before the code's own limit applies;
generous because a loaded machine can take seconds."""
REPLY_LIMIT = 1 << 20
"""Largest reply accepted from a worker that is not a batch of rewards (an error message)."""
BOUND = 1e3
"""Largest allowed |reward| (the prompts ask for rewards without extreme values, App. A.2)."""


class RewardCheck(NamedTuple):
    """Verdict on one reward program; unpacks as ``ok, reason``."""

    ok: bool
    reason: str
    """Why it was rejected (sent back to the LLM), or ``"ok"``."""


class RewardTimeout(RuntimeError):
    """The reward did not answer in time; its worker process was killed."""


class RewardError(RuntimeError):
    """The reward raised, returned a non-number, or its worker died."""


def static_check(code: str) -> RewardCheck:
    """Syntax, the ``reward`` signature and the allowlist of ``allowlist.py``."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return RewardCheck(False, f"syntax error at line {error.lineno}: {error.msg}")
    for statement in tree.body:
        docstring = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        if not isinstance(statement, TOP_LEVEL) and not docstring:
            return RewardCheck(False, f"top-level {type(statement).__name__} statement is not allowed "
                                      "(only imports, functions and constants)")
    reason = check_tree(tree)
    if reason:
        return RewardCheck(False, reason)
    rewards = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "reward"]
    if not rewards:
        return RewardCheck(False, "no function reward(current_state, action, next_state) is defined")
    args = rewards[-1].args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults)
    if args.vararg or args.kwonlyargs and not all(args.kw_defaults) or not required <= 3 <= len(positional):
        return RewardCheck(False, f"reward must take 3 arguments (current_state, action, next_state), "
                                  f"got ({', '.join(positional)})")
    return RewardCheck(True, "ok")


def bound_reason(value: float, where: str) -> str | None:
    """Why one reward value (returned for the transition `where`) is unusable, else None."""
    if not np.isfinite(value):
        return f"reward returned {value} for {where}; it must be finite"
    if abs(value) > BOUND:
        return f"reward returned {value:.4g} for {where}, outside [-{BOUND:g}, {BOUND:g}]: avoid extreme reward values"
    return None


def example_transitions(state_dim: int = 6) -> list[tuple[np.ndarray, int, np.ndarray]]:
    """Hand-made transitions covering the §3.2 state space, used when none were recorded.

    State: forward/backward space headway on the same line (m), the same on the other line (0 at
    a stop no other line serves), onboard passengers, elapsed holding (s). Holding moves the bus
    ahead 5 s × 5.55 m/s ≈ 28 m away (App. A.5). Covers single-line and shared stops, hold and
    release, an empty bus, the 90-s cap and a bunched pair with a zero headway. ``state_dim`` 3
    keeps entries 0, 1, 4 (case 1's state of App. A.5).
    """
    rows = [
        ([1776, 1776, 0, 0, 20, 0], 1, [1804, 1748, 0, 0, 20, 5]),
        ([1776, 1776, 0, 0, 20, 0], 0, [1776, 1776, 0, 0, 20, 0]),
        ([300, 3252, 0, 0, 45, 10], 0, [300, 3252, 0, 0, 45, 0]),
        ([3252, 300, 0, 0, 0, 0], 1, [3280, 272, 0, 0, 0, 5]),
        ([1500, 2100, 800, 1200, 30, 5], 1, [1528, 2072, 828, 1172, 30, 10]),
        ([2100, 1500, 1200, 800, 12, 85], 1, [2128, 1472, 1228, 772, 12, 90]),
        ([0, 3552, 0, 0, 60, 0], 1, [28, 3524, 0, 0, 60, 5]),
        ([2400, 900, 600, 0, 70, 40], 0, [2400, 900, 600, 0, 70, 0]),
    ]
    keep = list(range(6)) if state_dim == 6 else [0, 1, 4]
    if state_dim not in (3, 6):
        raise ValueError(f"state_dim must be 3 or 6, got {state_dim}")
    return [(np.array(s, float)[keep], a, np.array(n, float)[keep]) for s, a, n in rows]


def _arrays(transitions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States, actions, next states from (state, action, next_state) tuples or env Transitions."""
    triples = [(t.state, t.action, t.next_state) if hasattr(t, "next_state") else t for t in transitions]
    if not triples:
        raise ValueError("transitions is empty")
    states = np.array([np.asarray(s, float) for s, _, _ in triples])
    next_states = np.array([np.asarray(n, float) for _, _, n in triples])
    if states.ndim != 2 or states.shape != next_states.shape:
        raise ValueError(f"transitions: states {states.shape} and next states {next_states.shape} must be (n, dim)")
    return states, np.array([int(a) for _, a, _ in triples], np.int64), next_states


class Worker:
    """One child process running ``worker.py`` on `code`, in `run_dir`, with limits.

    No static check here: callers check first (`validate_reward_code`, `SandboxedReward`).
    ``confined`` says whether the worker's seccomp system-call allowlist is in force.
    """

    def __init__(self, code: str, run_dir: str | os.PathLike, memory_mb: int = 512, cpu_s: int = 0,
                 timeout_s: float = 5.0):
        script = Path(__file__).with_name("worker.py")
        env = {"PATH": "", "HOME": str(run_dir), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        # -I: ignore PYTHON* variables and the user site; -B: write no bytecode anywhere
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-B", str(script), str(memory_mb), str(cpu_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=run_dir, env=env, start_new_session=True,
        )
        try:
            self.confined = self._reply(STARTUP_S, "starting the worker", 1) == b"S"
            self._send(code.encode())
            self._reply(timeout_s, "loading the code", 0)
        except (RewardError, RewardTimeout):  # the code failed to load: reap the child before reporting
            self.close()
            raise

    def evaluate(self, states: np.ndarray, actions: np.ndarray, next_states: np.ndarray, timeout_s: float) -> np.ndarray:
        n, dim = states.shape
        payload = struct.pack("<ii", n, dim) + states.astype(np.float64).tobytes() + \
            actions.astype(np.int64).tobytes() + next_states.astype(np.float64).tobytes()
        self._send(payload)
        reply = self._reply(timeout_s, f"evaluating {n} transitions", 8 * n)
        if len(reply) != 8 * n:
            self.close()
            raise RewardError(f"the reward worker sent {len(reply)} bytes for {n} rewards; it was killed")
        return np.frombuffer(reply, np.float64)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()

    def _send(self, payload: bytes) -> None:
        try:
            self.process.stdin.write(struct.pack("<I", len(payload)) + payload)
            self.process.stdin.flush()
        except BrokenPipeError:
            self._died("receiving a request")

    def _reply(self, timeout_s: float, doing: str, size: int) -> bytes:
        """The payload of the next frame; `size` (bytes expected on success) caps what is read."""
        deadline = time.monotonic() + timeout_s
        doing = f"{doing} (limit {timeout_s:g} s)"
        head = self._read(4, deadline, doing)
        length = struct.unpack("<I", head)[0]
        if length > max(size + 1, REPLY_LIMIT):  # a worker the code has taken over
            self.close()
            raise RewardError(f"the reward worker announced a {length}-byte reply while {doing}; it was killed")
        body = self._read(length, deadline, doing)
        if body[:1] != b"\0":
            raise RewardError(body[1:].decode(errors="replace"))
        return body[1:]

    def _read(self, size: int, deadline: float, doing: str) -> bytes:
        data = b""
        fd = self.process.stdout.fileno()
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise RewardTimeout(f"timed out while {doing}: an infinite or very slow loop? "
                                    "The worker was killed")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                self._died(doing)
            data += chunk
        return data

    def _died(self, doing: str):
        code = self.process.wait()
        name = signal.Signals(-code).name if code < 0 else f"exit code {code}"
        hint = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed, possibly for memory)",
                "SIGSEGV": " (memory limit?)"}.get(name, "")
        self.close()
        raise RewardError(f"the reward worker died with {name}{hint} while {doing}")


def validate_reward_code(code: str, timeout_s: float = 5.0, transitions=None, memory_mb: int = 512,
                         run_dir: str | os.PathLike | None = None) -> RewardCheck:
    """Check generated reward code before any training (bus paper §4.2; see the module docstring).

    `transitions`: (state, action, next_state) tuples or env ``Transition``s, e.g. recorded in
    the previous iteration; default `example_transitions` for 6-value states. The code runs in
    `run_dir` (default: a fresh temporary directory, removed afterwards) with `timeout_s` of
    wall clock for each of the three evaluations of the batch (`purity_reason`), as much CPU time
    for the three together, and `memory_mb` of memory.
    """
    check = static_check(code)
    if not check.ok:
        return check
    states, actions, next_states = _arrays(example_transitions() if transitions is None else transitions)
    with tempfile.TemporaryDirectory(prefix="reward-") as scratch:
        worker = None
        try:
            worker = Worker(code, run_dir or scratch, memory_mb, cpu_s=int(3 * timeout_s) + 1, timeout_s=timeout_s)
            values = worker.evaluate(states, actions, next_states, timeout_s)
            for i, value in enumerate(values):
                reason = bound_reason(value, f"transition {i} (current_state {states[i].tolist()}, action {actions[i]})")
                if reason:
                    return RewardCheck(False, reason)
            reason = purity_reason(worker, states, actions, next_states, values, timeout_s)
        except (RewardError, RewardTimeout) as error:
            return RewardCheck(False, str(error))
        finally:
            if worker is not None:
                worker.close()
    return RewardCheck(False, reason) if reason else RewardCheck(True, "ok")


def purity_reason(worker: Worker, states: np.ndarray, actions: np.ndarray, next_states: np.ndarray,
                  values: np.ndarray, timeout_s: float) -> str | None:
    """The behavioural purity check: why the reward is not a function of its arguments, else None.

    `values` are what `worker` returned for the batch. The same worker evaluates the batch again
    (the same-batch check) and in reversed order (the permutation check, compared after undoing
    the order); any value that differs in any bit rejects the reward. Pure code gives identical
    bits: the same operations on the same inputs in the same process."""
    checks = [("same-batch check", "evaluated a second time on the same transitions", np.arange(len(values)))]
    if len(values) > 1:
        checks.append(("permutation check", "evaluated on the same transitions in reversed order",
                       np.arange(len(values))[::-1]))
    for name, how, order in checks:
        try:
            again = np.empty_like(values)
            again[order] = worker.evaluate(states[order], actions[order], next_states[order], timeout_s)
        except (RewardError, RewardTimeout) as error:
            raise type(error)(f"{how} ({name}): {error}") from error
        differ = np.flatnonzero(again.view(np.int64) != values.view(np.int64))
        if differ.size:
            i = differ[0]
            return (f"the reward is not a function of (current_state, action, next_state) ({name}): {how} in one "
                    f"worker, it returned {float(again[i])!r} instead of {float(values[i])!r} for transition {i} "
                    f"(current_state {states[i].tolist()}, action {int(actions[i])}); it must keep no state between calls (no counters, "
                    "caches, clocks or random numbers) and not depend on the order of the calls")
    return None


class SandboxedReward:
    """A validated reward, callable like a hand-written one but evaluated in a worker process.

    ``reward(current_state, action, next_state) -> float`` answers one transition;
    ``reward.batch(states, actions, next_states) -> ndarray`` answers many per round trip
    (use it where transitions come in batches: one IPC round trip costs tens of µs). A call
    that exceeds `timeout_s` kills the worker and raises `RewardTimeout`; the next call starts
    a new worker. A value that is not finite or beyond ±`BOUND` raises `RewardFunctionError`
    naming the transition. Use as a context manager, or call `close`.
    """

    def __init__(self, code: str, timeout_s: float = 5.0, memory_mb: int = 512,
                 run_dir: str | os.PathLike | None = None):
        self._worker: Worker | None = None
        self._scratch = None
        check = static_check(code)
        if not check.ok:
            raise ValueError(f"reward code rejected: {check.reason}")
        self.code, self.timeout_s, self.memory_mb = code, timeout_s, memory_mb
        self._scratch = None if run_dir else tempfile.TemporaryDirectory(prefix="reward-")
        self.run_dir = Path(run_dir or self._scratch.name)

    def __call__(self, current_state, action, next_state) -> float:
        state = np.asarray(current_state, float)[None]
        return float(self.batch(state, np.array([action]), np.asarray(next_state, float)[None])[0])

    def batch(self, states, actions, next_states) -> np.ndarray:
        states, next_states = np.atleast_2d(states), np.atleast_2d(next_states)
        if self._worker is None or self._worker.process.poll() is not None:
            self._worker = Worker(self.code, self.run_dir, self.memory_mb, timeout_s=self.timeout_s)
        actions = np.atleast_1d(np.asarray(actions))
        try:
            values = self._worker.evaluate(states, actions, next_states, self.timeout_s)
        except RewardTimeout:
            self._worker = None  # killed by Worker; the next call starts afresh
            raise
        bad = np.flatnonzero(~(np.abs(values) <= BOUND))  # NaN fails the comparison too
        if bad.size:
            i = bad[0]
            raise RewardFunctionError(bound_reason(values[i], f"current_state {states[i].tolist()}, action "
                                                              f"{int(actions[i])}, next_state {next_states[i].tolist()}"))
        return values

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._scratch is not None:
            self._scratch.cleanup()

    def __enter__(self) -> "SandboxedReward":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()
