"""A backend that runs each simulation in a fresh child process (bit-reproducible SUMO episodes).

libsumo restarted within one process is not bit-reproducible on Cologne1 (see
:mod:`llmtraffic.signal.env`), while the first simulation of a fresh process is. This wrapper
starts every episode in a new spawned process that holds the real backend and forwards the
calls over a pipe: a few calls per 10-s decision, so the controller stays in the caller's
process (an LLM policy is never copied) and an episode's numbers do not depend on what ran
before it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable

from . import Backend


def _serve() -> None:
    """Child process: build the backend from the first message, then answer (method, args)
    requests until ``None``. Pickles travel over stdin/stdout; anything the simulator prints
    goes to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    backend = pickle.load(inp)()
    while True:
        request = pickle.load(inp)
        if request is None:
            break
        name, args = request
        try:
            value = getattr(backend, name)
            reply = ("ok", value(*args) if callable(value) else value)
        except BaseException as err:  # noqa: BLE001  (sent back and raised in the caller)
            reply = ("err", err)
        pickle.dump(reply, out)
        out.flush()
    backend.close()


class RemoteBackend:
    """``factory()``'s backend, in a new process for every :meth:`start`."""

    def __init__(self, factory: Callable[[], Backend], simulator: str):
        self.factory, self.simulator = factory, simulator
        self.begin_s = 0.0
        self._proc: subprocess.Popen | None = None
        self._discovered = False

    def _call(self, name: str, *args):
        if self._proc is None:
            raise RuntimeError("simulation not started")
        try:
            pickle.dump((name, args), self._proc.stdin)
            self._proc.stdin.flush()
            status, value = pickle.load(self._proc.stdout)
        except (EOFError, BrokenPipeError):
            self.close()
            raise RuntimeError("the simulator's process died (see its messages above)") from None
        if status == "err":
            raise value
        return value

    def start(self, source: str, seed: int) -> None:
        self.close()
        self._proc = subprocess.Popen([sys.executable, "-c", f"from {__name__} import _serve; _serve()"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        pickle.dump(self.factory, self._proc.stdin)
        self._call("start", source, seed)
        self.begin_s = self._call("begin_s")
        if self._discovered:  # a restart (a later episode): the new child reads the phases again
            self._call("discover")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            pickle.dump(None, proc.stdin)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    @property
    def tls(self) -> str:
        return self._call("tls")

    def discover(self):
        self._discovered = True
        return self._call("discover")

    def set_green(self, phase: int) -> None:
        self._call("set_green", phase)

    def set_clearance(self, current: int, nxt: int) -> None:
        self._call("set_clearance", current, nxt)

    def advance(self, seconds: int):
        return self._call("advance", seconds)

    def observe(self):
        return self._call("observe")

    def waiting_delays(self) -> list[float]:
        return self._call("waiting_delays")

    def version(self) -> str:
        return self._call("version")
