"""Generated reward code: static checks, the sandboxed run, and a suite of hostile programs."""

import os
import re
import time

import numpy as np
import pytest

from llmtraffic.bus.reward_design.sandbox import (
    RewardError, RewardTimeout, SandboxedReward, Worker, example_transitions, static_check,
    validate_reward_code,
)

GOOD = '''
import math
import numpy as np

def balance(forward, backward):
    """Headway imbalance in [0, 1]."""
    total = forward + backward
    return abs(forward - backward) / total if total > 0 else 0.0

def reward(current_state, action, next_state):
    # penalise imbalance after the step, and each 5-s hold a little
    return -10.0 * balance(next_state[0], next_state[1]) - 0.5 * action + 0.0 * math.pi + float(np.sum([0.0]))
'''

HOSTILE = {  # name: (code, a regex the reason must match); SENTINEL is a path outside the run dir
    "infinite loop": ("def reward(s, a, n):\n    while True:\n        pass\n",
                      r"timed out while evaluating 8 transitions \(limit 1 s\): an infinite or very slow loop"),
    "slow loop": ("def reward(s, a, n):\n    t = 0\n    for i in range(10**10):\n        t += i\n    return 0.0\n",
                  r"timed out while evaluating"),
    "huge list": ("def reward(s, a, n):\n    x = [1.0] * (10**9)\n    return 0.0\n",
                  r"MemoryError: the code exceeded the memory limit of 256 MiB"),
    "huge array": ("import numpy as np\ndef reward(s, a, n):\n    return float(np.ones((30000, 30000)).sum())\n",
                   r"MemoryError: the code exceeded the memory limit"),
    "os.system": ("import os\ndef reward(s, a, n):\n    os.system('touch SENTINEL')\n    return 0.0\n",
                  r"import of 'os' is not allowed \(only math, numpy, numpy.linalg and typing\) \(line 1\)"),
    "open": ("def reward(s, a, n):\n    open('SENTINEL', 'w').write('x')\n    return 0.0\n",
             r"use of 'open' is not allowed"),
    "import socket": ("import socket\ndef reward(s, a, n):\n    return 0.0\n", r"import of 'socket' is not allowed"),
    "from subprocess": ("from subprocess import run\ndef reward(s, a, n):\n    return 0.0\n",
                        r"import of 'subprocess' is not allowed"),
    "__import__": ("def reward(s, a, n):\n    __import__('os').system('touch SENTINEL')\n    return 0.0\n",
                   r"use of '__import__' is not allowed"),
    "__subclasses__": (
        "def reward(s, a, n):\n"
        "    for c in ().__class__.__bases__[0].__subclasses__():\n"
        "        if c.__name__ == '_wrap_close':\n"
        "            c.__init__.__globals__['system']('touch SENTINEL')\n"
        "    return 0.0\n",
        r"access to attribute '__class__' is not allowed"),
    "getattr": ("import numpy as np\ndef reward(s, a, n):\n    getattr(np, 'sa' + 've')('SENTINEL', s)\n    return 0.0\n",
                r"use of 'getattr' is not allowed"),
    "eval": ("def reward(s, a, n):\n    return eval('1.0')\n", r"use of 'eval' is not allowed"),
    "exec": ("def reward(s, a, n):\n    exec('x = 1')\n    return 0.0\n", r"use of 'exec' is not allowed"),
    "numpy save": ("import numpy as np\ndef reward(s, a, n):\n    np.save('SENTINEL', s)\n    return 0.0\n",
                   r"attribute 'save' is not allowed \(file or system access\)"),
    "numpy submodule": ("import numpy.f2py\ndef reward(s, a, n):\n    return 0.0\n",
                        r"import of 'numpy.f2py' is not allowed \(only math, numpy, numpy.linalg and typing\)"),
    "star import": ("from numpy import *\ndef reward(s, a, n):\n    return 0.0\n", r"'from numpy import \*' is not allowed"),
    "type trick": ("def reward(s, a, n):\n    return len(type.mro(type))\n", r"use of 'type' is not allowed"),
    "global state": ("calls = 0\ndef reward(s, a, n):\n    global calls\n    calls += 1\n    return float(calls)\n",
                     r"'global' statements are not allowed \(the reward must be pure\)"),
    "top-level loop": ("while True:\n    pass\ndef reward(s, a, n):\n    return 0.0\n",
                       r"top-level While statement is not allowed"),
    "nested class": ("def reward(s, a, n):\n    class R:\n        pass\n    return 0.0\n",
                     r"class definitions are not allowed"),
    "class": ("class R:\n    pass\ndef reward(s, a, n):\n    return 0.0\n", r"top-level ClassDef statement is not allowed"),
    "NaN": ("def reward(s, a, n):\n    return float('nan')\n", r"reward returned nan for transition 0 .* must be finite"),
    "inf": ("import math\ndef reward(s, a, n):\n    return -math.inf\n", r"reward returned -inf for transition 0"),
    "too large": ("def reward(s, a, n):\n    return 5e4 * a\n",
                  r"reward returned 5e\+04 for transition 0 \(current_state \[1776.0.*\), outside \[-1000, 1000\]"),
    "string": ("def reward(s, a, n):\n    return 'hold'\n",
               r"reward returned str \('hold'\) for transition 0, expected a number"),
    "None": ("def reward(s, a, n):\n    x = 1.0\n", r"reward returned NoneType"),
    "array": ("def reward(s, a, n):\n    return n - s\n", r"reward returned ndarray"),
    "exception": ("def reward(s, a, n):\n    raise ValueError('bad state')\n",
                  r"reward raised ValueError: bad state on transition 0 \(current_state \[1776.0"),
    "zero headway": ("def reward(s, a, n):\n    return 1.0 / float(n[2])\n",
                     r"reward raised ZeroDivisionError: float division by zero on transition 0"),
    "recursion": ("def reward(s, a, n):\n    return reward(s, a, n)\n", r"RecursionError"),
    "fails when loaded": ("X = 1 / 0\ndef reward(s, a, n):\n    return 0.0\n",
                          r"loading the code failed: ZeroDivisionError: division by zero \(line 1"),
    "wrong signature": ("def reward(state, action):\n    return 0.0\n",
                        r"reward must take 3 arguments \(current_state, action, next_state\), got \(state, action\)"),
    "no reward": ("def rewards(s, a, n):\n    return 0.0\n", r"no function reward\(current_state, action, next_state\)"),
    "syntax error": ("def reward(current_state, action next_state):\n    return 0.0\n", r"syntax error at line 1"),
}


