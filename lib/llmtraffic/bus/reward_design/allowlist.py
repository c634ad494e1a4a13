"""What generated reward code may contain: an allowlist of syntax, names, attributes and modules.

A reward (bus paper §4.2) is a pure function of ``(current_state, action, next_state)``: arithmetic,
comparisons, loops, helper functions, ``math`` and a curated part of ``numpy``. Everything else is
rejected with a reason the designer can act on. An allowlist rather than a blocklist: a blocklist
of names always misses one (``gi_frame.f_back.f_globals``, ``np.ma.core.builtins``,
``'{0.__class__}'.format``), while a name that is not listed here is simply not allowed.

- **Syntax** (`NODES`): no classes, ``global``/``nonlocal``, ``yield``/``async``/``await``, ``with``,
  decorators, f-strings or attribute assignment.
- **Names**: the code's own variables, functions, arguments and imports, plus `BUILTINS`
  (no ``getattr``, ``vars``, ``type``, ``open``, ``eval``, ``format`` …); no dunder names.
- **Attributes** (`ATTRIBUTES`): the public functions and constants of ``math``, `NUMPY`,
  `LINALG`, the `ARRAY` methods of ``numpy.ndarray`` and the methods of lists and dicts. No
  attribute is reachable whose value is a frame, code object, module other than ``numpy.linalg``,
  or a function that reads a file (a test walks the graph).
- **Modules** (`MODULES`): ``math``, ``numpy``, ``numpy.linalg`` and, for annotations, a few
  names of ``typing``; other numpy submodules are refused with what to use instead (`NUMPY_HINTS`).
- **Purity** (``purity.py``): only values created inside the call may be changed, never a
  module-level name, an argument, a captured variable or what a subscript reaches, and no
  iterator is kept at module level; default arguments must be constants; ``setattr``/``delattr``
  and attribute stores are refused. The worker also rebuilds module-level values for every call
  (a fresh namespace), and the validator checks the behaviour (``sandbox.py``).
"""

from __future__ import annotations

import ast
import math

from . import purity

NODES = frozenset({
    # module structure and statements
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign,
    ast.AnnAssign, ast.If, ast.For, ast.While, ast.Break, ast.Continue, ast.Pass, ast.Expr,
    ast.Import, ast.ImportFrom, ast.alias, ast.Assert, ast.Raise, ast.Try, ast.ExceptHandler,
    ast.Delete,
    # expressions
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Lambda, ast.IfExp, ast.Dict, ast.Set, ast.List,
    ast.Tuple, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension,
    ast.Compare, ast.Call, ast.keyword, ast.Constant, ast.Attribute, ast.Subscript, ast.Slice,
    ast.Starred, ast.Name, ast.NamedExpr, ast.Load, ast.Store, ast.Del,
    # operators
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow,
    ast.FloorDiv, ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.Invert, ast.Not,
    ast.UAdd, ast.USub, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot,
    ast.In, ast.NotIn,
})
"""AST node types a reward may contain."""

NODE_REASONS = {
    ast.ClassDef: "class definitions are not allowed (use functions)",
    ast.Global: "'global' statements are not allowed (the reward must be pure)",
    ast.Nonlocal: "'nonlocal' statements are not allowed (the reward must be pure)",
    ast.Yield: "generators (yield) are not allowed (reward must return a number)",
    ast.YieldFrom: "generators (yield from) are not allowed (reward must return a number)",
    ast.AsyncFunctionDef: "async functions are not allowed (reward must return a number)",
    ast.Await: "await is not allowed (reward must return a number)",
    ast.With: "'with' blocks are not allowed (no files, locks or contexts are needed)",
    ast.withitem: "'with' blocks are not allowed (no files, locks or contexts are needed)",
    ast.Match: "match statements are not allowed (use if/elif)",
    ast.match_case: "match statements are not allowed (use if/elif)",
    ast.JoinedStr: "f-strings are not allowed (a reward returns a number, not text)",
}
"""Why a node type outside `NODES` is refused, where a specific reason helps the designer."""

BUILTINS = frozenset(
    "abs all any bool dict divmod enumerate filter float int isinstance len list map max min "
    "pow range reversed round set sorted sum tuple zip True False None "
    "ArithmeticError Exception IndexError KeyError OverflowError TypeError ValueError "
    "ZeroDivisionError".split()
)
"""Builtins a reward may use (the worker gives the code exactly these)."""

