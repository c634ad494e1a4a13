"""JSONL cassettes: every LLM request and its answers, keyed by a hash of the request.

One line per request: ``key`` (sha256 of backend, model, messages and sampling parameters),
``occurrence`` (how many identical requests came before it in the run), the request itself,
the answers, the tokens used and the latency. Lines are appended under an exclusive lock so
that parallel workers may record into one file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path


class CassetteMiss(KeyError):
    """Replay mode was asked for a request the cassette does not hold."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def request_key(backend: str, model: str, messages: list[dict], params: dict) -> str:
    """sha256 of the canonical JSON of the request."""
    canonical = json.dumps(
        {"backend": backend, "model": model, "messages": messages, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class Cassette:
    """Entries of one JSONL file, looked up by (key, occurrence)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._entries: dict[tuple[str, int], dict] = {}
        if self.path.exists():
            self._load()

    def __len__(self) -> int:
        return len(self._entries)

    def _load(self) -> None:
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self._entries[entry["key"], entry["occurrence"]] = entry
                except (json.JSONDecodeError, KeyError, TypeError) as error:
                    raise ValueError(
                        f"cassette {self.path} line {number} is not a cassette entry: {error}"
                    ) from error

    def sources(self) -> set[tuple[str, str]]:
        """The (backend, model) pairs recorded."""
        return {(e["backend"], e["model"]) for e in self._entries.values()}

    def get(self, key: str, occurrence: int) -> dict | None:
        return self._entries.get((key, occurrence))

    def append(self, entry: dict) -> None:
        self._entries[entry["key"], entry["occurrence"]] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with self.path.open("a", encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            file.write(line)

    def miss(self, key: str, occurrence: int, messages: list[dict]) -> None:
        """Raise `CassetteMiss` naming the hash and the first line of the prompt."""
        first_line = next(
            (line for m in messages for line in m["content"].splitlines() if line.strip()), ""
        )
        where = f"{self.path}" if self.path.exists() else f"{self.path} (file does not exist)"
        raise CassetteMiss(
            f"replay miss: request {key} (occurrence {occurrence}) is not in cassette {where}; "
            f"prompt starts with {first_line[:120]!r}. Record it first (cache.mode: record) "
            "or check that the backend, model, messages and sampling parameters match the recording."
        )
