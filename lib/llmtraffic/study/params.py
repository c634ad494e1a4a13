"""Profiles and parameters: ``params/<stem>/<profile>.yaml`` checked against a notebook's ``parameters`` cell.

A profile file is a YAML mapping of parameter overrides; ``extends: <profile>`` takes another
profile of the same notebook as its base. Every key must be a parameter of the notebook's
``parameters`` cell and every value must have the type of that parameter's default (down to list
elements and the values of a dict's keys), so a typo stops the run before anything executes.

Constraints. A parameter's comment may start with a constraint, ended by ``;`` or the end of
the comment; it applies to the value, or to every element of a list::

    episodes = 70  # >= 1; §5.1: 70 episodes
    slack = 0.1  # >= 0 and < 1
    executor = "serial"  # serial | processes | ray

Parameters named by :data:`CONVENTIONS` (``episodes``, ``*horizon_h``, ``*seeds``, ``executor``,
…) get their constraint without a comment, also as keys of a dict parameter (``dqn.episodes``),
and every number must be finite.
"""

from __future__ import annotations

import ast
import fnmatch
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .executor import EXECUTORS

PROFILES = ("smoke", "quick", "paper")
DEFAULT_PROFILE = "quick"

CONVENTIONS = {
    "executor": " | ".join(EXECUTORS),
    "jobs": ">= 1",
    "episodes": ">= 1", "*_episodes": ">= 1",
    "iterations": ">= 1", "*_iterations": ">= 1",
    "*horizon_h": "> 0", "episode_s": "> 0", "*_every_s": "> 0",
    "*seeds": ">= 0", "*_seed": ">= 0", "seed": ">= 0",
}
"""Constraints every notebook gets for a parameter (or a dict key) whose name matches the glob."""

RETIRED = {
    "seeds": ("eval_seeds", "agent_seeds"),
    "test_seeds": ("design_seeds",),
    "sensitivity_seeds": ("eval_seeds",),
}
"""Parameter names retired by the study's vocabulary (issue 11) → their replacements."""

MEANING = {
    "eval_seeds": "held-out test episodes a controller is evaluated on",
    "agent_seeds": "independent trainings of a learned controller",
    "design_seeds": "episodes the reward-design loop tests candidate rewards on",
}


class ParamError(ValueError):
    """Parameters that do not fit a notebook; the runner exits with status 2 on it."""


_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_BOUND = rf"(>=|<=|>|<)\s*({_NUMBER})"
_CHOICE = r"[\w.-]+"


