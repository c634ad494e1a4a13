"""LLM access shared by both studies: `from_config(cfg) -> LLM`, then `LLM.complete(messages)`.

Config (a dict, usually the ``llm:`` parameter of a notebook)::

    backend: local           # local | openai | hf | replay
    # local:  model (qwen2.5-coder-1.5b | smollm2-135m | /path/any.gguf), threads, n_ctx, seed,
    #         startup_timeout_s, timeout_s, max_retries, prompt_logits, prefix_cache_mb, draft:
    #         a llama.cpp server the study starts and stops
    # openai: base_url, model, api_key_env, timeout_s, max_retries, backoff_s, backoff_max_s, seed
    # hf:     path, model (name; default: directory name), quantization (null | nf4), device, seed
    # replay: cassette, model and source (the recorded model and backend; inferred when the
    #         cassette holds only one)
    cache: {path: llm/gpt4o.jsonl, mode: record}   # record (default with a path) | replay | off

Relative cassette paths are taken under the runs directory (``study.runs_dir()``), so a notebook
finds its cassette wherever papermill runs it. Re-running a recorded study offline: keep the config and set ``cache.mode: replay`` (no key
or network needed), or use ``backend: replay`` with the cassette alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..paths import runs_dir
from .cassette import Cassette, CassetteError, CassetteMiss, request_key
from .core import LLM, Completion, LLMError, Usage
from .openai_compat import LLMAuthError, LLMNotFoundError, LLMResponseError, OpenAIBackend, OpenAIConfig

__all__ = [
    "LLM", "Cassette", "CassetteError", "CassetteMiss", "Completion", "LLMAuthError", "LLMError", "LLMNotFoundError",
    "LLMResponseError", "Usage", "from_config", "request_key",
]


class ReplayBackend:
    """Stands in for the recorded backend: the cassette answers, nothing is generated."""

    def __init__(self, name: str, model: str):
        self.name = name
        self.model = model

    def generate(self, messages, n, temperature, max_tokens, seed, **constraint):
        raise LLMError("the replay backend cannot generate; the request must be in the cassette")


def from_config(cfg: dict) -> LLM:
    """Build an `LLM` from a config dict (see the module docstring); unknown keys are errors."""
    cfg = dict(cfg)
    backend = cfg.pop("backend", None)
    cache = cfg.pop("cache", None) or {}
    _check_keys(cache, {"path", "mode"}, set(), "llm.cache")
    mode = cache.get("mode", "record" if cache.get("path") else "off")
    cassette = Cassette(cassette_path(cache["path"]), record=mode == "record") if cache.get("path") else None
    if backend == "local":
        from .local import LocalBackend, LocalConfig

        _check_keys(cfg, {f.name for f in dataclasses.fields(LocalConfig)}, {"model"}, "llm (local)")
        return LLM(LocalBackend(LocalConfig(**cfg)), cassette, mode)
    if backend == "openai":
        openai_keys = {f.name for f in dataclasses.fields(OpenAIConfig)}
        _check_keys(cfg, openai_keys, {"base_url", "model"}, "llm (openai)")
        return LLM(OpenAIBackend(OpenAIConfig(**cfg)), cassette, mode)
    if backend == "hf":
        _check_keys(cfg, {"path", "model", "quantization", "device", "seed"}, {"path"}, "llm (hf)")
        return LLM(_hf(cfg), cassette, mode)
    if backend == "replay":
        _check_keys(cfg, {"cassette", "model", "source"}, {"cassette"}, "llm (replay)")
        if cassette is not None:
            raise ValueError("llm (replay): give the file as 'cassette', without cache")
        return _replay(cfg)
    raise ValueError(f"llm.backend must be local, openai, hf or replay, got {backend!r}")


def cassette_path(path: str | Path) -> Path:
    """`path`, or `path` under the runs directory when it is relative."""
    return runs_dir() / path if not Path(path).is_absolute() else Path(path)


def _check_keys(cfg: dict, allowed: set[str], required: set[str], where: str) -> None:
    unknown, missing = set(cfg) - allowed, required - set(cfg)
    if unknown or missing:
        raise ValueError(
            f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)} "
            f"(allowed: {sorted(allowed)})"
        )


def _hf(cfg: dict):
    from .hf import HFBackend, load  # transformers is slow to import; only load it when asked

    model, tokenizer = load(cfg["path"], cfg.get("quantization"), cfg.get("device", "cpu"))
    name = cfg.get("model") or Path(cfg["path"]).name
    return HFBackend(model, tokenizer, name, seed=cfg.get("seed", 0))


def _replay(cfg: dict) -> LLM:
    path = cassette_path(cfg["cassette"])
    if not path.exists():
        raise FileNotFoundError(f"llm (replay): cassette {path} does not exist")
    cassette = Cassette(path)
    pairs = sorted(
        (b, m) for b, m in cassette.sources()
        if cfg.get("source", b) == b and cfg.get("model", m) == m
    )
    if len(pairs) != 1:
        raise ValueError(
            f"llm (replay): cassette {path} holds (backend, model) pairs "
            f"{sorted(cassette.sources())}; name the one to replay with 'source' and 'model'"
        )
    return LLM(ReplayBackend(*pairs[0]), cassette, "replay")
