"""A backend that runs each simulation in a fresh child process (bit-reproducible SUMO episodes).

libsumo restarted within one process is not bit-reproducible on Cologne1 (see
:mod:`llmtraffic.signal.env`), while the first simulation of a fresh process is. This wrapper
starts every episode in a new process that holds the real backend and forwards the calls over a
socket: a few calls per 10-s decision, so the controller stays in the caller's process (an LLM
policy is never copied) and an episode's numbers do not depend on what ran before it.

The episodes' processes are forked from a *zygote*: one process per backend factory and caller,
started once, that has imported the simulator and never runs one. Starting Python and importing
libsumo cost ~0.5 CPU-s, over a quarter of a Cologne1 episode's; a fork from the zygote is a
clean first simulation all the same (the DQN and IPPO baselines trained on Cologne1 as with one
``python`` process per episode, bit for bit).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from . import Backend


def _zygote(control: int) -> None:
    """The zygote: read the factory from stdin (importing its simulator), then fork one child per
    socket passed over the ``control`` socket and answer with its pid, until the caller closes it.
    Anything the simulator prints goes to stderr. An interrupt (the caller's process group
    gets one when a notebook's kernel shuts down) ends it and its children quietly."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))  # as study.executor's workers (not imported: ~1 s)
    factory = pickle.load(sys.stdin.buffer)
    os.dup2(2, 1)
    with socket.socket(fileno=control) as ctl:
        while True:
            _, fds, _, _ = socket.recv_fds(ctl, 1, 1)
            _reap(os.WNOHANG)
            if not fds:  # the caller has gone
                _reap(0)
                return
            pid = os.fork()
            if pid == 0:
                ctl.close()
                try:
                    with socket.socket(fileno=fds[0]) as sock, sock.makefile("rb") as inp, sock.makefile("wb") as out:
                        _serve(factory(), inp, out)
                finally:
                    os._exit(0)
            os.close(fds[0])  # only the child holds it: its exit is the caller's end of file
            ctl.sendall(pid.to_bytes(8, "little"))


def _reap(options: int) -> None:
    """Wait for the exited children (all of them without ``os.WNOHANG``): reaped, their CPU time
    counts in the zygote's and so in the caller's, as a child of the caller's would."""
    try:
        while os.waitpid(-1, options)[0]:
            pass
    except ChildProcessError:  # none left
        pass


def _serve(backend: Backend, inp, out) -> None:
    """Child process: answer (method, args) requests until ``None``."""
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


class _Zygote:
    """The caller's side of a zygote (see the module docstring)."""

    def __init__(self, factory: Callable[[], Backend]):
        self.owner = os.getpid()
        self.ctl, theirs = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-c", f"from {__name__} import _zygote; _zygote({theirs.fileno()})"],
                                     stdin=subprocess.PIPE, pass_fds=[theirs.fileno()])
        theirs.close()
        pickle.dump(factory, self.proc.stdin)
        self.proc.stdin.close()

    def fork(self) -> tuple[socket.socket, int]:
        """A socket to a new child, and its pid."""
        ours, theirs = socket.socketpair()
        with theirs:
            socket.send_fds(self.ctl, [b"f"], [theirs.fileno()])
        pid = b""
        while len(pid) < 8:
            chunk = self.ctl.recv(8 - len(pid))
            if not chunk:
                ours.close()
                raise RuntimeError("the simulator's zygote process died (see its messages above)")
            pid += chunk
        return ours, int.from_bytes(pid, "little")

    def close(self) -> None:
        self.ctl.close()  # the zygote's end of file
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygotes: dict[bytes, _Zygote] = {}
"""This process's zygotes, by pickled factory."""
_lock = threading.Lock()


def _fork(factory: Callable[[], Backend]) -> tuple[socket.socket, int]:
    key = pickle.dumps(factory)
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is None or zygote.owner != os.getpid() or zygote.proc.poll() is not None:
            zygote = _zygotes[key] = _Zygote(factory)  # a forked caller starts its own
        return zygote.fork()


@atexit.register
def _close_zygotes() -> None:
    for zygote in _zygotes.values():
        if zygote.owner == os.getpid():
            zygote.close()
    _zygotes.clear()


class RemoteBackend:
    """``factory()``'s backend, in a new process for every :meth:`start`."""

    def __init__(self, factory: Callable[[], Backend], simulator: str):
        self.factory, self.simulator = factory, simulator
        self.begin_s = 0.0
        self._sock: socket.socket | None = None
        self._discovered = False

    def _call(self, name: str, *args):
        if self._sock is None:
            raise RuntimeError("simulation not started")
        try:
            pickle.dump((name, args), self._out)
            self._out.flush()
            status, value = pickle.load(self._in)
        except (EOFError, OSError):
            self.close()
            raise RuntimeError("the simulator's process died (see its messages above)") from None
        if status == "err":
            raise value
        return value

    def start(self, source: str, seed: int) -> None:
        self.close()
        self._sock, self._pid = _fork(self.factory)
        self._in, self._out = self._sock.makefile("rb"), self._sock.makefile("wb")
        self._call("start", source, seed)
        self.begin_s = self._call("begin_s")
        if self._discovered:  # a restart (a later episode): the new child reads the phases again
            self._call("discover")

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            pickle.dump(None, self._out)
            self._out.flush()
            sock.settimeout(10)
            while self._in.read1():  # until the child has exited
                pass
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
        except OSError:  # gone already
            pass
        self._in.close()
        self._out.close()
        sock.close()

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

    def served(self) -> int | None:
        return self._call("served")

    def version(self) -> str:
        return self._call("version")
