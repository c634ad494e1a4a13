"""Dependencies point one way: base → shared layers → studies (docs/architecture.md).

Reads every import under ``lib/llmtraffic`` with :mod:`ast` (module level and inside functions,
relative imports resolved, ``importlib.import_module`` with a literal name included; imports
under ``if TYPE_CHECKING:`` excepted, since they never run), builds the module graph and fails
on any cycle and on any import from a shared layer into a study.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"
PACKAGE = "llmtraffic"
BASE = {PACKAGE, f"{PACKAGE}.paths"}
RANK = {"base": 0, "llm": 1, "study": 2, "rl": 3, "bus": 4, "signal": 4}
"""A module imports only from its own subpackage or from a lower rank: the shared layers (llm,
then the harness, then RL) below the studies, which are independent of each other."""
STUDIES = ("bus", "signal")


def modules(lib: Path) -> dict[str, Path]:
    """Every module of the package under ``lib``, by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted((lib / PACKAGE).rglob("*.py")):
        parts = path.relative_to(lib).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST):
    """All nodes except the bodies of ``if TYPE_CHECKING:`` (their ``else`` still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _absolute(name: str, level: int, here: str, is_package: bool) -> str:
    """``from ..x import y`` in module ``here`` → the absolute name of ``..x``."""
    if not level:
        return name
    parts = here.split(".") if is_package else here.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        raise ValueError(f"{here}: relative import beyond the top-level package")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _import_module_target(node: ast.Call, here: str, is_package: bool) -> str | None:
    """The module named by ``import_module("literal"[, __name__ or __package__])``, else None."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None  # a computed name: cannot be read statically
    target = arg.value
    level = len(target) - len(target.lstrip("."))
    return _absolute(target[level:], level, here, is_package)


def imports(path: Path, here: str) -> set[str]:
    """Absolute names of everything that the module ``here`` (file ``path``) imports."""
    is_package = path.name == "__init__.py"
    named = set()
    for node in _nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node.module or "", node.level, here, is_package)
            # `from p import m` depends on the module p.m where m is one, else on p itself
            named.update(f"{source}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and (target := _import_module_target(node, here, is_package)):
            named.add(target)
    return named


def graph(lib: Path) -> dict[str, set[str]]:
    """Module → the package's modules that it imports (the most specific module each name names)."""
    known = modules(lib)
    edges = {}
    for here, path in known.items():
        targets = set()
        for name in imports(path, here):
            while name and name not in known:  # `m.f` where f is a name in m: m
                name = name.rpartition(".")[0]
            if name and name != here:
                targets.add(name)
        edges[here] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def cycle_path(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One closed path through a cycle's first module, for the failure message."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(edges[path[-1]] & members):
            if w == start:
                return path + [start]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    raise AssertionError(f"{component} is not a cycle")


def layer(module: str) -> str:
    """``base`` for the base modules, else the subpackage (``llmtraffic.rl.dqn`` → ``rl``)."""
    return "base" if module in BASE else module.split(".")[1]


def against_layers(edges: dict[str, set[str]]) -> list[str]:
    """Imports that do not point down :data:`RANK`, each with the rule it breaks."""
    bad = []
    for here, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = layer(here), layer(target)
            if a == b or RANK[b] < RANK[a]:
                continue
            if b in STUDIES:
                why = "studies are independent" if a in STUDIES else "a shared layer imports a study"
            else:
                why = f"{a} is below {b}"
            bad.append(f"{here} -> {target} ({why})")
    return bad


def test_no_import_cycles():
    edges = graph(LIB)
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(
        f"{len(c)} modules: " + " -> ".join(cycle_path(edges, c)) for c in found
    )


def test_imports_point_down_the_layers():
    bad = against_layers(graph(LIB))
    assert not bad, "imports against the layers (docs/architecture.md):\n" + "\n".join(bad)


def test_every_subpackage_has_a_layer():
    """A new subpackage (or top-level module) must be given a rank before the rule can hold."""
    unranked = sorted({layer(m) for m in modules(LIB)} - set(RANK))
    assert not unranked, f"give {unranked} a rank in RANK (tests/test_layers.py) and docs/architecture.md"


# The reader itself, on small trees whose graph is known by hand.


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_reader_resolves_relative_function_level_and_dynamic_imports(tmp_path):
    lib = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "paths.py": "import os\n",
            "rl/__init__.py": "",
            "rl/a.py": "from ..paths import ROOT\nfrom . import b\nfrom .b import f\n",
            "rl/b.py": "def f():\n    from llmtraffic.signal.env import E\n",
            "signal/__init__.py": "from importlib import import_module\nimport_module('.env', __name__)\n",
            "signal/env.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..rl import a\n"
                "else:\n    import llmtraffic.rl\n"
            ),
        },
    )
    assert graph(lib) == {
        "llmtraffic": set(),
        "llmtraffic.paths": set(),
        "llmtraffic.rl": set(),
        "llmtraffic.rl.a": {"llmtraffic.paths", "llmtraffic.rl.b"},
        "llmtraffic.rl.b": {"llmtraffic.signal.env"},
        "llmtraffic.signal": {"llmtraffic.signal.env"},
        "llmtraffic.signal.env": {"llmtraffic.rl"},
    }
    assert against_layers(graph(lib)) == ["llmtraffic.rl.b -> llmtraffic.signal.env (a shared layer imports a study)"]
    assert cycles(graph(lib)) == []


def test_cycles_are_found_and_reported_as_a_path():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert cycles(edges) == [["a", "b", "c"], ["e", "f"]]
    assert cycle_path(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_imports_up_or_across_the_layers_are_named():
    edges = {
        "llmtraffic.paths": {"llmtraffic.study.data"},
        "llmtraffic.llm.core": {"llmtraffic.paths", "llmtraffic.study.atomic"},
        "llmtraffic.rl.dqn": {"llmtraffic.study.atomic", "llmtraffic.llm.core", "llmtraffic.rl.checks"},
        "llmtraffic.bus.sim": {"llmtraffic.signal.env", "llmtraffic.rl.dqn"},
    }
    assert against_layers(edges) == [
        "llmtraffic.bus.sim -> llmtraffic.signal.env (studies are independent)",
        "llmtraffic.llm.core -> llmtraffic.study.atomic (llm is below study)",
        "llmtraffic.paths -> llmtraffic.study.data (base is below study)",
    ]


def test_relative_import_beyond_the_package_is_an_error():
    with pytest.raises(ValueError, match="beyond the top-level package"):
        _absolute("x", 3, "llmtraffic.rl", is_package=False)