def snapshot(root):
    return {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(root) for f in files
    }


def test_good_reward_passes_and_matches_the_same_function_in_process(tmp_path):
    assert validate_reward_code(GOOD) == (True, "ok")
    namespace = {}
    exec(GOOD, namespace)  # trusted here: it is our own test program
    with SandboxedReward(GOOD) as sandboxed:
        for state, action, next_state in example_transitions():
            assert sandboxed(state, action, next_state) == namespace["reward"](state, action, next_state)


def test_hostile_programs_are_each_rejected_with_their_reason_and_touch_nothing(tmp_path):
    sentinel = tmp_path / "outside" / "pwned"
    sentinel.parent.mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("unchanged")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    before = snapshot(tmp_path / "outside")
    for name, (code, reason) in HOSTILE.items():
        check = validate_reward_code(code.replace("SENTINEL", str(sentinel)), timeout_s=1, memory_mb=256,
                                     run_dir=run_dir)
        assert not check.ok, name
        assert re.search(reason, check.reason), (name, check.reason)
    assert snapshot(tmp_path / "outside") == before
    assert not sentinel.exists()
    assert list(run_dir.iterdir()) == []


ESCAPE = (
    "def reward(s, a, n):\n"
    "    for c in ().__class__.__bases__[0].__subclasses__():\n"
    "        if c.__name__ == '_wrap_close':\n"
    "            return float(c.__init__.__globals__[CALL])\n"
    "    return 0.0\n"
)


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("import os\nos.system('/usr/bin/touch SENTINEL')\ndef reward(s, a, n):\n    return 0.0\n",
         r"loading the code failed: ImportError: import of 'os' is not allowed \(only math, numpy, numpy.linalg and typing\) \(line 1 of the code\)"),
        ("def reward(s, a, n):\n    open('SENTINEL', 'w').write('x')\n    return 0.0\n",
         r"reward raised NameError: name 'open' is not defined"),
        ("import numpy as np\ndef reward(s, a, n):\n    np.save('SENTINEL', s)\n    return 0.0\n",
         r"reward raised PermissionError: \[Errno 1\] Operation not permitted"),  # seccomp: no openat
        (ESCAPE.replace("[CALL]", "['fork']()"), r"reward raised PermissionError: \[Errno 1\] Operation not permitted"),
        # the shell cannot start (no new processes); what matters is that no file appears
        (ESCAPE.replace("[CALL]", "['system']('/usr/bin/touch SENTINEL')"), None),
    ],
    ids=["import os", "open", "numpy save", "subclasses escape: fork", "subclasses escape: system"],
)
def test_the_worker_alone_still_stops_what_static_checks_reject(tmp_path, code, outcome):
    """Defence in depth: code that skipped the static checks still cannot write files or start
    processes (restricted builtins and imports, the seccomp allowlist, no new file descriptors or
    processes)."""
    sentinel = tmp_path / "pwned"
    states = np.array([[1776, 1776, 0, 0, 20, 0.0]])
    try:
        worker = Worker(code.replace("SENTINEL", str(sentinel)), tmp_path, timeout_s=5)
        try:
            result = str(worker.evaluate(states, np.array([1]), states, timeout_s=5))
        finally:
            worker.close()
    except RewardError as error:
        result = str(error)
    assert outcome is None or re.search(outcome, result), result
    time.sleep(0.2)  # a shell command, had one started, would have finished by now
    assert not sentinel.exists()
    assert not (tmp_path / "pwned.npy").exists()


