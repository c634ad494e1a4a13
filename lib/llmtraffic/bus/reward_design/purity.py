"""Static purity rule for generated reward code: nothing that outlives one call may be changed.

A reward is a function of ``(current_state, action, next_state)`` (bus paper §3.3, §4.2): if it
keeps state between calls, training depends on the order of the calls. The worker runs every call
in a fresh namespace, so module-level values do not survive there; this rule makes the code itself
say so, for any runner, and tells the designer why a stateful program is refused.

**The rule.** Code may change (item or slice store, augmented assignment, ``del x[k]``, a mutating
method such as ``append``/``update``/``setdefault``/``pop``/``sort``/``fill``, a numpy ``out=``
or ``overwrite_input=`` argument) only a *local value created inside the call*: a variable of the
function doing the change, every binding of which is an expression that makes a new object —
literals and comprehensions, arithmetic, ``list``/``dict``/``set``/``sorted``/``float`` …,
``.copy()``, numpy functions other than the ones that may return their input (``asarray``,
``reshape``, ``ravel``, ``np.float64`` …), a helper whose every ``return`` is such an expression,
a number taken from a state argument (``next_state[0]``), another such variable. Everything else
is refused, conservatively:

- module-level names (also through an alias, ``c = CACHE; c[k] = v``), and any change at module level;
- arguments (``def bump(c): c[0] += 1`` refuses even if every caller passes a fresh list) and
  variables of an enclosing function (closures over a mutable cell);
- values reached through a subscript or attribute (``x[i][j] = v``, ``x[i].append(v)``: ``x[i]``
  may be anything; write ``x[i, j]`` on arrays); the receiver of a mutating method must be a name;
- iterators (generators, ``map``, ``zip`` …) bound at module level or captured from an enclosing
  function: consuming one is a change too.

``setattr``/``delattr`` and attribute stores are refused by the allowlist (``allowlist.py``).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field

import numpy as np

MUTATORS = frozenset(
    "append extend insert pop popitem remove clear reverse sort setdefault update add discard "
    "difference_update intersection_update symmetric_difference_update fill resize put partition "
    "itemset".split()
)
"""Method names that change their receiver (lists, dicts, sets, arrays)."""

FRESH_BUILTINS = frozenset(
    "abs all any bool dict divmod enumerate filter float int isinstance len list map pow range "
    "reversed round set sorted sum tuple zip".split()
)
"""Builtins whose result is a new object (``min``/``max`` return one of their arguments)."""

FRESH_METHODS = frozenset(
    "all any argmax argmin argsort astype clip conjugate copy count cumprod cumsum dot flatten index "
    "is_integer item keys max mean min nonzero prod round std sum take tolist trace var".split()
)
"""Methods whose result is a new object or a number (``reshape``, ``ravel``, ``get``, ``pop``
may return the receiver or an element of it)."""

VIEWS = frozenset(
    "asarray atleast_1d bool_ diag expand_dims flip float32 float64 int32 int64 ndarray ravel "
    "reshape squeeze transpose".split()
)
"""numpy functions that may return their argument or a view of it (``np.float64(a)`` is ``a``
for an array ``a``)."""

CONSTANTS = frozenset("pi e inf nan tau newaxis".split())
"""Module attributes that are numbers (or None)."""

ITERATORS = frozenset("enumerate filter iter map reversed zip".split())
"""Builtins that return a one-pass iterator."""

WRITE_FLAGS = {"out": None, "overwrite_input": (False, None, 0), "copy": (True, 1)}
"""Keywords through which a numpy call writes into an array, and their harmless values: ``out``
names the array written; ``overwrite_input`` (``median``, ``percentile`` …) and ``nan_to_num``'s
``copy`` write into the first argument unless they have one of these values."""


def _writes() -> dict[str, dict[str, int]]:
    """numpy function → {write keyword: its position among the positional arguments}."""
    table: dict[str, dict[str, int]] = {}
    for name in dir(np):
        f = getattr(np, name, None)
        if isinstance(f, np.ufunc):
            table[name] = {"out": f.nin}
            continue
        try:
            params = list(inspect.signature(f).parameters.values())
        except (TypeError, ValueError):
            continue
        writing = set(WRITE_FLAGS) - ({"copy"} if name != "nan_to_num" else set())  # copy=False elsewhere only aliases
        flags = {p.name: i for i, p in enumerate(params)
                 if p.name in writing and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if flags:
            table[name] = flags
    return table


WRITES = _writes()
"""Where each numpy function takes an argument that makes it write into an array. An ndarray
method of the same name takes it one position earlier (``a.sum(axis, dtype, out)``)."""


@dataclass
class Binding:
    """One way a name gets a value in a scope."""

    kind: str
    """``value`` (of `expr`), ``arg``, ``state`` (a 1-D state array of the reward), ``number``
    (the reward's action, a ``range`` loop variable), ``module``, ``def`` or ``other``."""
    expr: ast.AST | None = None


@dataclass(eq=False)
class Scope:
    """A module, function, lambda or comprehension, and the names it binds."""

    node: ast.AST
    parent: Scope | None
    names: dict[str, list[Binding]] = field(default_factory=dict)
    nodes: list[ast.AST] = field(default_factory=list)
    """Its own nodes (`_own_nodes`), walked once."""

    @property
    def label(self) -> str:
        return f"function {self.node.name!r}" if hasattr(self.node, "name") else "a lambda or comprehension"

    def bind(self, name: str, binding: Binding) -> None:
        self.names.setdefault(name, []).append(binding)

    def owner(self, name: str) -> Scope | None:
        scope = self
        while scope is not None and name not in scope.names:
            scope = scope.parent
        return scope


SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
          ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _own_nodes(scope_node: ast.AST):
    """The nodes of a scope: a nested scope's node is yielded (its name is bound here), not its contents."""
    stack = list(ast.iter_child_nodes(scope_node))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(node))


