"""Rewards without hidden state (issue 36): the static purity rule, the behavioural check, and the
rewards that must still pass (the paper's App. B reward, the search designer's rewards).

``STATEFUL``: programs that keep state between calls or are otherwise impure, each refused by
`validate_reward_code` with its reason. ``BEHAVIOURAL``: programs that skip the static checks and
keep state outside the code's own namespace (the worker's globals, a module, the clock, the
position in the batch); `purity_reason` must catch each with the check that says so.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from llmtraffic.bus import rewards
from llmtraffic.bus.reward_design import sandbox
from llmtraffic.bus.reward_design.loop import Trial
from llmtraffic.bus.reward_design.sandbox import (
    RewardCheck, SandboxedReward, Worker, example_transitions, purity_reason, static_check, validate_reward_code,
)
from llmtraffic.bus.reward_design.search import SearchDesigner

HEAD = "import numpy as np\n\n"
DEF = "def reward(current_state, action, next_state):\n"
MODULE = r"bound at module level \(a reward must not keep state between calls"

STATEFUL = {  # name: (code, regex of the reason)
    "counter in a list (the issue's)": (
        "N = [0]\n\n" + DEF + "    N[0] += 1\n    return float(N[0])\n",
        r"augmented assignment 'N\[0\] \+=' changes 'N', " + MODULE),
    "counter in a dict": (
        "CALLS = {'n': 0}\n\n" + DEF + "    CALLS['n'] = CALLS['n'] + 1\n    return float(CALLS['n'])\n",
        r"item assignment \"CALLS\['n'\]\" changes 'CALLS', " + MODULE),
    "history by append": (
        "SEEN = []\n\n" + DEF + "    SEEN.append(action)\n    return float(len(SEEN))\n",
        r"the mutating method 'SEEN.append' changes 'SEEN', " + MODULE),
    "history by extend": (
        "SEEN = []\n\n" + DEF + "    SEEN.extend([action])\n    return float(sum(SEEN))\n",
        r"the mutating method 'SEEN.extend' changes 'SEEN', " + MODULE),
    "memo by item store": (
        "MEMO = {}\n\n" + DEF + "    key = float(next_state[0])\n    if key in MEMO:\n        return MEMO[key]\n"
        "    MEMO[key] = -abs(next_state[0] - next_state[1]) / 1000.0\n    return MEMO[key]\n",
        r"item assignment 'MEMO\[key\]' changes 'MEMO', " + MODULE),
    "memo by setdefault": (
        "MEMO = {}\n\n" + DEF + "    return float(MEMO.setdefault(float(next_state[0]), len(MEMO)))\n",
        r"the mutating method 'MEMO.setdefault' changes 'MEMO', " + MODULE),
    "memo by update": (
        "MEMO = {}\n\n" + DEF + "    MEMO.update({len(MEMO): action})\n    return float(len(MEMO))\n",
        r"the mutating method 'MEMO.update' changes 'MEMO', " + MODULE),
    "last state by pop": (
        "LAST = {0: 0.0}\n\n" + DEF + "    before = LAST.pop(0, 0.0)\n    LAST[0] = float(next_state[0])\n"
        "    return float(next_state[0] - before) / 1000.0\n",
        r"the mutating method 'LAST.pop' changes 'LAST', " + MODULE),
    "cache cleared by popitem": (
        "C = {1: 2}\n\n" + DEF + "    C.popitem()\n    return 0.0\n",
        r"the mutating method 'C.popitem' changes 'C', " + MODULE),
    "item deletion": (
        "C = {1: 2.0}\n\n" + DEF + "    del C[1]\n    return 0.0\n",
        r"item deletion 'C\[1\]' changes 'C', " + MODULE),
    "slice store": (
        "BUF = [0.0, 0.0, 0.0]\n\n" + DEF + "    BUF[0:2] = BUF[1:3]\n    BUF[2] = float(action)\n"
        "    return sum(BUF)\n",
        r"item assignment 'BUF\[0:2\]' changes 'BUF', " + MODULE),
    "sort in place": (
        "ORDER = [3.0, 1.0]\n\n" + DEF + "    ORDER.sort()\n    return ORDER[0]\n",
        r"the mutating method 'ORDER.sort' changes 'ORDER', " + MODULE),
    "alias of a module-level dict": (
        "CACHE = {}\n\n" + DEF + "    c = CACHE\n    c[action] = c.get(action, 0) + 1\n    return float(c[action])\n",
        r"item assignment 'c\[action\]' changes 'c', which may refer to a value not created in this call "
        r"\(it is bound to 'CACHE'\)"),
    "alias through a conditional": (
        "CACHE = []\n\n" + DEF + "    c = CACHE if action else CACHE\n    c += [1]\n    return float(len(c))\n",
        r"augmented assignment 'c \+=' changes 'c', which may refer to a value not created in this call "
        r"\(it is bound to 'CACHE if action else CACHE'\)"),
    "alias through an identity helper": (
        "CACHE = []\n\ndef same(x):\n    return x\n\n" + DEF + "    c = same(CACHE)\n    c.append(1)\n"
        "    return float(len(c))\n",
        r"the mutating method 'c.append' changes 'c', which may refer to a value not created in this call "
        r"\(it is bound to 'same\(CACHE\)'\)"),
    "alias inside a container": (
        "CACHE = []\n\n" + DEF + "    box = [CACHE]\n    box[0].append(1)\n    return float(len(CACHE))\n",
        r"the mutating method 'box\[0\].append' changes 'box\[0\]', which is not a variable of function 'reward'"),
    "alias as a loop variable": (
        "CACHES = [[], []]\n\n" + DEF + "    for c in CACHES:\n        c.append(action)\n"
        "    return float(len(CACHES[0]))\n",
        r"the mutating method 'c.append' changes 'c', which may refer to a value not created in this call "
        r"\(it is a loop or import variable\)"),
    "helper mutates its argument": (
        "COUNT = [0]\n\ndef bump(c):\n    c[0] += 1\n    return c[0]\n\n" + DEF + "    return float(bump(COUNT))\n",
        r"augmented assignment 'c\[0\] \+=' changes 'c', an argument of function 'bump': a function must not change "
        r"what it is given"),
    "unbound list method": (
        "SEEN = []\n\n" + DEF + "    list.append(SEEN, action)\n    return float(len(SEEN))\n",
        r"the mutating method 'list.append' changes 'list', which this code does not define"),
    "closure over a mutable cell": (
        "def make_counter():\n    count = [0]\n    def tick():\n        count[0] += 1\n        return count[0]\n"
        "    return tick\n\nTICK = make_counter()\n\n" + DEF + "    return float(TICK())\n",
        r"augmented assignment 'count\[0\] \+=' changes 'count', a variable of the enclosing function 'make_counter'"),
    "lambda over a module-level list": (
        "SEEN = []\nREMEMBER = lambda a: SEEN.append(a)\n\n" + DEF + "    REMEMBER(action)\n    return float(len(SEEN))\n",
        r"the mutating method 'SEEN.append' changes 'SEEN', " + MODULE),
    "numpy out= into a module-level array": (
        HEAD + "TOTAL = np.zeros(1)\n\n" + DEF + "    np.add(TOTAL, 1.0, out=TOTAL)\n    return float(TOTAL[0])\n",
        r"'np.add' writing into an array changes 'TOTAL', " + MODULE),
    "numpy out as a positional argument": (
        HEAD + "TOTAL = np.zeros(1)\n\n" + DEF + "    np.add(TOTAL, 1.0, TOTAL)\n    return float(TOTAL[0])\n",
        r"'np.add' writing into an array changes 'TOTAL', " + MODULE),
    "array filled in place": (
        HEAD + "LAST = np.zeros(6)\n\n" + DEF + "    prev = float(LAST[0])\n    LAST.fill(next_state[0])\n"
        "    return (next_state[0] - prev) / 1000.0\n",
        r"the mutating method 'LAST.fill' changes 'LAST', " + MODULE),
    "array view of a module-level array": (
        HEAD + "GRID = np.zeros((2, 3))\n\n" + DEF + "    row = GRID.reshape(-1)\n    row[action] += 1.0\n"
        "    return float(GRID.sum())\n",
        r"augmented assignment 'row\[action\] \+=' changes 'row', which may refer to a value not created in this "
        r"call \(it is bound to 'GRID.reshape\(-1\)'\)"),
    "np.asarray alias": (
        HEAD + "ACC = np.zeros(2)\n\n" + DEF + "    acc = np.asarray(ACC)\n    acc += 1.0\n    return float(acc[0])\n",
        r"augmented assignment 'acc \+=' changes 'acc', which may refer to a value not created in this call "
        r"\(it is bound to 'np.asarray\(ACC\)'\)"),
    "median overwriting its input": (
        HEAD + "H = np.array([3.0, 1.0, 2.0])\n\n" + DEF + "    return float(np.median(H, overwrite_input=True))\n",
        r"'np.median' writing into an array changes 'H', " + MODULE),
    "module-level generator": (
        "TICKS = (i for i in range(10 ** 6))\n\n" + DEF + "    for t in TICKS:\n        return float(t)\n    return 0.0\n",
        r"the module-level iterator '\(i for i in range\(10 \*\* 6\)\)' keeps its position between calls"),
    "module-level map iterator": (
        "TICKS = map(float, range(10 ** 6))\n\n" + DEF + "    return max(TICKS)\n",
        r"the module-level iterator 'map\(float, range\(10 \*\* 6\)\)' keeps its position between calls"),
    "iterator captured by a closure": (
        "def make():\n    ticks = zip(range(10 ** 6))\n    def tick():\n        for t in ticks:\n            return t[0]\n"
        "        return 0\n    return tick\n\nTICK = make()\n\n" + DEF + "    return float(TICK())\n",
        r"'ticks' is an iterator of the enclosing function 'make': consuming it from function 'tick' changes it"),
    "sorts a view of its argument": (
        DEF + "    h = next_state[0:4]\n    h.sort()\n    return float(h[0]) / 1e4\n",
        r"the mutating method 'h.sort' changes 'h', which may refer to a value not created in this call "
        r"\(it is bound to 'next_state\[0:4\]'\)"),
    "max returns one of its arguments": (
        "A = []\nB = [0]\n\n" + DEF + "    c = max(A, B, key=len)\n    c.append(1)\n    return float(len(c))\n",
        r"the mutating method 'c.append' changes 'c', which may refer to a value not created in this call "
        r"\(it is bound to 'max\(A, B, key=len\)'\)"),
    "sum of nothing returns its start": (
        "ACC = []\n\n" + DEF + "    c = sum([], ACC)\n    c += [action]\n    return float(len(c))\n",
        r"augmented assignment 'c \+=' changes 'c', which may refer to a value not created in this call"),
    "dict.get returns the stored list": (
        "MEMO = {0: []}\n\n" + DEF + "    c = MEMO.get(0, [])\n    c.append(action)\n    return float(len(c))\n",
        r"the mutating method 'c.append' changes 'c', which may refer to a value not created in this call "
        r"\(it is bound to 'MEMO.get\(0, \[\]\)'\)"),
    "np.array without a copy": (
        HEAD + "ACC = np.zeros(1)\n\n" + DEF + "    c = np.array(ACC, copy=False)\n    c += 1.0\n    return float(c[0])\n",
        r"augmented assignment 'c \+=' changes 'c', which may refer to a value not created in this call"),
    "nan_to_num in place": (
        HEAD + "ACC = np.zeros(1)\n\n" + DEF + "    np.nan_to_num(ACC, copy=False)\n    return 0.0\n",
        r"'np.nan_to_num' writing into an array changes 'ACC', " + MODULE),
    "np.float64 of an array is the array": (
        HEAD + "ACC = np.zeros(1)\n\n" + DEF + "    c = np.float64(ACC)\n    c += 1.0\n    return float(c[0])\n",
        r"augmented assignment 'c \+=' changes 'c', which may refer to a value not created in this call"),
    "walrus receiver": (
        "SEEN = []\n\n" + DEF + "    (c := SEEN).append(action)\n    return float(len(c))\n",
        r"the mutating method '\(c := SEEN\).append' changes '\(c := SEEN\)', which is not a variable"),
    "change at module level": (
        "W = [1.0, 2.0]\nW[0] = 3.0\n\n" + DEF + "    return W[0]\n",
        r"item assignment 'W\[0\]' at module level is not allowed: module-level values must stay constant"),
    "changes its argument": (
        DEF + "    next_state[0] -= 28.0\n    return float(next_state[0]) / 1000.0\n",
        r"augmented assignment 'next_state\[0\] -=' changes 'next_state', an argument of function 'reward'"),
    "setattr on a module-level object": (
        "import math\n\n" + DEF + "    setattr(math, 'calls', 1)\n    return 0.0\n",
        r"use of 'setattr' is not allowed: changing an object's attributes keeps state"),
    "delattr": (
        "import math\n\n" + DEF + "    delattr(math, 'tau')\n    return 0.0\n",
        r"use of 'delattr' is not allowed: changing an object's attributes keeps state"),
    "attribute deletion": (
        HEAD + DEF + "    del np.pi\n    return 0.0\n", r"deleting attribute 'pi' is not allowed \(the reward must be pure\)"),
    "global counter": (
        "N = 0\n\n" + DEF + "    global N\n    N += 1\n    return float(N)\n",
        r"'global' statements are not allowed \(the reward must be pure\)"),
    "class-level state": (
        "class Count:\n    n = [0]\n\n" + DEF + "    Count.n[0] += 1\n    return float(Count.n[0])\n",
        r"top-level ClassDef statement is not allowed"),
    "mutable default": (
        "def reward(current_state, action, next_state, seen=[]):\n    seen.append(1)\n    return float(len(seen))\n",
        r"default argument '\[\]' of function 'reward' is not allowed"),
    "generator function kept between calls": (
        "def ticks():\n    n = 0\n    while True:\n        n += 1\n        yield n\n\n" + DEF + "    return 0.0\n",
        r"generators \(yield\) are not allowed"),
    "random module": (
        "import random\n\n" + DEF + "    return random.random()\n", r"import of 'random' is not allowed"),
    "numpy random state": (
        HEAD + DEF + "    return float(np.random.rand())\n",
        r"attribute 'random' is not allowed: a reward must be deterministic"),
    "clock": (
        "import time\n\n" + DEF + "    return time.time() % 1.0\n", r"import of 'time' is not allowed"),
    "id-based state": (
        DEF + "    return float(id(current_state) % 7)\n", r"use of 'id' is not allowed"),
    "hash-based state": (
        DEF + "    return float(hash(str(action)) % 7)\n", r"use of 'hash' is not allowed"),
}


def test_stateful_programs_are_each_refused_with_their_reason(tmp_path):
    assert len(STATEFUL) >= 20
    for name, (code, expected) in STATEFUL.items():
        check = validate_reward_code(code, timeout_s=2, memory_mb=256, run_dir=tmp_path)
        assert not check.ok and re.search(expected, check.reason), (name, check.reason)


LOCAL = HEAD + """import math
from numpy import zeros

