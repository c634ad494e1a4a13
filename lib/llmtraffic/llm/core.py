"""The `LLM` front end: one `complete` call for every backend, a cassette and a token counter.

A backend only turns chat messages into sampled texts (`Backend.generate`). `LLM` adds what
the studies need around it: input checks, the cassette (record / replay, so that a study run
once against a paid API re-runs offline bit for bit) and `usage()`, the token and latency
totals the notebooks report as LLM cost.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Protocol

from .cassette import Cassette, request_key

ROLES = ("system", "user", "assistant")


class LLMError(RuntimeError):
    """A backend could not produce an answer (after retries, where they apply)."""


@dataclass(frozen=True)
class Completion:
    """What a backend returns for one request."""

    texts: list[str]
    """The `n` sampled answers."""
    prompt_tokens: int
    """Prompt tokens billed: once per request, whatever `n` (as the OpenAI API bills them)."""
    completion_tokens: int
    """Tokens generated over all `n` answers."""


class Backend(Protocol):
    """Turns chat messages into `n` sampled texts."""

    name: str
    """Backend kind as written in configs (`openai`, `hf`); part of the cassette key."""
    model: str
    """Model identifier; part of the cassette key."""

    def generate(
        self, messages: list[dict], n: int, temperature: float, max_tokens: int, seed: int | None, **constraint
    ) -> Completion:
        """``constraint``: ``grammar``, ``json_schema`` or ``stop`` when the request has one (a
        backend that cannot constrain decoding raises `LLMError`)."""


@dataclass
class Usage:
    """Running totals of one `LLM`: the LLM cost of an experiment."""

    calls: int = 0
    """Requests answered (live or from the cassette)."""
    live_calls: int = 0
    """Requests that reached the backend (the rest came from the cassette)."""
    prompt_tokens: int = 0
    """Prompt tokens over all requests, including those replayed (their recorded cost)."""
    completion_tokens: int = 0
    """Generated tokens over all requests, including those replayed."""
    latency_s: float = 0.0
    """Backend wall time over all requests (recorded latency for replayed ones)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict:
        return asdict(self) | {"total_tokens": self.total_tokens}


class LLM:
    """A chat model behind one interface, with an optional cassette.

    Cassette modes: ``record`` answers from the cassette when it already holds the request
    and otherwise asks the backend and appends the answer (so an interrupted run resumes
    without paying twice); ``replay`` answers only from the cassette and raises
    `CassetteMiss` otherwise; ``off`` always asks the backend.

    Identical requests made repeatedly (same messages and sampling parameters, e.g. `k`
    candidates asked one by one) are told apart by their occurrence number, so a replay
    returns the same sequence of answers the recording saw.
    """

    def __init__(self, backend: Backend, cassette: Cassette | None = None, mode: str = "off"):
        if mode not in ("record", "replay", "off"):
            raise ValueError(f"cache.mode must be record, replay or off, got {mode!r}")
        if mode != "off" and cassette is None:
            raise ValueError(f"cache.mode {mode!r} needs cache.path")
        self.backend = backend
        self.cassette = cassette
        self.mode = mode
        self._usage = Usage()
        self._occurrences: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"LLM({self.backend.name}:{self.backend.model}, cache={self.mode})"

    def usage(self) -> Usage:
        """A copy of the totals so far."""
        return Usage(**asdict(self._usage))

    def complete(
        self,
        messages: list[dict],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        grammar: str | None = None,
        json_schema: dict | None = None,
        stop: list[str] | None = None,
    ) -> list[str]:
        """`n` sampled answers to chat `messages` (``[{"role": ..., "content": ...}]``).

        ``grammar`` (GBNF) or ``json_schema`` constrain decoding where the backend supports it (a
        llama.cpp server); ``stop`` ends each answer before the first of these strings, as the
        OpenAI API does (the answer leaves the string out). They join the cassette key only when
        given, so unconstrained requests keep their keys."""
        check_messages(messages)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        params = {"n": n, "temperature": float(temperature), "max_tokens": max_tokens, "seed": seed}
        if grammar is not None and json_schema is not None:
            raise ValueError("give grammar or json_schema, not both")
        if grammar is not None:
            params["grammar"] = grammar
        if json_schema is not None:
            params["json_schema"] = json_schema
        if stop is not None:
            if not stop or not all(isinstance(x, str) and x for x in stop):
                raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
            params["stop"] = list(stop)
        key = request_key(self.backend.name, self.backend.model, messages, params)
        occurrence = self._occurrences.get(key, 0)
        self._occurrences[key] = occurrence + 1

        if self.mode == "off":
            return list(self._ask(messages, params, key, occurrence)["texts"])
        if self.mode == "replay":
            entry = self.cassette.get(key, occurrence)
            if entry is None:
                self.cassette.miss(key, occurrence, messages)
        else:
            with self.cassette.claim(key, occurrence):  # a parallel recorder may be asking it now
                entry = self.cassette.get(key, occurrence)
                if entry is None:
                    return list(self._ask(messages, params, key, occurrence)["texts"])
        self._usage.calls += 1
        self._count(entry)
        return list(entry["texts"])

    def _ask(self, messages: list[dict], params: dict, key: str, occurrence: int) -> dict:
        start = time.perf_counter()
        done = self.backend.generate(messages, **params)
        entry = {
            "key": key,
            "occurrence": occurrence,
            "backend": self.backend.name,
            "model": self.backend.model,
            "messages": messages,
            "params": params,
            "texts": done.texts,
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
            "latency_s": time.perf_counter() - start,
        }
        if len(done.texts) != params["n"]:
            raise LLMError(f"{self!r} returned {len(done.texts)} answers, expected n={params['n']}")
        if self.mode == "record":
            self.cassette.append(entry)
        self._usage.calls += 1
        self._usage.live_calls += 1
        self._count(entry)
        return entry

    def _count(self, entry: dict) -> None:
        self._usage.prompt_tokens += entry["prompt_tokens"]
        self._usage.completion_tokens += entry["completion_tokens"]
        self._usage.latency_s += entry["latency_s"]


def check_messages(messages: list[dict]) -> None:
    """Raise `ValueError` naming the first malformed chat message."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ValueError(f"messages[{i}] must be a dict with keys 'role' and 'content'")
        if message["role"] not in ROLES:
            raise ValueError(f"messages[{i}].role must be one of {ROLES}, got {message['role']!r}")
        if not isinstance(message["content"], str):
            raise ValueError(f"messages[{i}].content must be a string")