class Analysis:
    """Scopes, bindings and the greatest fixpoint of which variables hold fresh values."""

    def __init__(self, tree: ast.Module):
        self.scopes: dict[ast.AST, Scope] = {}
        self._build(tree, None)
        self.reward = next((s for s in reversed(tree.body) if isinstance(s, ast.FunctionDef) and s.name == "reward"), None)
        self._mark_reward_arguments()
        self.fresh = {s: {n for n, bs in s.names.items() if all(b.kind in ("value", "number") for b in bs)}
                      for s in self.scopes.values()}
        self.fresh_returns = {n for n in self.scopes if isinstance(n, (ast.FunctionDef, ast.Lambda))}
        self._solve()

    # -------------------------------------------------------------------- scopes and bindings
    def _build(self, node: ast.AST, parent: Scope | None) -> None:
        scope = Scope(node, parent, nodes=list(_own_nodes(node)))
        self.scopes[node] = scope
        self._bind_arguments(node, scope)
        for child in scope.nodes:
            self._bind(child, scope)
            if isinstance(child, SCOPES):
                self._build(child, scope)

    @staticmethod
    def _bind_arguments(node: ast.AST, scope: Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]:
                scope.bind(arg.arg, Binding("arg"))
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for gen in node.generators:
                _bind_target(scope, gen.target, _iterated(gen.iter))

    @staticmethod
    def _bind(node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind_target(scope, target, node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            _bind_target(scope, node.target, node.value)
        elif isinstance(node, ast.NamedExpr):
            _bind_target(scope, node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            _bind_target(scope, node.target, _iterated(node.iter))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.bind(node.name, Binding("def", node))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope.bind(node.name, Binding("other"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                scope.bind(alias.asname or alias.name.split(".")[0], Binding("module", alias))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                module = node.module == "numpy" and alias.name == "linalg"
                scope.bind(alias.asname or alias.name, Binding("module" if module else "other", alias))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    _bind_target(scope, item.optional_vars, None)

    def _mark_reward_arguments(self) -> None:
        """The worker calls the reward with two fresh 1-D float arrays and an int."""
        if self.reward is None:
            return
        scope = self.scopes[self.reward]
        positional = [a.arg for a in [*self.reward.args.posonlyargs, *self.reward.args.args]][:3]
        for i, name in enumerate(positional):
            kind = "number" if i == 1 else "state"
            scope.names[name] = [Binding(kind) if b.kind == "arg" else b for b in scope.names[name]]

    # -------------------------------------------------------------------- freshness
    def _solve(self) -> None:
        changed = True
        while changed:
            changed = False
            for node, scope in self.scopes.items():
                for name in list(self.fresh[scope]):
                    if not all(self.binding_fresh(b, scope) for b in scope.names[name]):
                        self.fresh[scope].discard(name)
                        changed = True
                if node in self.fresh_returns and not all(self.is_fresh(r, scope) for r in _returns(scope)):
                    self.fresh_returns.discard(node)
                    changed = True

    def binding_fresh(self, binding: Binding, scope: Scope) -> bool:
        return binding.kind == "number" or binding.kind == "value" and self.is_fresh(binding.expr, scope)

    def is_fresh(self, e: ast.AST | None, scope: Scope) -> bool:
        """Whether `e` evaluates to a new object (or an immutable one), never to one that exists
        outside this call of `scope`."""
        if isinstance(e, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.List, ast.Tuple, ast.Set, ast.Dict,
                          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.JoinedStr)):
            return True
        if isinstance(e, ast.BoolOp):
            return all(self.is_fresh(v, scope) for v in e.values)
        if isinstance(e, ast.IfExp):
            return self.is_fresh(e.body, scope) and self.is_fresh(e.orelse, scope)
        if isinstance(e, ast.NamedExpr):
            return self.is_fresh(e.value, scope)
        if isinstance(e, ast.Name):
            return self._name_fresh(e.id, scope)
        if isinstance(e, ast.Subscript):
            return self._state_element(e, scope)
        if isinstance(e, ast.Attribute):
            return e.attr in CONSTANTS and self.is_module(e.value, scope)
        if isinstance(e, ast.Call):
            return self._call_fresh(e, scope)
        return False

    def _name_fresh(self, name: str, scope: Scope) -> bool:
        owner = scope.owner(name)
        if owner is scope:
            return name in self.fresh[scope]
        # captured or module-level: only an immutable value may be shared
        return owner is not None and all(b.kind == "value" and _immutable(b.expr) for b in owner.names[name])

    def _state_element(self, e: ast.Subscript, scope: Scope) -> bool:
        """``next_state[0]`` in the reward: a number, since the worker passes 1-D arrays."""
        index = e.slice.operand if isinstance(e.slice, ast.UnaryOp) else e.slice
        if not (isinstance(e.value, ast.Name) and isinstance(index, ast.Constant) and type(index.value) is int):
            return False
        owner = scope.owner(e.value.id)
        return owner is scope and all(b.kind == "state" for b in scope.names[e.value.id])

    def _call_fresh(self, call: ast.Call, scope: Scope) -> bool:
        f = call.func
        if isinstance(f, ast.Name):
            owner = scope.owner(f.id)
            if owner is None:
                return f.id in FRESH_BUILTINS and not (f.id == "sum" and (len(call.args) > 1 or call.keywords))
            bindings = owner.names[f.id]
            if all(b.kind == "def" for b in bindings):
                return all(b.expr in self.fresh_returns for b in bindings)
            return self.callee(call, scope)[1] == "numpy" and _numpy_call_fresh(f.id, call)  # from numpy import zeros
        if isinstance(f, ast.Attribute):
            if self.is_module(f.value, scope):
                return _numpy_call_fresh(f.attr, call)
            return f.attr in FRESH_METHODS and not any(_write_arguments(f.attr, call, "method")) and \
                not any(k.arg == "copy" for k in call.keywords)
        return False

    def callee(self, call: ast.Call, scope: Scope) -> tuple[str, str]:
        """The called name and what it is: ``numpy`` (a module's function, or imported from one),
        ``method`` (of a value, maybe an array) or ``other`` (a builtin or the code's own)."""
        f = call.func
        if isinstance(f, ast.Attribute):
            return f.attr, "numpy" if self.is_module(f.value, scope) else "method"
        if isinstance(f, ast.Name):
            owner = scope.owner(f.id)
            imported = owner is not None and all(b.kind == "other" and isinstance(b.expr, ast.alias) for b in owner.names[f.id])
            return f.id, "numpy" if imported else "other"
        return "", "other"

    def is_module(self, e: ast.AST, scope: Scope) -> bool:
        """``np``, ``math``, ``np.linalg``, ``la`` (``import numpy.linalg as la``) …"""
        if isinstance(e, ast.Attribute):
            return e.attr == "linalg" and self.is_module(e.value, scope)
        if not isinstance(e, ast.Name):
            return False
        owner = scope.owner(e.id)
        return owner is not None and all(b.kind == "module" for b in owner.names[e.id])

    # -------------------------------------------------------------------- iterators
    def may_iterate(self, e: ast.AST | None, scope: Scope, seen: frozenset = frozenset()) -> bool:
        """Whether `e` may be (or hold) a one-pass iterator."""
        if isinstance(e, ast.GeneratorExp):
            return True
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return any(self.may_iterate(x, scope, seen) for x in e.elts)
        if isinstance(e, ast.Dict):
            return any(self.may_iterate(x, scope, seen) for x in e.values)
        if isinstance(e, ast.IfExp):
            return self.may_iterate(e.body, scope, seen) or self.may_iterate(e.orelse, scope, seen)
        if isinstance(e, ast.BoolOp):
            return any(self.may_iterate(x, scope, seen) for x in e.values)
        if isinstance(e, (ast.NamedExpr, ast.Subscript, ast.Starred)):  # its value, or an element of it
            return self.may_iterate(e.value, scope, seen)
        if isinstance(e, ast.Name):
            owner = scope.owner(e.id)
            if owner is None or (e.id, owner.node) in seen:
                return False
            seen = seen | {(e.id, owner.node)}
            return any(b.kind == "value" and self.may_iterate(b.expr, owner, seen) for b in owner.names[e.id])
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
            owner = scope.owner(e.func.id)
            if owner is None:
                return e.func.id in ITERATORS
            for b in owner.names[e.func.id]:
                if b.kind == "def" and b.expr not in seen and b.expr in self.scopes:
                    inner = self.scopes[b.expr]
                    if any(self.may_iterate(r, inner, seen | {b.expr}) for r in _returns(inner)):
                        return True
        return False


def _bind_target(scope: Scope, target: ast.AST, value: ast.AST | Binding | None) -> None:
    """Bind the names of an assignment target; ``a, b = x, y`` pairs the elements."""
    if isinstance(target, ast.Name):
        if not isinstance(value, Binding):
            value = Binding("value", value) if value is not None else Binding("other")
        scope.bind(target.id, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        paired = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and \
            not any(isinstance(t, ast.Starred) for t in target.elts)
        for i, t in enumerate(target.elts):
            _bind_target(scope, t, value.elts[i] if paired else Binding("other"))
    elif isinstance(target, ast.Starred):
        _bind_target(scope, target.value, Binding("other"))


def _iterated(iterable: ast.AST) -> Binding:
    """What a loop variable holds: a number over ``range(...)``, else an element (maybe shared)."""
    ranged = isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range"
    return Binding("number" if ranged else "other")


def _returns(scope: Scope) -> list[ast.AST]:
    if isinstance(scope.node, ast.Lambda):
        return [scope.node.body]
    found = [n.value or ast.Constant(None) for n in scope.nodes if isinstance(n, ast.Return)]
    return found or [ast.Constant(None)]


def _immutable(e: ast.AST | None) -> bool:
    """A number, string, None or a tuple of them (safe to share between calls)."""
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.Tuple):
        return all(_immutable(x) for x in e.elts)
    if isinstance(e, ast.UnaryOp):
        return _immutable(e.operand)
    if isinstance(e, ast.BinOp):
        return _immutable(e.left) and _immutable(e.right)
    return False


def _numpy_call_fresh(name: str, call: ast.Call) -> bool:
    return name not in VIEWS and not any(_write_arguments(name, call, "numpy")) and \
        not any(k.arg == "copy" for k in call.keywords)


def _write_arguments(name: str, call: ast.Call, kind: str):
    """The expressions a call writes into. `kind`: ``numpy`` (a numpy function), ``method`` (maybe
    an ndarray method, receiver first) or ``other`` (only an ``out=`` keyword counts)."""
    method = kind == "method"
    positions = WRITES.get(name, {}) if kind != "other" else {}
    first = call.func.value if method else call.args[0] if call.args else \
        next((k.value for k in call.keywords if k.arg in ("a", "x")), None)
    for flag, harmless in WRITE_FLAGS.items():
        given = [k.value for k in call.keywords if k.arg == flag]
        at = positions.get(flag)
        if at is not None and len(call.args) > at - method >= 0:
            given.append(call.args[at - method])
        for value in given:
            if isinstance(value, ast.Constant) and (value.value is None or harmless and value.value in harmless):
                continue
            if flag == "out":
                yield value
            elif flag in positions and first is not None:  # writes into the first argument
                yield first


def problems(tree: ast.Module) -> dict[ast.AST, str]:
    """Every node that changes a value not created in its call, with the reason."""
    analysis = Analysis(tree)
    found: dict[ast.AST, str] = {}
    for scope in analysis.scopes.values():
        for child in scope.nodes:
            for where, reason in _changes(child, scope, analysis):
                if reason:
                    found.setdefault(where, reason)
    return found


def _changes(node: ast.AST, scope: Scope, analysis: Analysis):
    """(node, reason) for each change `node` makes that the rule refuses."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        what = "item deletion" if isinstance(node, ast.Delete) else "item assignment"
        for sub in (t for target in targets for t in ast.walk(target) if isinstance(t, ast.Subscript)
                    and not isinstance(t.ctx, ast.Load)):
            yield sub, _target_reason(sub.value, f"{what} {_show(sub)!r}", scope, analysis)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and scope.parent is None and analysis.may_iterate(node.value, scope):
            yield node.value, (f"the module-level iterator {_show(node.value)!r} keeps its position between calls "
                               "(consuming it changes it): build it inside the function")
    elif isinstance(node, ast.AugAssign):
        target = node.target.value if isinstance(node.target, ast.Subscript) else node.target
        if not isinstance(node.target, ast.Attribute):  # attribute stores: the allowlist's reason
            op = f"{_OPS.get(type(node.op), '?')}="
            yield node.target, _target_reason(target, f"augmented assignment '{_show(node.target)} {op}'", scope, analysis)
    elif isinstance(node, ast.Attribute) and node.attr in MUTATORS and isinstance(node.ctx, ast.Load) \
            and not analysis.is_module(node.value, scope):
        yield node, _target_reason(node.value, f"the mutating method '{_show(node)}'", scope, analysis)
    elif isinstance(node, ast.Call):
        name, kind = analysis.callee(node, scope)
        for value in _write_arguments(name, node, kind):
            yield value, _target_reason(value, f"'{_show(node.func)}' writing into an array", scope, analysis)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and scope.parent is not None:
        owner = scope.owner(node.id)
        if owner is not None and owner is not scope and owner.parent is not None and analysis.may_iterate(node, scope):
            yield node, (f"{node.id!r} is an iterator of the enclosing {owner.label}: consuming it from "
                         f"{scope.label} changes it between calls; build it where it is used")


PURE = "a reward must not keep state between calls: it is a function of current_state, action and next_state"


def _target_reason(target: ast.AST, what: str, scope: Scope, analysis: Analysis) -> str | None:
    """Why `what`, which changes `target`, is refused in `scope` (None when allowed)."""
    if scope.parent is None:
        return f"{what} at module level is not allowed: module-level values must stay constant ({PURE})"
    if not isinstance(target, ast.Name):
        return (f"{what} changes {_show(target)!r}, which is not a variable of {scope.label}: only values created "
                "inside the call may be changed (for arrays write x[i, j]; else build the inner value as a local "
                f"first) ({PURE})")
    name, owner = target.id, scope.owner(target.id)
    if owner is None:
        return f"{what} changes {name!r}, which this code does not define ({PURE})"
    if owner is not scope:
        where = "bound at module level" if owner.parent is None else f"a variable of the enclosing {owner.label}"
        return (f"{what} changes {name!r}, {where} ({PURE}); make a local copy first (x = list({name}), "
                f"dict({name}) or np.array({name})) or return a new value")
    if name in analysis.fresh[scope]:
        return None
    bindings = scope.names[name]
    if any(b.kind in ("arg", "state") for b in bindings):
        return (f"{what} changes {name!r}, an argument of {scope.label}: a function must not change what it is "
                f"given ({PURE}); copy it into a new variable first, e.g. x = np.array({name})")
    culprit = next((b for b in bindings if not analysis.binding_fresh(b, scope)), bindings[0])
    source = f"it is bound to {_show(culprit.expr)!r}" if culprit.kind == "value" else "it is a loop or import variable"
    return (f"{what} changes {name!r}, which may refer to a value not created in this call ({source}): only values "
            "the function creates itself (literals, list(...), dict(...), np.array(...), .copy(), arithmetic) may "
            f"be changed ({PURE})")


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
        ast.MatMult: "@", ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


def _show(node: ast.AST | None, limit: int = 40) -> str:
    text = ast.unparse(node) if node is not None else "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"