BASE = -1.0

def helper(x):
    out = [0.0, 0.0]
    out[0] = x
    return out

def reward(current_state, action, next_state):
    fwd, bwd = next_state[0], next_state[1]
    fwd -= 28.0
    seen = []
    seen.append(fwd)
    counts = {}
    counts[action] = counts.get(action, 0) + 1
    grid = np.zeros((2, 2))
    grid[0, 1] += 1.0
    np.add(grid, 1.0, out=grid)
    h = list(next_state[:4])
    h.sort()
    pair = helper(bwd)
    pair[1] += 1.0
    for i in range(2):
        i += 1
    z = zeros(2)
    z[action] = 1.0
    v = [] if action else [0.0]
    v.append(1.0)
    r = BASE
    r += sum(seen) / 1e4 + counts[action] + grid.sum() + h[0] / 1e4 + pair[1] + z.sum() + sum(v)
    best = -math.inf
    best = max(best, r)
    return float(best)
"""


def test_changing_values_created_inside_the_call_is_allowed():
    assert validate_reward_code(LOCAL).ok


def app_b_code() -> str:
    """The paper's final reward (App. B, ``rewards.paper_final``) as generated code: its own source,
    its constants and helper; the argument check ``_state`` (which formats an error message) becomes
    a plain conversion."""
    constants = "".join(f"{n} = {getattr(rewards, n)!r}\n" for n in ("MAX_HOLD_S", "LONG_HOLD_S", "LONG_HOLD_FACTOR",
                                                                      "AVG_CAPACITY"))
    return (HEAD + constants + "\n\ndef _state(x, name):\n    return np.asarray(x, dtype=float)\n\n\n"
            + inspect.getsource(rewards._balance_penalty) + "\n\n" + inspect.getsource(rewards.paper_final)
            + "\n\n" + DEF + "    return paper_final(current_state, action, next_state)\n")


def test_the_app_b_reward_passes_and_computes_the_same_values():
    code = app_b_code()
    assert validate_reward_code(code) == RewardCheck(True, "ok")
    states, actions, nexts = (np.array(x) for x in zip(*example_transitions()))
    with SandboxedReward(code) as fn:
        got = fn.batch(states, actions, nexts)
    assert got.tolist() == [rewards.paper_final(s, a, n) for s, a, n in example_transitions()]


def _trial() -> Trial:
    return Trial({"travel_time_s": 1300.0, "hold_time_s": 30.0, "headway_sd_s": 200.0, "wait_time_s": 500.0},
                 curve=[1.0] * 9, stop_sd=[10.0, 50.0],
                 transitions=[{"state": [100, 900, 3], "action": 1, "reward": -5.0, "next_state": [100, 900, 3]}] * 4)


def search_rewards(seed: int, multi_line: bool, state_dim: int) -> list[str]:
    """What the search designer emits for one design seed: its initial reward, guided and random
    modifications, a refinement and a repair (the critic variant ranks edits of the same kinds)."""
    d = SearchDesigner(320.0, multi_line, state_dim, seed=seed)
    first = d.initial().code
    analysis = d.analyze(first, _trial())
    guided = d.modify(first, _trial(), analysis).code
    blind = d.modify(first, _trial(), None).code
    refined = d.refine(guided, _trial(), first, _trial()).code
    repaired = d.repair(blind, "reward returned 1.2e3").code
    return [first, guided, blind, refined, repaired]


@pytest.mark.parametrize("seed", range(10))
def test_the_search_designers_rewards_for_design_seeds_0_to_9_pass(seed):
    for multi_line, state_dim in ((False, 3), (False, 6), (True, 6)):
        codes = search_rewards(seed, multi_line, state_dim)
        for code in codes:
            assert static_check(code).ok, static_check(code).reason
        # the full validation (worker, behavioural check) on one of them per setting keeps this fast
        assert validate_reward_code(codes[1], transitions=example_transitions(state_dim)) == RewardCheck(True, "ok")


# ------------------------------------------------------------------------------ the behavioural check
ESCAPE = ("    box = []\n    g = (box[0].gi_frame.f_back.f_back for _ in [0])\n    box.append(g)\n"
          "    frame = list(g)[0]\n")
"""Reaches the worker's ``evaluate`` frame (code that skipped the static checks can)."""

