"""Hostile reward programs, as root and as an unprivileged user (issue 12).

``STATIC``: programs the allowlist refuses, each with its specific reason. ``RUNTIME``: programs
that skip the static checks and go straight to a worker, which must contain them: nothing outside
the run directory changes and the parent survives. `run_suite` runs both; run as a script
(``python test_reward_hostile.py OUTSIDE``) it prints its results as JSON, which is how the
unprivileged run works: the test starts this file as the user nobody.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import pytest

from llmtraffic.bus.reward_design import allowlist, sandbox
from llmtraffic.bus.reward_design.sandbox import (
    RewardError, RewardTimeout, SandboxedReward, Worker, example_transitions, static_check, validate_reward_code,
)

HEAD = "import numpy as np\n\ndef reward(current_state, action, next_state):\n"
ISSUE_ESCAPE = (  # the program of issue 12: a generator's frame reaches the worker's globals
    "def reward(current_state, action, next_state):\n"
    "    box = []\n"
    "    g = (box[0].gi_frame.f_back.f_back.f_globals for _ in [0])\n"
    "    box.append(g)\n"
    "    o = list(g)[0]['os']\n"
    "    o.kill(o.getppid(), 9)\n"
    "    return 0.0\n"
)
# the same walk, through the frame's builtins (always reachable from a frame) to any module
REAL = ("    box = []\n    g = (box[0].gi_frame.f_back.f_back.f_builtins for _ in [0])\n    box.append(g)\n"
        "    imp = list(g)[0]['__import__']\n")

STATIC = {  # name: (code, regex of the reason)
    "frame escape (issue 12)": (ISSUE_ESCAPE, r"attribute 'gi_frame' is not allowed \(frames, tracebacks and code objects"),
    "traceback frame": (HEAD + "    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
                        "        return e.__traceback__.tb_frame.f_back.f_globals\n",
                        r"access to attribute '__traceback__' is not allowed"),
    "traceback frame, no dunder": (HEAD + "    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
                                   "        return e.with_traceback(None).args\n",
                                   r"attribute 'with_traceback' is not allowed \(allowed: the public functions"),
    "coroutine frame": ("async def c():\n    return 1\n\n" + HEAD + "    return c().cr_frame.f_globals\n",
                        r"top-level AsyncFunctionDef statement is not allowed"),
    "async generator frame": ("def reward(s, a, n):\n    async def g():\n        yield 1\n    return g().ag_frame\n",
                              r"async functions are not allowed \(reward must return a number\) \(line 2\)"),
    "generator function": ("def gen():\n    yield 1\n\ndef reward(s, a, n):\n    return gen().gi_frame\n",
                           r"generators \(yield\) are not allowed"),
    "code object": (HEAD + "    return (x for x in []).gi_code.co_consts\n",
                    r"attribute 'gi_code' is not allowed \(frames, tracebacks and code objects"),
    "code object by dunder": (HEAD + "    return reward.__code__.co_consts\n", r"access to attribute '__code__'"),
    "vars with a built name": (HEAD + "    vars(np)['sa' + 've']('SENTINEL', current_state)\n    return 0.0\n",
                               r"use of 'vars' is not allowed \(builtins available: ArithmeticError,"),
    "getattr with a built name": (HEAD + "    getattr(np, ''.join(['lo', 'ad']))\n    return 0.0\n",
                                  r"use of 'getattr' is not allowed"),
    "operator.attrgetter": ("from operator import attrgetter\n" + HEAD + "    return attrgetter('ma')(np)\n",
                            r"import of 'operator' is not allowed \(only math, numpy, numpy.linalg and typing\) \(line 1\)"),
    "str.format field access": (HEAD + "    return '{0.__class__.__base__}'.format(current_state)\n",
                                r"attribute 'format' is not allowed \(string formatting can read attributes\)"),
    "f-string": (HEAD + "    return f'{current_state!r}'\n", r"f-strings are not allowed"),
    "numpy reaching builtins": (HEAD + "    np.ma.core.builtins.exec('open(\"SENTINEL\", \"w\")')\n    return 0.0\n",
                                r"attribute 'ma' is not allowed: masked arrays are not available in rewards; use np.where"),
    "numpy core internals": (HEAD + "    return np.core.multiarray.array(1.0)\n", r"attribute 'core' is not allowed \(file or system access\)"),
    "numpy lib": (HEAD + "    return np.lib.npyio.os\n", r"attribute 'lib' is not allowed \(file or system access\)"),
    "np.random": (HEAD + "    return float(np.random.rand())\n",
                  r"attribute 'random' is not allowed: a reward must be deterministic"),
    "import numpy.random": ("import numpy.random\n" + HEAD + "    return 0.0\n",
                            r"import of 'numpy.random' is not allowed: a reward must be deterministic"),
    "np.fft": (HEAD + "    return float(np.fft.fft(current_state)[0].real)\n",
               r"attribute 'fft' is not allowed: numpy.fft is not available in rewards"),
    "np.polynomial": (HEAD + "    return float(np.polynomial.polynomial.polyval(1.0, [1.0]))\n",
                      r"attribute 'polynomial' is not allowed: .*use np.polyval or np.polyfit"),
    "pickle import": ("import pickle\n" + HEAD + "    return 0.0\n", r"import of 'pickle' is not allowed"),
    "pickle via ndarray.dumps": (HEAD + "    return len(current_state.dumps())\n",
                                 r"attribute 'dumps' is not allowed \(file or system access\)"),
    "from numpy import load": ("from numpy import load\n" + HEAD + "    return 0.0\n",
                               r"import of numpy.load is not allowed"),
    "signal handler": ("import signal\n" + HEAD + "    return 0.0\n", r"import of 'signal' is not allowed"),
    "thread": ("from _thread import start_new_thread\n" + HEAD + "    return 0.0\n", r"import of '_thread' is not allowed"),
    "mutable default argument": ("def reward(current_state, action, next_state, memo=[]):\n"
                                 "    memo.append(1)\n    return float(len(memo))\n",
                                 r"default argument '\[\]' of function 'reward' is not allowed: defaults must be constants"),
    "mutable lambda default": (HEAD + "    f = lambda x, seen={}: seen.setdefault(x, len(seen))\n    return float(f(action))\n",
                               r"default argument '\{\}' of lambda is not allowed"),
    "state on the function": (HEAD + "    reward.calls = 1\n    return 0.0\n",
                              r"assigning to attribute 'calls' is not allowed \(the reward must be pure\)"),
    "__builtins__": (HEAD + "    return __builtins__['open']('SENTINEL', 'w')\n", r"use of '__builtins__' is not allowed \(no dunder names\)"),
    "decorator": ("def deco(f):\n    return f\n\n@deco\ndef reward(s, a, n):\n    return 0.0\n", r"decorators are not allowed"),
    "numpy global state": (HEAD + "    np.seterr(all='ignore')\n    return 0.0\n", r"attribute 'seterr' is not allowed"),
    "with block": (HEAD + "    with np.errstate(all='ignore'):\n        return 0.0\n", r"'with' blocks are not allowed"),
    "breakpoint": (HEAD + "    breakpoint()\n    return 0.0\n", r"use of 'breakpoint' is not allowed"),
}

RUNTIME = {  # name: (code reaching the worker without static checks, regex of the outcome or None)
    "frame escape (issue 12)": (ISSUE_ESCAPE, r"reward raised KeyError: 'os'"),
    "kill the parent": ("def reward(s, a, n):\n" + REAL + "    o = imp('os')\n    o.kill(o.getppid(), 9)\n    return 0.0\n",
                        r"reward raised PermissionError: \[Errno 1\] Operation not permitted"),
    "write outside": ("def reward(s, a, n):\n" + REAL + "    o = imp('os')\n"
                      "    fd = o.open('SENTINEL', o.O_WRONLY | o.O_CREAT)\n    return float(fd)\n",
                      r"reward raised PermissionError: \[Errno 1\] Operation not permitted"),
    "open outside": ("def reward(s, a, n):\n    box = []\n    g = (box[0].gi_frame.f_back.f_back.f_builtins['open']('SENTINEL', 'w')"
                     " for _ in [0])\n    box.append(g)\n    list(g)\n    return 0.0\n",
                     r"reward raised PermissionError: \[Errno 1\] Operation not permitted: '.*pwned'"),
    "shell command": ("def reward(s, a, n):\n" + REAL + "    return float(imp('os').system('/usr/bin/touch SENTINEL'))\n", None),
    "fork": ("def reward(s, a, n):\n" + REAL + "    imp('os').fork()\n    return 0.0\n",
             r"reward raised PermissionError: \[Errno 1\] Operation not permitted"),
    "thread": ("def reward(s, a, n):\n" + REAL + "    imp('_thread').start_new_thread(abs, (1,))\n    return 0.0\n",
               r"reward raised RuntimeError: can't start new thread"),
    "signal handler": ("def reward(s, a, n):\n" + REAL + "    sig = imp('_signal')\n    sig.signal(sig.SIGXCPU, sig.SIG_IGN)\n"
                       "    return 0.0\n", r"reward raised (PermissionError|OSError): \[Errno 1\] Operation not permitted"),
    "numpy reaching builtins": ("import numpy as np\ndef reward(s, a, n):\n"
                                "    np.ma.core.builtins.open('SENTINEL', 'w')\n    return 0.0\n",
                                r"reward raised \w+Error: .*(Operation not permitted|No module named)"),
    "pickle payload": ("def reward(s, a, n):\n" + REAL +
                       "    return float(imp('pickle').loads(b\"cos\\nsystem\\n(S'/usr/bin/touch SENTINEL'\\ntR.\"))\n",
                       None),
    "corrupt the reply pipe": ("def reward(s, a, n):\n" + REAL + "    imp('os').write(3, b'\\xff\\xff\\xff\\x7f')\n"
                               "    return 0.0\n", r"announced a 2147483647-byte reply while evaluating 1 transitions"),
    "raise the file-descriptor limit": ("def reward(s, a, n):\n" + REAL + "    r = imp('resource')\n"
                            "    r.setrlimit(r.RLIMIT_NOFILE, (64, 64))\n    return 0.0\n",
                            r"reward raised (ValueError|PermissionError|OSError)"),
}


def snapshot(root: Path) -> dict[str, int]:
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns for d, _, files in os.walk(root) for f in files}


def run_suite(outside: Path) -> dict[str, dict]:
    """Every program of `STATIC` through `validate_reward_code` and of `RUNTIME` straight through a
    `Worker`: its outcome, seconds, whether anything in `outside` changed, and the worker's uid."""
    sentinel = outside / "pwned"
    results: dict[str, dict] = {}
    run_dir = Path(tempfile.mkdtemp(prefix="hostile-run-"))
    states = np.array([[1776, 1776, 0, 0, 20, 0.0]])
    try:
        for kind, programs in (("static", STATIC), ("runtime", RUNTIME)):
            for name, (code, _) in programs.items():
                before = snapshot(outside)
                code = code.replace("SENTINEL", str(sentinel))
                start = time.perf_counter()
                confined = None
                if kind == "static":
                    outcome = validate_reward_code(code, timeout_s=2, memory_mb=256, run_dir=run_dir).reason
                else:
                    try:
                        worker = Worker(code, run_dir, memory_mb=256, timeout_s=5)
                        confined = worker.confined
                        try:
                            outcome = str(worker.evaluate(states, np.array([1]), states, timeout_s=5).tolist())
                        finally:
                            worker.close()
                    except (RewardError, RewardTimeout) as error:
                        outcome = str(error)
                seconds = round(time.perf_counter() - start, 3)
                time.sleep(0.05 if kind == "static" else 0.2)  # a shell, had one started, is done by now
                results[f"{kind}: {name}"] = {
                    "outcome": outcome, "seconds": seconds, "confined": confined,
                    "outside_changed": snapshot(outside) != before or sentinel.exists(),
                    "run_dir_left": sorted(p.name for p in run_dir.iterdir()),
                }
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


