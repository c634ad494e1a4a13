"""Profiles and parameters: ``params/<stem>/<profile>.yaml`` checked against a notebook's ``parameters`` cell.

A profile file is a YAML mapping of parameter overrides; ``extends: <profile>`` takes another
profile of the same notebook as its base. Every key must be a parameter of the notebook's
``parameters`` cell and every value must have the type of that parameter's default, so a typo
stops the run before anything executes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROFILES = ("smoke", "quick", "paper")
DEFAULT_PROFILE = "quick"


class ParamError(ValueError):
    """Parameters that do not fit a notebook; the runner exits with status 2 on it."""


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    help: str = ""

    @property
    def type_name(self) -> str:
        return "any" if self.default is None else type(self.default).__name__


def notebook_parameters(notebook: Path) -> dict[str, Parameter]:
    """Parameters declared in the notebook's cell tagged ``parameters`` (the cell papermill
    injects after), in order, with their literal defaults and trailing comments as help.

    The cell is parsed with :mod:`ast` rather than papermill's line regex, which drops a
    parameter whose comment contains ``=`` or quotes. Defaults must be Python literals, so
    their types can be checked without running code.
    """
    import nbformat

    cells = [c for c in nbformat.read(str(notebook), as_version=4).cells
             if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParamError(f"{notebook.name}: expected one cell tagged 'parameters', found {len(cells)}")
    source = cells[0].source
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
        params[target.id] = Parameter(target.id, default, rest[1:].strip() if rest.startswith("#") else "")
    return params


def _accepts(default: Any, value: Any) -> bool:
    """Whether ``value`` may replace a parameter whose default is ``default``."""
    if default is None or value is None:
        return True  # a None default declares "any type"; None switches an option off
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
    """Check ``values`` against the declared parameters; return them (floats normalised)."""
    allowed = ", ".join(sorted(declared)) or "(none)"
    checked = {}
    for key, value in values.items():
        if key not in declared:
            raise ParamError(f"notebook {stem}: unknown parameter {key!r}; allowed: {allowed}")
        default = declared[key].default
        if isinstance(default, float) and isinstance(value, str):
            value = _yaml_float(value)  # PyYAML reads "1e-3" as a string
        if not _accepts(default, value):
            raise ParamError(
                f"notebook {stem}: parameter {key!r} must be {declared[key].type_name} "
                f"(default {default!r}), got {type(value).__name__} {value!r}; allowed: {allowed}"
            )
        checked[key] = float(value) if isinstance(default, float) and value is not None else value
    return checked


def _yaml_float(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


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
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ParamError(f"{path}: expected a mapping of parameter: value, got {type(data).__name__}")
        name = data.pop("extends", None)
        layers.append(data)
    for layer in reversed(layers):
        values.update(layer)
    return values


def parse_set(assignments: list[str]) -> dict[str, Any]:
    """``["seeds=[0,1]", "lr=1e-3"]`` → values parsed as YAML."""
    out = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(raw)
    return out
