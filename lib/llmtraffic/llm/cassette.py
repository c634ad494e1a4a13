"""JSONL cassettes: every LLM request and its answers, keyed by a hash of the request.

One line per request: ``key`` (sha256 of backend, model, messages and sampling parameters),
``occurrence`` (how many identical requests came before it in the run), the request itself,
the answers, the tokens used and the latency. Lines are appended under an exclusive lock so
that parallel workers may record into one file, and a request being asked is claimed (`claim`)
so that a second process recording the same request waits for the first one's answer instead
of paying for it again.

A crash while recording can leave the last line cut off (no newline, not valid JSON). Loading
for recording drops that line with a warning (and cuts it from the file, so the next entry starts
on a line of its own): the request is simply asked again. Loading for replay refuses it, naming
the line. Every entry is checked when loaded: a missing or mistyped field is a `CassetteError`
naming the file, the line and the field.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FIELDS = {"key": str, "occurrence": int, "backend": str, "model": str, "texts": list,
          "prompt_tokens": int, "completion_tokens": int, "latency_s": (int, float)}
"""Fields every entry must have, and their JSON types."""
KINDS = {str: "a string", int: "an integer", list: "a list", (int, float): "a number"}


class CassetteError(ValueError):
    """A cassette file is damaged: a line that is not an entry, or an entry missing a field."""


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
    """Entries of one JSONL file, looked up by (key, occurrence). `record`: loaded to record into
    (a cut-off last line is dropped rather than refused; see the module docstring)."""

    def __init__(self, path: str | os.PathLike, record: bool = False):
        self.path = Path(path)
        self.record = record
        self._entries: dict[tuple[str, int], dict] = {}
        self._read = self._lines = 0  # bytes and lines of the file loaded; other processes append after them
        self._lock_file = None
        if self.path.exists():
            self._load()

    def __len__(self) -> int:
        return len(self._entries)

    def _load(self) -> None:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                if number == len(lines):  # no newline after it: a write cut short
                    self._cut_off(number, len(data) - len(line), error)
                    break
                raise CassetteError(f"cassette {self.path} line {number} is not a cassette entry: {error}") from error
            self._check(entry, number)
            self._entries[entry["key"], entry["occurrence"]] = entry
        else:
            if self.record and data and not data.endswith(b"\n"):  # the next entry needs a line of its own
                with self.path.open("ab") as file:
                    file.write(b"\n")
        data = self.path.read_bytes()
        self._read, self._lines = len(data), data.count(b"\n")

    def _cut_off(self, number: int, keep: int, error: Exception) -> None:
        if not self.record:
            raise CassetteError(
                f"cassette {self.path} line {number} (the last) was cut off ({error}): the recording "
                "was interrupted. Record again (cache.mode: record) to drop that line and ask its request anew."
            )
        warnings.warn(f"cassette {self.path}: dropped the cut-off last line {number} (an interrupted "
                      "recording); its request will be asked again", stacklevel=4)
        with self.path.open("r+b") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            file.truncate(keep)

    def _check(self, entry, number: int) -> None:
        where = f"cassette {self.path} line {number}"
        if not isinstance(entry, dict):
            raise CassetteError(f"{where} is not a cassette entry (a JSON object)")
        for field, kind in FIELDS.items():
            if field not in entry:
                raise CassetteError(f"{where}: the entry has no {field!r} (fields: {', '.join(FIELDS)}); "
                                    "delete the line and record its request again")
            value = entry[field]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise CassetteError(f"{where}: {field!r} is {value!r}, not {KINDS[kind]}; "
                                    "delete the line and record its request again")
        if not all(isinstance(t, str) for t in entry["texts"]):
            raise CassetteError(f"{where}: 'texts' must be a list of strings")

    def sources(self) -> set[tuple[str, str]]:
        """The (backend, model) pairs recorded."""
        return {(e["backend"], e["model"]) for e in self._entries.values()}

    @contextmanager
    def claim(self, key: str, occurrence: int) -> Iterator[None]:
        """Hold request (`key`, `occurrence`) against other processes while it is looked up and
        asked, after loading what they appended since. Parallel notebooks recording into one
        cassette then ask each distinct request once: the second waits and reads the answer.

        The lock is one byte of ``<cassette>.lock`` at an offset taken from the key (an fcntl
        record lock), so different requests do not wait for each other.
        """
        if self._lock_file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(self.path.with_name(self.path.name + ".lock"), "a")  # noqa: SIM115 (held for the cassette's life)
        byte = int(key[:15], 16) + occurrence
        fcntl.lockf(self._lock_file, fcntl.LOCK_EX, 1, byte)
        try:
            self._load_new()
            yield
        finally:
            fcntl.lockf(self._lock_file, fcntl.LOCK_UN, 1, byte)

    def _load_new(self) -> None:
        """Load the whole lines other processes appended since the last read."""
        if not self.path.exists():
            return
        with self.path.open("rb") as file:
            file.seek(self._read)
            data = file.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        for number, line in enumerate(whole.split(b"\n")[:-1], self._lines + 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise CassetteError(f"cassette {self.path} line {number} is not a cassette entry: {error}") from error
            self._check(entry, number)
            self._entries.setdefault((entry["key"], entry["occurrence"]), entry)
        self._read += len(whole)
        self._lines += whole.count(b"\n")

    def get(self, key: str, occurrence: int) -> dict | None:
        return self._entries.get((key, occurrence))

    def append(self, entry: dict) -> None:
        self._entries[entry["key"], entry["occurrence"]] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with self.path.open("a", encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            file.write(line)
        # our own line is already in _entries; leave _read before it so that other processes'
        # lines appended before ours are still loaded (setdefault keeps the entry we hold)

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