BEHAVIOURAL = {  # name: (code, regex of the reason)
    "counter in the worker's globals": (
        DEF + ESCAPE + "    ns = frame.f_globals\n    ns['calls'] = ns.get('calls', 0) + 1\n    return float(ns['calls'])\n",
        r"same-batch check\): evaluated a second time on the same transitions in one worker, it returned 9\.0 instead "
        r"of 1\.0 for transition 0"),
    "state on a module object": (
        HEAD + DEF + ESCAPE + "    setattr = frame.f_builtins['setattr']\n    get = frame.f_builtins['getattr']\n"
        "    setattr(np, 'prev', get(np, 'prev', 0.0) + next_state[0])\n    return get(np, 'prev') / 1e4\n",
        r"same-batch check\)"),
    "clock": (
        DEF + ESCAPE + "    clock = frame.f_builtins['__import__']('time')\n    return clock.perf_counter() % 1.0\n",
        r"same-batch check\)"),
    "position in the batch": (
        DEF + ESCAPE + "    return float(frame.f_locals['i']) + next_state[0] / 1e4\n",
        r"permutation check\): evaluated on the same transitions in reversed order in one worker, it returned 7\.1804 "
        r"instead of 0\.1804 for transition 0"),
}


@pytest.mark.parametrize("name", BEHAVIOURAL)
def test_the_behavioural_check_catches_state_outside_the_namespace(tmp_path, name):
    code, expected = BEHAVIOURAL[name]
    states, actions, nexts = (np.array(x) for x in zip(*example_transitions()))
    worker = Worker(code, tmp_path)
    try:
        values = worker.evaluate(states, actions, nexts, 5)
        reason = purity_reason(worker, states, actions, nexts, values, 5)
    finally:
        worker.close()
    assert reason is not None and re.search(expected, reason), reason
    assert "it must keep no state between calls" in reason