def check_results(results: dict[str, dict]) -> None:
    for kind, programs in (("static", STATIC), ("runtime", RUNTIME)):
        for name, (_, expected) in programs.items():
            got = results[f"{kind}: {name}"]
            assert not got["outside_changed"], (kind, name, got)
            assert got["run_dir_left"] == [], (kind, name, got)
            assert expected is None or re.search(expected, got["outcome"]), (kind, name, got["outcome"])
            if kind == "runtime" and sys.platform == "linux" and os.uname().machine == "x86_64":
                assert got["confined"], (name, "seccomp was not in force")


@pytest.fixture
def outside():
    """A directory outside the run directory that anyone may write to: only the sandbox keeps
    the programs out of it (also when the test itself runs as nobody)."""
    root = Path(tempfile.mkdtemp(prefix="hostile-outside-"))
    root.chmod(0o777)
    (root / "keep.txt").write_text("unchanged")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_at_least_fifteen_new_hostile_programs():
    assert len(STATIC) >= 15 and len(RUNTIME) >= 10


def test_hostile_programs_as_this_user(outside):
    """Every static program is refused with its reason; every runtime one is contained: nothing
    outside the run directory changes and this process (the parent) lives on."""
    check_results(run_suite(outside))
    assert (outside / "keep.txt").read_text() == "unchanged"


NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"]


def nobody_may_run(setpriv: str, exe: str) -> bool:
    # asked through a shell: setpriv itself keeps root's capabilities until it execs
    return subprocess.run([setpriv, *NOBODY, "/bin/sh", "-c", 'test -x "$0" && test -r "$0"', exe]).returncode == 0


def interpreter_for_nobody(setpriv: str, folder: Path) -> str | None:
    """This interpreter if nobody may run it; else a virtual environment on the system's
    interpreter of the same version that reads this one's packages (a .pth file); else None."""
    if nobody_may_run(setpriv, sys.executable):
        return sys.executable
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = f"/usr/bin/python{version}"
    if not os.path.exists(base) or not nobody_may_run(setpriv, base):
        return None
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    site = folder / "venv" / "lib" / f"python{version}" / "site-packages"
    (site / "packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(folder / "venv" / "bin" / "python")


def test_hostile_programs_as_an_unprivileged_user(outside):
    """The same suite with the parent itself running as nobody: the worker's uid switch does not
    apply, so the kill-the-parent program meets only the seccomp filter and the limits."""
    if os.geteuid() != 0:
        pytest.skip("this test already runs unprivileged: test_hostile_programs_as_this_user is that run")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv here to drop to the user nobody")
    python = interpreter_for_nobody(setpriv, outside)
    if python is None:
        pytest.skip(f"the user nobody can run neither {sys.executable} nor a system python of this version")
    lib = Path(sandbox.__file__).parents[3]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{lib}{os.pathsep}{Path(__file__).parent}",
           "HOME": str(outside), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([setpriv, *NOBODY, python, __file__, str(outside)],
                          capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert results.pop("uid") == 65534
    check_results(results)
    shutil.rmtree(outside / "venv", ignore_errors=True)


def test_the_allowed_surface_works_in_the_worker():
    """Everything a reward may use loads in the worker (nothing is imported lazily after the
    limits, which once made np.random fail with 'Too many open files')."""
    typed = ("from typing import List, Optional\nimport numpy.linalg as la\nfrom math import sqrt\n\n"
             "def reward(current_state: List[float], action: int, next_state: Optional[np.ndarray] = None) -> float:\n"
             "    return float(la.norm(next_state[:2]) / 1e4 + sqrt(4.0))\n")
    assert validate_reward_code("import numpy as np\n" + typed).ok
    code = HEAD + (
        "    s = np.asarray(next_state)\n"
        "    v = np.linalg.norm(s[:2]) + np.polyval([1.0, 0.0], 2.0) + np.median(s) + np.percentile(s, 50)\n"
        "    v += float(np.clip(np.tanh(s[0] / 1000.0), -1, 1)) + np.interp(1.0, [0.0, 2.0], [0.0, 1.0])\n"
        "    v += np.unique(s).size + np.quantile(s, 0.9) + np.nanmedian(s) + np.histogram(s)[0][0]\n"
        "    return float(v / 1e4)\n"
    )
    assert validate_reward_code(code).ok
    # ndarray methods numpy implements in Python import numpy._core._methods at their first call
    methods = HEAD + ("    a = np.array(next_state) / 1e4\n"
                      "    v = a.all() + a.any() + a.max() + a.min() + a.mean() + a.prod() + a.std() + a.sum() + a.var()\n"
                      "    return float(v + a.clip(0.0, 1.0).sum() + np.eye(2).trace())\n")
    assert validate_reward_code(methods) == (True, "ok")
    for attr in sorted(allowlist.NUMPY):
        assert hasattr(np, attr), f"numpy {np.__version__} has no {attr}: drop it from the allowlist"
    for attr in sorted(allowlist.LINALG):
        assert hasattr(np.linalg, attr)


FORBIDDEN_CALLABLES = allowlist.SYSTEM | {"exec", "eval", "compile", "open", "__import__", "getattr", "vars",
                                          "globals", "locals", "fromfile", "memmap", "kill", "fork"}


def reward_roots() -> list:
    """What reward code starts from: modules, arguments, literals, builtins, and the objects its
    own syntax makes (a generator expression, a lambda, an exception, iterators)."""
    import builtins
    import math
    import typing

    made = [(x for x in []), lambda: 0, ValueError("x"), {}.items(), range(3), iter([1]), zip(), slice(1),
            np.zeros(3).dtype]
    return [np, np.linalg, math, typing, np.zeros(3), np.float64(1.0), np.int64(1), [1.0], {"a": 1}, 1.0, 1, "x",
            True, None, *made, *(getattr(builtins, n) for n in allowlist.BUILTINS)]


def test_no_allowed_attribute_chain_reaches_a_module_frame_or_file_function():
    """Walk the attribute graph from everything a reward starts with, following only allowed
    names, three steps deep: no module but math, numpy, numpy.linalg and typing, no frame, code
    object, traceback or generator, and no function that opens, loads, runs code or signals."""
    allowed_modules = {"math", "numpy", "numpy.linalg", "typing"}
    seen, frontier = set(), [(r, type(r).__name__) for r in reward_roots()]
    for _ in range(3):
        nxt = []
        for obj, path in frontier:
            for attr in allowlist.ATTRIBUTES:
                try:
                    value = getattr(obj, attr)
                except Exception:
                    continue
                if id(value) in seen:
                    continue
                seen.add(id(value))
                where = f"{path}.{attr}"
                if isinstance(value, types.ModuleType):
                    assert value.__name__ in allowed_modules, where
                assert not isinstance(value, (types.FrameType, types.CodeType, types.TracebackType,
                                              types.GeneratorType, types.CoroutineType)), where
                assert not (callable(value) and getattr(value, "__name__", None) in FORBIDDEN_CALLABLES), where
                nxt.append((value, where))
        frontier = nxt


@pytest.mark.parametrize("extra", ["ma", "core", "gi_frame", "gi_code", "load", "tofile"])
def test_the_walk_finds_what_one_more_allowed_name_would_open(monkeypatch, extra):
    monkeypatch.setattr(allowlist, "ATTRIBUTES", allowlist.ATTRIBUTES | {extra})
    with pytest.raises(AssertionError, match=rf"\.{extra}"):
        test_no_allowed_attribute_chain_reaches_a_module_frame_or_file_function()


def test_module_level_state_does_not_survive_a_call(tmp_path):
    """A list at module level that the reward appends to: the static check refuses it, and sent
    straight to a worker it still keeps nothing, since every call runs in a fresh namespace."""
    code = "SEEN = []\n\ndef reward(current_state, action, next_state):\n    SEEN.append(action)\n" \
           "    return float(len(SEEN))\n"
    assert re.search(r"the mutating method 'SEEN.append' changes 'SEEN', bound at module level", static_check(code).reason)
    s, a, n = example_transitions()[0]
    worker = Worker(code, tmp_path)
    try:
        assert [worker.evaluate(s[None], np.array([a]), n[None], 5)[0] for _ in range(5)] == [1.0] * 5
        assert worker.evaluate(np.array([s] * 4), np.array([a] * 4), np.array([n] * 4), 5).tolist() == [1.0] * 4
    finally:
        worker.close()


def test_mutable_default_does_not_grow_even_past_the_static_check(tmp_path):
    """The issue's memo=[] reward, sent straight to a worker: its output no longer grows."""
    code = "def reward(current_state, action, next_state, memo=[]):\n    memo.append(1)\n    return float(len(memo))\n"
    states = np.array([s for s, _, _ in example_transitions()])
    worker = Worker(code, tmp_path)
    try:
        first = worker.evaluate(states, np.zeros(len(states), np.int64), states, 5).tolist()
        again = worker.evaluate(states, np.zeros(len(states), np.int64), states, 5).tolist()
    finally:
        worker.close()
    assert first == again == [1.0] * len(states)


if __name__ == "__main__":  # the unprivileged run: results as one JSON line
    out = run_suite(Path(sys.argv[1]))
    print(json.dumps({**out, "uid": os.getuid()}))