@dataclass(frozen=True)
class Constraint:
    """Bounds (``>= 1 and < 5``) or choices (``serial | processes | ray``) of a parameter's values."""

    text: str
    bounds: tuple[tuple[str, float], ...] = ()
    choices: tuple[str, ...] = ()

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (a scalar) breaks the constraint, or None."""
        if self.choices and str(value) not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        for op, limit in self.bounds:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not _OPS[op](value, limit):
                return f"must be {self.text}"
        return None


def parse_constraint(comment: str) -> Constraint | None:
    """The constraint that starts ``comment`` (up to ``;``), or None if it starts with prose.

    A comment starting with ``<`` or ``>`` must be a valid bound: a typo never disables a check.
    """
    head = comment.split(";", 1)[0].strip()
    if re.fullmatch(rf"{_BOUND}(\s+and\s+{_BOUND})*", head):
        bounds = tuple((op, float(num)) for op, num in re.findall(_BOUND, head))
        return Constraint(head, bounds=bounds)
    if head[:1] in "<>" and head:
        raise ParamError(f"constraint {head!r} is not `>= x`, `> x`, `<= x`, `< x` joined by `and`")
    if re.fullmatch(rf"{_CHOICE}(\s*\|\s*{_CHOICE})+", head):
        return Constraint(head, choices=tuple(c.strip() for c in head.split("|")))
    return None


def _convention(name: str) -> Constraint | None:
    for pattern, text in CONVENTIONS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return parse_constraint(text)
    return None


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    help: str = ""
    constraint: Constraint | None = None

    @property
    def type_name(self) -> str:
        return "any" if self.default is None else type(self.default).__name__


def parameters_cell(notebook: Path):
    """The notebook's one cell tagged ``parameters`` (the cell papermill injects after)."""
    import nbformat

    cells = [c for c in nbformat.read(str(notebook), as_version=4).cells
             if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParamError(f"{notebook.name}: expected one cell tagged 'parameters', found {len(cells)}")
    return cells[0]


def notebook_parameters(notebook: Path) -> dict[str, Parameter]:
    """Parameters declared in the notebook's cell tagged ``parameters`` (the cell papermill
    injects after), in order, with their literal defaults, trailing comments as help and the
    constraint a comment starts with.

    The cell is parsed with :mod:`ast` rather than papermill's line regex, which drops a
    parameter whose comment contains ``=`` or quotes. Defaults must be Python literals, so
    their types can be checked without running code.
    """
    source = parameters_cell(notebook).source
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ParamError(f"{notebook.name}: parameters cell does not parse: {err}") from err
    params = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(target, ast.Name) or node.value is None:
            raise ParamError(f"{notebook.name}: parameters cell line {node.lineno} is not a plain `name = literal`")
        try:
            default = ast.literal_eval(node.value)
        except ValueError as err:
            raise ParamError(
                f"{notebook.name}: default of parameter {target.id!r} is not a literal ({ast.unparse(node.value)!r})"
            ) from err
        rest = lines[node.end_lineno - 1][node.end_col_offset:].strip()
        help = rest[1:].strip() if rest.startswith("#") else ""
        try:
            constraint = parse_constraint(help)
        except ParamError as err:
            raise ParamError(f"{notebook.name}: parameter {target.id!r}: {err}") from err
        params[target.id] = Parameter(target.id, default, help, constraint)
    return params


class _Mismatch(Exception):
    """A value that does not fit; ``where`` is its path inside the parameter (``[0]``, ``.episodes``)."""

    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where = where


def _conform(default: Any, value: Any, constraints: list[Constraint], where: str = "") -> Any:
    """``value`` checked against the type of ``default`` and ``constraints`` (floats normalised);
    raises :class:`_Mismatch`. A None default accepts anything."""
    if default is None:
        return value
    if isinstance(default, float) and isinstance(value, str):
        value = _yaml_float(value)  # PyYAML reads "1e-3" as a string
    if not _same_type(default, value):
        shown = f"{type(value).__name__} {value!r}"
        raise _Mismatch(where, f"must be {type(default).__name__} (default {default!r}), got {shown}")
    if isinstance(default, (list, tuple)):
        template = default[0] if default else None
        return [_conform(template, v, constraints, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(default, dict):
        return _conform_dict(default, value, where)
    if isinstance(value, float) and not math.isfinite(value):
        raise _Mismatch(where, f"must be finite, got {value!r}")
    for constraint in constraints:
        problem = constraint.problem(value)
        if problem:
            raise _Mismatch(where, f"{problem}, got {value!r}")
    return float(value) if isinstance(default, float) else value


def _conform_dict(default: dict, value: dict, where: str) -> dict:
    """Keys the default has are checked like parameters; others pass (a dict default such as
    ``dqn`` lists the usual settings of a config that takes more)."""
    out = {}
    for key, item in value.items():
        rule = _convention(str(key))
        out[key] = _conform(default.get(key), item, [rule] if rule else [], f"{where}.{key}")
    return out


def _same_type(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def validate(stem: str, values: dict[str, Any], declared: dict[str, Parameter]) -> dict[str, Any]:
    """Check ``values`` against the declared parameters; return them (floats normalised).

    A retired name (:data:`RETIRED`) is accepted only while the notebook still declares it.
    """
    allowed = ", ".join(sorted(declared)) or "(none)"
    checked = {}
    for key, value in values.items():
        if key not in declared:
            if key in RETIRED:
                raise ParamError(f"notebook {stem}: parameter {key!r} was renamed (issue 11): {_renamed(key, declared)}")
            raise ParamError(f"notebook {stem}: unknown parameter {key!r}; allowed: {allowed}")
        par = declared[key]
        rules = [c for c in (par.constraint, _convention(key)) if c is not None]
        try:
            checked[key] = None if value is None and par.default is None else _conform(par.default, value, rules)
        except _Mismatch as err:
            raise ParamError(f"notebook {stem}: parameter {key + err.where!r} {err}") from None
    return checked


def _renamed(key: str, declared: dict[str, Parameter]) -> str:
    names = [n for n in RETIRED[key] if n in declared] or list(RETIRED[key])
    return "use " + " or ".join(f"{n} ({MEANING[n]})" for n in names)


def _yaml_float(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamError(f"{path}: not valid YAML: {_yaml_message(err)}") from None


def _yaml_message(err: yaml.YAMLError) -> str:
    """The parser's message on one line: ``while parsing …: expected …, line 1, column 5``."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem is None:
        return " ".join(str(err).split())
    mark = err.problem_mark
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return (f"{err.context}: " if err.context else "") + err.problem + where


def known_profiles(params_dir: Path) -> list[str]:
    """The built-in profiles and every other ``<profile>.yaml`` under ``params_dir``."""
    found = {p.stem for p in Path(params_dir).glob("*/*.yaml")}
    return list(PROFILES) + sorted(found - set(PROFILES))


def check_profile(params_dir: Path, profile: str) -> None:
    if profile not in known_profiles(params_dir):
        raise ParamError(f"unknown profile {profile!r}; known profiles: {', '.join(known_profiles(params_dir))}")


def load_profile(params_dir: Path, stem: str, profile: str) -> dict[str, Any]:
    """Resolve ``params/<stem>/<profile>.yaml`` with its ``extends`` chain (base first).

    A notebook without a file for the profile runs with its defaults (empty dict).
    """
    chain: list[str] = []
    values: dict[str, Any] = {}
    name: str | None = profile
    layers = []
    while name is not None:
        if name in chain:
            raise ParamError(f"notebook {stem}: profile 'extends' cycle {' -> '.join(chain + [name])}")
        chain.append(name)
        path = Path(params_dir) / stem / f"{name}.yaml"
        if not path.exists():
            if name == profile:
                return {}
            raise ParamError(f"notebook {stem}: profile {chain[-2]!r} extends {name!r}, but {path} does not exist")
        data = _read_yaml(path) or {}
        if not isinstance(data, dict):
            raise ParamError(f"{path}: expected a mapping of parameter: value, got {type(data).__name__}")
        name = data.pop("extends", None)
        layers.append(data)
    for layer in reversed(layers):
        values.update(layer)
    return values


def parse_set(assignments: list[str]) -> dict[str, Any]:
    """``["eval_seeds=[0,1]", "lr=1e-3"]`` → values parsed as YAML; a key given twice is an error."""
    return merge_settings([], assignments)


def merge_settings(files: list[Path], assignments: list[str]) -> dict[str, Any]:
    """The user's settings from params files (YAML mappings) and ``--set key=value`` items.

    Every source adds keys; a key given twice (in two files, two ``--set`` items, or a file and
    a ``--set``) is an error naming both values, never a silent choice.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def add(key: str, value: Any, source: str) -> None:
        if key in values:
            raise ParamError(
                f"parameter {key!r} is given twice: {values[key]!r} ({sources[key]}) and {value!r} ({source}); give it once"
            )
        values[key], sources[key] = value, source

    for path in files:
        if not Path(path).is_file():
            raise ParamError(f"params file {path} does not exist")
        data = _read_yaml(Path(path)) or {}
        if not isinstance(data, dict):
            raise ParamError(f"{path}: expected a mapping of parameter: value, got {type(data).__name__}")
        for key, value in data.items():
            add(str(key), value, str(path))
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(f"--set expects key=value, got {item!r} (quote a value that holds spaces)")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ParamError(f"--set {item!r}: not valid YAML: {_yaml_message(err)}") from None
        add(key.strip(), value, f"--set {item}")
    return values


def differences(declared: dict[str, Parameter], profile_values: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that differ from the profile (its file over the notebook's defaults)."""
    base = {**{k: p.default for k, p in declared.items()}, **profile_values}
    return {k: v for k, v in values.items() if k not in base or base[k] != v}