def test_validation_rejects_a_stateful_reward_that_the_static_checks_miss(monkeypatch):
    """The net behind the static wall: with the static checks switched off here (they refuse the
    escape), validation still rejects the counter, naming the check."""
    monkeypatch.setattr(sandbox, "static_check", lambda code: RewardCheck(True, "ok"))
    code = BEHAVIOURAL["counter in the worker's globals"][0]
    check = validate_reward_code(code)
    assert not check.ok and "(same-batch check)" in check.reason
    assert validate_reward_code(BEHAVIOURAL["position in the batch"][0]).reason.count("(permutation check)") == 1


def test_pure_rewards_give_identical_bits_on_every_evaluation(tmp_path):
    """A pure reward with long reductions (pairwise sums, sorting) passes: nothing but state
    makes the values differ."""
    code = HEAD + DEF + ("    x = np.linspace(0.0, 1.0, 4097) * next_state[0]\n"
                         "    return float(np.sum(np.sqrt(x)) / 1e5 + np.std(np.sort(x)[::-1]) / 1e3 - 0.1 * action)\n")
    states, actions, nexts = (np.array(x) for x in zip(*example_transitions()))
    worker = Worker(code, tmp_path)
    try:
        values = worker.evaluate(states, actions, nexts, 5)
        assert [purity_reason(worker, states, actions, nexts, values, 5) for _ in range(3)] == [None] * 3
    finally:
        worker.close()
