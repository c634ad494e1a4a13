"""A llama.cpp server the study starts and stops itself: ``llm: {backend: local, model: …}``.

The model is a registry name (``qwen2.5-coder-1.5b``, ``smollm2-135m``; :mod:`.models`) or a path
to any ``.gguf`` file. On the first request that the cassette cannot answer, llama-cpp-python's
OpenAI-compatible server starts as a child process on a free loopback port; every request then goes
through :class:`~.openai_compat.OpenAIBackend` (retries, token counts), so a run recorded here
replays with no server at all (nothing starts when every answer is in the cassette).

No orphan server: the child runs in a process group of its own and a watchdog thread inside it
exits when its parent is gone (it polls ``getppid``, which works whatever killed the parent,
SIGKILL included, and whichever thread started the child). The parent stops the group on
:func:`stop_all`, at interpreter exit (``atexit``) and on SIGTERM; a Ctrl-C (KeyboardInterrupt)
ends the interpreter through ``atexit`` too. The server's output goes to
``<runs>/llm/server-<model>-<port>.log``; a server that dies mid-run raises
:class:`LLMServerError` with the end of that log.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..paths import runs_dir
from .core import Completion, LLMError
from .models import gguf_path, spec
from .openai_compat import OpenAIBackend, OpenAIConfig

WATCHDOG = """\
import os, runpy, sys, threading, time
parent = int(sys.argv.pop(1))
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(3)  # the study that started this server is gone
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""
"""The child's entry point: the parent-watching thread, then ``python -m llama_cpp.server``."""


class LLMServerError(LLMError):
    """The local llama.cpp server did not start, or stopped while the study was using it."""


@dataclass(frozen=True)
class LocalConfig:
    """Settings of the ``local`` backend (the keys of its config dict)."""

    model: str
    """A registry name (``qwen2.5-coder-1.5b``, ``smollm2-135m``) or a path to a ``.gguf`` file."""
    threads: int = 2
    """CPU threads of the server (``--n_threads`` and ``--n_threads_batch``)."""
    n_ctx: int = 8192
    """Context window in tokens: the longest designer prompt plus ``max_tokens`` must fit."""
    seed: int = 0
    """Server seed (``--seed``); each request also sends its own seed."""
    startup_timeout_s: float = 300.0
    """Longest wait for ``/v1/models`` to answer after the start (loading a 1.1 GB model on a busy CPU)."""
    timeout_s: float = 900.0
    """Per-request timeout: CPU decoding of a long answer takes minutes."""
    max_retries: int = 1
    """Retries of a failed request (a dead server is not retried: it raises at once)."""
    prompt_logits: bool = True
    """Whether the server computes the logits of every prompt token (``--logits_all``, llama-cpp-python's
    default). Only log-probabilities of prompt tokens and speculative decoding read them; without them
    prefill skips the output layer (151,936 × 1,536 for Qwen2.5-Coder-1.5B) on all but the last token.
    Speculative decoding (``draft``) turns them on whatever this says."""
    prefix_cache_mb: int = 0
    """Capacity of the server's prompt-state cache in MB (``--cache``, in RAM; 0: none). The server
    always reuses the prefix its previous request shares with the next one; with the cache, a request
    also resumes from the longest prefix of any kept earlier request, so the system prompt and task
    description that every designer request of a design run repeats are read once per role, not once
    per request, although the analyzer's requests alternate with the modifier's. The capacity counts the
    kept model states (about 28 KB per token for Qwen2.5-Coder-1.5B); each kept state also holds the
    server's logits rows (up to 512 × vocabulary floats, 311 MB for Qwen), which it does not count."""
    draft: int = 0
    """Prompt-lookup speculative decoding (``--draft_model prompt-lookup-decoding``): tokens proposed per
    step from the prompt's own n-grams, checked in one batch (0: off). Pays when an answer copies its
    prompt, as a modifier's revision of the current reward does."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"llm (local): model must be a registry name or a .gguf path, got {self.model!r}")
        if not isinstance(self.prompt_logits, bool):
            raise ValueError(f"llm (local): prompt_logits must be true or false, got {self.prompt_logits!r}")
        if self.draft and self.prefix_cache_mb:
            raise ValueError("llm (local): draft and prefix_cache_mb do not combine: speculative decoding keeps the "
                             "logits of every token, and the server's cache copies all of them (n_ctx × vocabulary "
                             "floats, 5 GB for Qwen2.5-Coder at n_ctx 8192) into every kept state")
        for name, low in (("threads", 1), ("n_ctx", 256), ("seed", 0), ("max_retries", 0), ("prefix_cache_mb", 0),
                          ("draft", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"llm (local): {name} must be an integer >= {low}, got {value!r}")
        for name in ("startup_timeout_s", "timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"llm (local): {name} must be a number > 0, got {value!r}")


class LocalServer:
    """One llama.cpp server child process (see the module docstring)."""

    def __init__(self, cfg: LocalConfig, alias: str):
        self.cfg, self.alias = cfg, alias
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.log_path: Path | None = None
        self.startup_s = 0.0
        """Seconds from the start until ``/v1/models`` answered."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        gguf = gguf_path(self.cfg.model)
        self.port = free_port()
        self.log_path = runs_dir() / "llm" / f"server-{self.alias}-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        threads = str(self.cfg.threads)
        command = [sys.executable, "-c", WATCHDOG, str(os.getpid()), "--model", str(gguf),
                   "--model_alias", self.alias, "--host", "127.0.0.1", "--port", str(self.port),
                   "--n_threads", threads, "--n_threads_batch", threads, "--n_ctx", str(self.cfg.n_ctx),
                   "--seed", str(self.cfg.seed), *server_options(self.cfg)]
        began = time.perf_counter()
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(command[3:])}\n".encode())
            log.flush()
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        _SERVERS.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - began

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LLMServerError(f"the llama.cpp server for {self.cfg.model} exited with "
                                     f"{exit_reason(self.process.returncode)} while starting. {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise LLMServerError(f"the llama.cpp server for {self.cfg.model} did not answer {self.url}/models within "
                             f"startup_timeout_s={self.cfg.startup_timeout_s:g} s. {self.log_tail()}")

    def check(self) -> None:
        """Raise :class:`LLMServerError` when the server has stopped."""
        if self.process is not None and self.process.poll() is not None:
            raise LLMServerError(f"the local llama.cpp server for {self.cfg.model} (pid {self.process.pid}, "
                                 f"port {self.port}) stopped with {exit_reason(self.process.returncode)} during the run; "
                                 f"requests answered before are kept in the cassette. {self.log_tail()}")

    def log_tail(self, lines: int = 8) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "No server log."
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"Server log {self.log_path}, last lines:\n" + "\n".join(tail)

    def stop(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after 5 s."""
        process, self.process = self.process, None
        _SERVERS.discard(self)
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(5.0)


def server_options(cfg: LocalConfig) -> list[str]:
    """The llama-cpp-python server flags of ``cfg``'s decoding and caching options."""
    out = ["--logits_all", str(cfg.prompt_logits or cfg.draft > 0).lower()]
    if cfg.prefix_cache_mb:
        out += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cfg.prefix_cache_mb << 20)]
    if cfg.draft:
        out += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(cfg.draft)]
    return out