def test_static_check_accepts_helpers_constants_and_default_arguments():
    code = "import numpy as np\nfrom math import sqrt\nSCALE = 10.0\n" \
           "def reward(current_state, action, next_state, weight=1.0):\n    return -weight * sqrt(SCALE)\n"
    assert static_check(code).ok
    assert validate_reward_code(code).ok


def test_recorded_transitions_are_used_and_three_value_states_work():
    code = "def reward(s, a, n):\n    return 1.0 / (n[0] - 100.0)\n"
    assert validate_reward_code(code).ok
    check = validate_reward_code(code, transitions=[(np.array([100.0, 50.0, 3.0]), 0, np.array([100.0, 50.0, 3.0]))])
    assert check == (False, "reward returned inf for transition 0 (current_state [100.0, 50.0, 3.0], action 0); it must be finite")
    three = "def reward(s, a, n):\n    return -abs(n[0] - n[1]) / 1000.0 - 0.1 * a + 0.0 * n[2]\n"
    assert validate_reward_code(three, transitions=example_transitions(3)).ok
    assert "IndexError" in validate_reward_code(three.replace("n[2]", "n[5]"), transitions=example_transitions(3)).reason


def test_sandboxed_reward_batches_and_recovers_after_a_hang(tmp_path):
    code = "def reward(s, a, n):\n    while a == 7:\n        pass\n    return float(n[0] - s[0]) - a\n"
    transitions = example_transitions()
    states = np.array([s for s, _, _ in transitions])
    actions = np.array([a for _, a, _ in transitions])
    next_states = np.array([n for _, _, n in transitions])
    with SandboxedReward(code, timeout_s=0.5, run_dir=tmp_path) as reward:
        assert reward.batch(states, actions, next_states).tolist() == (next_states[:, 0] - states[:, 0] - actions).tolist()
        first_pid = reward._worker.process.pid
        with pytest.raises(RewardTimeout, match=r"limit 0.5 s.*The worker was killed"):
            reward(states[0], 7, next_states[0])
        assert reward(states[0], 1, next_states[0]) == 28.0 - 1  # a new worker answers
        assert reward._worker.process.pid != first_pid


def test_sandboxed_reward_refuses_code_that_fails_static_checks():
    with pytest.raises(ValueError, match="reward code rejected: import of 'os' is not allowed"):
        SandboxedReward("import os\ndef reward(s, a, n):\n    return 0.0\n")


def test_sandboxed_reward_reports_exceptions_with_the_transition():
    with SandboxedReward("def reward(s, a, n):\n    return 1.0 / a\n") as reward:
        assert reward([1.0] * 6, 2, [1.0] * 6) == 0.5
        with pytest.raises(RewardError, match=r"reward raised ZeroDivisionError: float division by zero on transition 0 \(current_state \[1.0"):
            reward([1.0] * 6, 0, [1.0] * 6)
        assert reward([1.0] * 6, 4, [1.0] * 6) == 0.25  # the worker survives an exception
