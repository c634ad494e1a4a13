"""Backend for any OpenAI-compatible chat-completions endpoint (hosted APIs, vLLM, Ollama,
llama.cpp server).

Written on plain `httpx` rather than the `openai` client: the protocol is one POST, httpx is
already pinned for the study, and owning the retry loop gives the same backoff and the same
error messages for every server (the `openai` client's retries and exceptions differ across
versions and it would be one more pinned dependency).

Retries: 429, 5xx and connection errors/timeouts are retried with exponential backoff and
full jitter (a `Retry-After` header, when sent, is a lower bound). 401/403 and 404 fail at
once with what to check; so does a body that is not a chat-completions response.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import httpx
import numpy as np

from .core import Completion, LLMError


class LLMAuthError(LLMError):
    """The endpoint refused the API key (401/403)."""


class LLMNotFoundError(LLMError):
    """The endpoint or model does not exist (404)."""


class LLMResponseError(LLMError):
    """The endpoint answered with something that is not a chat-completions response."""


@dataclass
class OpenAIConfig:
    """Settings of the `openai` backend (the keys of its config dict)."""

    base_url: str
    """Endpoint root, e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``."""
    model: str
    """Model name sent with every request (and part of the cassette key)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; None for servers without keys."""
    timeout_s: float = 60.0
    """Per-request timeout (connect, read, write) in seconds."""
    max_retries: int = 5
    """Retries after the first attempt on 429, 5xx, connection errors and timeouts."""
    backoff_s: float = 1.0
    """Backoff cap of the first retry; doubled on each further retry (full jitter below it)."""
    backoff_max_s: float = 60.0
    """Largest backoff cap."""
    seed: int = 0
    """Seed of the jitter generator."""

    def __post_init__(self) -> None:
        for name in ("base_url", "model"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"llm (openai): {name} must be a non-empty string, got {getattr(self, name)!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"llm (openai): base_url must start with http:// or https://, got {self.base_url!r}")
        if self.api_key_env is not None and (not isinstance(self.api_key_env, str) or not self.api_key_env):
            raise ValueError(f"llm (openai): api_key_env must name an environment variable (or be null), "
                             f"got {self.api_key_env!r}")
        _check_number("max_retries", self.max_retries, 0, integer=True)
        _check_number("seed", self.seed, 0, integer=True)
        _check_number("timeout_s", self.timeout_s, 0, strict=True)
        _check_number("backoff_s", self.backoff_s, 0)
        _check_number("backoff_max_s", self.backoff_max_s, 0)


def _check_number(name: str, value, low: float, integer: bool = False, strict: bool = False) -> None:
    """`ValueError` naming the field unless `value` is a (whole, when `integer`) number >= `low`
    (> `low` when `strict`)."""
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and (value > low if strict else value >= low)
    if not ok:
        what = "an integer" if integer else "a number"
        raise ValueError(f"llm (openai): {name} must be {what} {'>' if strict else '>='} {low:g}, got {value!r}")


RETRY_STATUS = {429, 500, 502, 503, 504}


class OpenAIBackend:
    """Chat completions over HTTP."""

    name = "openai"

    def __init__(self, config: OpenAIConfig):
        self.config = config
        self.model = config.model
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._jitter = np.random.default_rng(config.seed)
        self._client = httpx.Client(timeout=config.timeout_s)

    def generate(
        self, messages: list[dict], n: int, temperature: float, max_tokens: int, seed: int | None,
        grammar: str | None = None, json_schema: dict | None = None, stop: list[str] | None = None,
    ) -> Completion:
        # Some servers (Ollama, llama.cpp) ignore `n` and send one choice: ask again for the rest.
        texts: list[str] = []
        prompt_tokens = completion_tokens = 0
        while len(texts) < n:
            body = {
                "model": self.model,
                "messages": messages,
                "n": n - len(texts),
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
            if seed is not None:
                body["seed"] = seed + len(texts)  # a repeated request must not repeat samples
            if grammar is not None:  # llama.cpp's extension of the protocol
                body["grammar"] = grammar
            if json_schema is not None:  # llama-cpp-python's form of a schema-constrained answer
                body["response_format"] = {"type": "json_object", "schema": json_schema}
            if stop is not None:
                body["stop"] = stop
            answer = self._post(body)
            texts += parse_choices(answer, self.url)
            used = parse_usage(answer, self.url)
            prompt_tokens += used[0]  # each request is billed
            completion_tokens += used[1]
        return Completion(texts[:n], prompt_tokens, completion_tokens)

    def _headers(self) -> dict:
        env = self.config.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise LLMAuthError(f"environment variable {env} (api_key_env) is not set")
        return {"Authorization": f"Bearer {key}"}

    def _post(self, body: dict) -> dict:
        headers = self._headers()
        for attempt in range(self.config.max_retries + 1):
            last = attempt == self.config.max_retries
            try:
                response = self._client.post(self.url, json=body, headers=headers)
            except httpx.TransportError as error:
                if last:
                    raise LLMError(
                        f"{self.url}: {type(error).__name__} ({error}) after "
                        f"{attempt + 1} attempts (timeout_s={self.config.timeout_s})"
                    ) from error
                self._sleep(attempt, None)
                continue
            if response.status_code in RETRY_STATUS and not last:
                self._sleep(attempt, response.headers.get("retry-after"))
                continue
            return self._check(response, attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _check(self, response: httpx.Response, attempt: int) -> dict:
        status = response.status_code
        if status in (401, 403) and self.config.api_key_env is None:
            raise LLMAuthError(
                f"{self.url} refused the request (HTTP {status}) and no API key was sent: set "
                "api_key_env to the name of the environment variable that holds the key. "
                f"Server said: {response.text[:200]}"
            )
        if status in (401, 403):
            raise LLMAuthError(
                f"{self.url} refused the API key (HTTP {status}); check the variable "
                f"{self.config.api_key_env} (api_key_env). Server said: {response.text[:200]}"
            )
        if status == 404:
            raise LLMNotFoundError(
                f"{self.url} or model {self.model!r} not found (HTTP 404); check base_url and "
                f"model. Server said: {response.text[:200]}"
            )
        if status != 200:
            raise LLMError(
                f"{self.url} answered HTTP {status} after {attempt + 1} attempts: {response.text[:200]}"
            )
        try:
            answer = response.json()
        except ValueError as error:
            raise LLMResponseError(
                f"{self.url} sent a body that is not JSON: {response.text[:200]!r}"
            ) from error
        if not isinstance(answer, dict):
            raise LLMResponseError(f"{self.url} sent JSON that is not an object: {response.text[:200]!r}")
        return answer

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        cap = min(self.config.backoff_max_s, self.config.backoff_s * 2**attempt)
        delay = self._jitter.uniform(0, cap)
        if retry_after is not None:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:  # an HTTP date: fall back to our own backoff
                pass
        time.sleep(delay)


def parse_usage(answer: dict, url: str) -> tuple[int, int]:
    """(prompt, completion) tokens from ``usage``; an absent ``usage`` or field counts 0, a field
    that is present but not a non-negative integer (``null``, ``"12"``) is `LLMResponseError`."""
    usage = answer.get("usage")
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise LLMResponseError(f"{url}: 'usage' is {usage!r}, not an object of token counts")
    counts = []
    for field in ("prompt_tokens", "completion_tokens"):
        value = usage.get(field, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LLMResponseError(
                f"{url}: usage.{field} is {value!r}, not a token count (a non-negative integer); the "
                "server must report token usage as integers or leave the field out"
            )
        counts.append(value)
    return counts[0], counts[1]


def parse_choices(answer: dict, url: str) -> list[str]:
    """The texts of ``choices[*].message.content``, or `LLMResponseError` saying what is missing."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        raise LLMResponseError(f"{url} sent no 'choices' list: {str(answer)[:200]}")
    texts = []
    for i, choice in enumerate(choices):
        content = (choice.get("message") or {}).get("content") if isinstance(choice, dict) else None
        if not isinstance(content, str):
            raise LLMResponseError(f"{url}: choices[{i}].message.content is not a string: {str(choice)[:200]}")
        texts.append(content)
    return texts