def exit_reason(code: int) -> str:
    """A server's exit status in words; a signal by its name, with the usual remedy for SIGILL."""
    if code >= 0:
        return f"code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    if -code == signal.SIGILL:
        return (f"{name} (illegal instruction: its llama.cpp build uses a CPU instruction this machine refuses, "
                f"e.g. AMX tiles in a sandbox; `make venv` builds a portable one, see LLAMA_CMAKE_ARGS in the Makefile)")
    return name


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # start_new_session: the group id is the child's pid
    except ProcessLookupError:
        pass


class LocalBackend:
    """`Backend` of ``backend: local``: starts its server on the first live request."""

    name = "local"

    def __init__(self, cfg: LocalConfig):
        if not cfg.model.endswith(".gguf"):
            spec(cfg.model)  # an unknown name fails now; the weights are only needed for a live request
        self.cfg = cfg
        self.model = alias(cfg.model)
        self._client: OpenAIBackend | None = None
        self._served: LocalServer | None = None

    @property
    def server(self) -> LocalServer:
        """The process's server for this config (one per config, shared by every backend built from it)."""
        with _LOCK:
            if self.cfg not in _POOL:
                _POOL[self.cfg] = LocalServer(self.cfg, self.model)
            return _POOL[self.cfg]

    def generate(self, messages: list[dict], n: int, temperature: float, max_tokens: int, seed: int | None,
                 **constraint) -> Completion:
        server = self.server
        if self._served is not server or self._client is None:
            if server.process is None:
                server.start()
            self._served = server
            self._client = OpenAIBackend(OpenAIConfig(base_url=server.url, model=self.model,
                                                      timeout_s=self.cfg.timeout_s, max_retries=self.cfg.max_retries,
                                                      backoff_s=0.5, seed=self.cfg.seed))
        server.check()
        try:
            return self._client.generate(messages, n, temperature, max_tokens, seed, **constraint)
        except LLMError:
            server.check()  # a dead server says so, with its log
            raise


def alias(model: str) -> str:
    """The name a model is served and recorded under: the registry name, or the file's stem."""
    return Path(model).name.removesuffix(".gguf") if model.endswith(".gguf") else model


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_SERVERS: set[LocalServer] = set()
"""Servers started by this process and not stopped yet."""
_POOL: dict[LocalConfig, LocalServer] = {}
"""The server of each config (a stopped one is dropped, so the next request starts a fresh one)."""
_LOCK = threading.RLock()


def stop_all() -> None:
    """Stop every server this process started."""
    with _LOCK:
        for server in list(_SERVERS):
            server.stop()
        _POOL.clear()


def _on_sigterm(signum, frame):  # noqa: ARG001
    stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


atexit.register(stop_all)
if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _on_sigterm)