NUMPY = frozenset(
    "abs absolute add all allclose amax amin any append arange arccos arccosh arcsin arcsinh "
    "arctan arctan2 arctanh argmax argmin argsort argwhere around array array_equal asarray "
    "atleast_1d average bincount bool_ cbrt ceil clip concatenate convolve copysign corrcoef "
    "cos cosh count_nonzero cov cross cumprod cumsum deg2rad degrees diag diff digitize divide "
    "dot e einsum empty equal exp exp2 expand_dims expm1 eye fabs flatnonzero flip float32 "
    "float64 floor floor_divide fmax fmin fmod full full_like geomspace greater greater_equal "
    "heaviside histogram hstack hypot inf inner int32 int64 interp isclose isfinite isinf isnan "
    "isscalar less less_equal linalg linspace log log10 log1p log2 logaddexp logical_and "
    "logical_not logical_or logical_xor logspace matmul max maximum mean median min minimum mod "
    "multiply nan nan_to_num nanargmax nanargmin nanmax nanmean nanmedian nanmin nanstd nansum "
    "ndarray ndim negative newaxis nonzero ones ones_like outer percentile pi polyfit polyval positive "
    "power prod ptp quantile rad2deg radians ravel reciprocal remainder repeat reshape rint roll "
    "round searchsorted shape sign signbit sin sinc sinh size sort sqrt square squeeze stack std "
    "subtract sum take tan tanh tensordot tile trace transpose trapezoid tril triu true_divide "
    "trunc unique var vstack where zeros zeros_like".split()
)
"""``numpy`` attributes a reward may use: numeric functions and constants, no I/O, no global
state (``seterr``, ``set_printoptions``), no submodule but ``linalg``."""

LINALG = frozenset("norm det inv pinv solve eigvals eigvalsh matrix_rank cond".split())
"""``numpy.linalg`` functions a reward may use."""

ARRAY = frozenset(
    "T all any argmax argmin argsort astype clip copy cumprod cumsum dot dtype fill flatten item "
    "max mean min nonzero prod ravel real imag reshape round shape size ndim sort squeeze std sum "
    "take tolist trace transpose var".split()
)
"""``numpy.ndarray`` (and numpy scalar) methods and properties: no ``tofile``, ``dump``,
``ctypes``, ``data``, ``base`` or ``view``."""

CONTAINERS = frozenset(
    "append extend insert pop remove index count clear reverse get items keys values setdefault "
    "update is_integer conjugate".split()
)
"""Methods of lists, dicts and floats."""

MATH = frozenset(n for n in dir(math) if not n.startswith("_"))
"""All of ``math``: pure functions and constants only."""

TYPING = frozenset("Any Dict List Optional Sequence Tuple Union".split())
"""``typing`` names, for the annotations models like to write."""

ATTRIBUTES = NUMPY | LINALG | ARRAY | CONTAINERS | MATH | TYPING
"""Every attribute name a reward may read."""

MODULES = {"math": MATH, "numpy": NUMPY, "numpy.linalg": LINALG, "typing": TYPING}
"""Importable modules and the names that may be imported from each."""

NUMPY_HINTS = {
    "random": "a reward must be deterministic (a function of its arguments only): no random numbers",
    "fft": "numpy.fft is not available in rewards; use elementwise numpy functions",
    "polynomial": "numpy.polynomial is not available in rewards; use np.polyval or np.polyfit",
    "emath": "numpy.emath is not available in rewards; use np.sqrt, np.log, … on valid inputs",
    "ma": "masked arrays are not available in rewards; use np.where or the nan* functions",
}
"""What to use instead of a numpy submodule that rewards may not use."""

SYSTEM = frozenset(
    "load loads save savez savez_compressed savetxt loadtxt genfromtxt fromfile tofile fromregex "
    "memmap dump dumps DataSource open os sys system popen builtins core lib ctypes ctypeslib "
    "f2py testing distutils".split()
)
"""Names refused with the reason "file or system access" (they are refused anyway: none is in
`ATTRIBUTES`; this only picks the message)."""

INTERNALS = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
"""Prefixes of generator, coroutine, async-generator, frame, traceback and code attributes."""

ALLOWED_SUMMARY = ("the public functions of math, a curated part of numpy and numpy.linalg, "
                   "ndarray methods, and list/dict methods")


def check_tree(tree: ast.Module) -> str | None:
    """The reason `tree` is refused (the first problem in source order), or None."""
    bound = bound_names(tree)
    changes = purity.problems(tree)
    for node in sorted(ast.walk(tree), key=_position):
        reason = changes.get(node) or _node_reason(node, bound)
        if reason:
            line = getattr(node, "lineno", None)
            return f"{reason} (line {line})" if line else reason
    return None


def _position(node: ast.AST) -> tuple[int, ...]:
    # inner nodes before outer ones starting at the same place (``().__class__`` before
    # ``().__class__.__bases__``): the shorter span sorts first
    return tuple(getattr(node, k, None) or 0 for k in ("lineno", "col_offset", "end_lineno", "end_col_offset"))


def bound_names(tree: ast.Module) -> set[str]:
    """Names the code itself binds: variables, functions, arguments, imports, loop targets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _node_reason(node: ast.AST, bound: set[str]) -> str | None:
    if type(node) not in NODES:
        return NODE_REASONS.get(type(node), f"{type(node).__name__} is not allowed in a reward")
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _import_reason(node)
    if isinstance(node, ast.Name):
        return _name_reason(node.id, bound)
    if isinstance(node, ast.Attribute):
        return _attribute_reason(node)
    if isinstance(node, ast.FunctionDef):
        return _function_reason(node)
    if isinstance(node, ast.Lambda):
        return _defaults_reason("lambda", node.args)
    return None


def _name_reason(name: str, bound: set[str]) -> str | None:
    if name.startswith("__"):
        return f"use of {name!r} is not allowed (no dunder names)"
    if name in ("setattr", "delattr") and name not in bound:
        return f"use of {name!r} is not allowed: changing an object's attributes keeps state (the reward must be pure)"
    if name not in bound and name not in BUILTINS:
        return (f"use of {name!r} is not allowed (builtins available: "
                f"{', '.join(sorted(BUILTINS - {'True', 'False', 'None'}))})")
    return None


def _attribute_reason(node: ast.Attribute) -> str | None:
    attr = node.attr
    if not isinstance(node.ctx, ast.Load):
        verb = "deleting" if isinstance(node.ctx, ast.Del) else "assigning to"
        return f"{verb} attribute {attr!r} is not allowed (the reward must be pure)"
    if attr.startswith("_"):
        return f"access to attribute {attr!r} is not allowed (no dunder or private attributes)"
    if attr.startswith(INTERNALS):
        return f"attribute {attr!r} is not allowed (frames, tracebacks and code objects are off limits)"
    if attr in ("format", "format_map"):
        return f"attribute {attr!r} is not allowed (string formatting can read attributes)"
    if attr in SYSTEM:
        return f"attribute {attr!r} is not allowed (file or system access)"
    if attr in NUMPY_HINTS:
        return f"attribute {attr!r} is not allowed: {NUMPY_HINTS[attr]}"
    if attr not in ATTRIBUTES:
        return f"attribute {attr!r} is not allowed (allowed: {ALLOWED_SUMMARY})"
    return None


def _import_reason(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            reason = _module_reason(alias.name)
            if reason:
                return reason
        return None
    module = node.module or ""
    reason = _module_reason(module) if not node.level else f"relative import of {module!r} is not allowed"
    if reason:
        return reason
    for alias in node.names:
        if alias.name == "*":
            return f"'from {module} import *' is not allowed (import names explicitly)"
        if alias.name not in MODULES[module] and not (module == "numpy" and alias.name == "linalg"):
            hint = NUMPY_HINTS.get(alias.name) if module == "numpy" else None
            return f"import of {module}.{alias.name} is not allowed" + (f": {hint}" if hint else
                                                                         f" (allowed: {ALLOWED_SUMMARY})")
    return None


def _module_reason(name: str) -> str | None:
    if name in MODULES:
        return None
    parts = name.split(".")
    if parts[0] == "numpy" and len(parts) > 1 and parts[1] in NUMPY_HINTS:
        return f"import of {name!r} is not allowed: {NUMPY_HINTS[parts[1]]}"
    return f"import of {name!r} is not allowed (only math, numpy, numpy.linalg and typing)"


def _function_reason(node: ast.FunctionDef) -> str | None:
    if node.decorator_list:
        return f"decorators are not allowed (function {node.name!r})"
    return _defaults_reason(f"function {node.name!r}", node.args)


def _defaults_reason(where: str, args: ast.arguments) -> str | None:
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not _constant(default):
            return (f"default argument {ast.unparse(default)!r} of {where} is not allowed: defaults must be "
                    "constants (numbers, strings, None or tuples of them); a mutable default keeps state "
                    "between calls and the reward must be pure")
    return None


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _constant(node.operand)
    return isinstance(node, ast.Tuple) and all(_constant(e) for e in node.elts)
