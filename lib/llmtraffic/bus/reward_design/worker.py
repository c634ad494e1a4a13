"""Child process that runs generated reward code (started by ``sandbox.py``; not imported).

Run as a script so that it imports nothing but the standard library and numpy. Before the
untrusted code is loaded it limits itself: address space (`memory_mb` above what numpy
needs), CPU seconds (when given), no new file descriptors (no files, sockets or pipes), no
file writes, no new processes, and, when started as root, the user ``nobody``. The code then runs with a reduced set of builtins whose ``__import__`` admits
only ``math`` and ``numpy``. These limits back up the static checks of ``sandbox.py``, which
reject hostile code before it ever gets here.

Protocol on stdin/stdout, every frame a 4-byte little-endian length then the payload:

- parent → child, once: the code (UTF-8). Child → parent: status byte 0, or 1 + message.
- parent → child, per batch: ``<ii`` (n, dim), then n·dim float64 states, n int64 actions,
  n·dim float64 next states. Child → parent: 0 + n float64 rewards, or 1 + message.

Binary frames rather than pickle: the parent never unpickles what an untrusted child sends.
"""

import builtins
import math
import os
import resource
import struct
import sys
import traceback

import numpy as np

SAFE_BUILTINS = (
    "abs all any bool dict divmod enumerate filter float int isinstance len list map max min "
    "pow range reversed round set sorted sum tuple zip True False None "
    "ArithmeticError Exception IndexError KeyError OverflowError TypeError ValueError "
    "ZeroDivisionError"
).split()
ALLOWED_MODULES = {"math": math, "numpy": np}
NOBODY = 65534


def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    root = name.split(".")[0]
    if level != 0 or root not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed (only math and numpy)")
    return __import__(name, globals, locals, fromlist, level)


def limit(memory_mb: int, cpu_s: int) -> None:
    pages = int(open("/proc/self/statm").read().split()[0])
    address_space = pages * os.sysconf("SC_PAGE_SIZE") + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    if cpu_s > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (0, 0))  # fds already open keep working
    if os.geteuid() == 0:  # root ignores RLIMIT_NPROC and may delete anything: become nobody
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no fork, so no shell commands


def read_frame(stream) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack("<I", head)
    return stream.read(size)


def write_frame(stream, payload: bytes) -> None:
    stream.write(struct.pack("<I", len(payload)) + payload)
    stream.flush()


def load(code: str):
    namespace = {"__builtins__": {n: getattr(builtins, n) for n in SAFE_BUILTINS} | {"__import__": restricted_import},
                 "__name__": "generated_reward"}
    exec(compile(code, "<reward>", "exec"), namespace)
    return namespace["reward"]


def as_number(value, index: int) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"reward returned {type(value).__name__} ({str(value)[:40]!r}) for transition {index}, expected a number"
        )
    return float(value)


def evaluate(reward, payload: bytes) -> bytes:
    n, dim = struct.unpack_from("<ii", payload)
    body = np.frombuffer(payload, offset=8, dtype=np.uint8)
    states = body[: n * dim * 8].view(np.float64).reshape(n, dim)
    actions = body[n * dim * 8 : n * dim * 8 + n * 8].view(np.int64)
    next_states = body[n * dim * 8 + n * 8 :].view(np.float64).reshape(n, dim)
    out = np.empty(n)
    for i in range(n):
        try:
            value = reward(states[i].copy(), int(actions[i]), next_states[i].copy())
        except MemoryError:
            raise
        except Exception as error:
            raise RuntimeError(
                f"reward raised {type(error).__name__}: {error} on transition {i} "
                f"(current_state {states[i].tolist()}, action {int(actions[i])}, next_state {next_states[i].tolist()})"
            ) from error
        out[i] = as_number(value, i)
    return out.tobytes()


def describe(error: BaseException) -> str:
    if isinstance(error, MemoryError):
        return f"MemoryError: the code exceeded the memory limit of {sys.argv[1]} MiB"
    if isinstance(error, RecursionError):
        return "RecursionError: maximum recursion depth exceeded"
    if isinstance(error, (RuntimeError, TypeError)) and str(error).startswith("reward "):
        return str(error)
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if f.filename == "<reward>"]
    return f"{type(error).__name__}: {error}" + (f" (line {lines[-1]} of the code)" if lines else "")


def main() -> None:
    memory_mb, cpu_s = int(sys.argv[1]), int(sys.argv[2])
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the protocol
    limit(memory_mb, cpu_s)
    try:
        reward = load(read_frame(requests).decode())
        write_frame(replies, b"\0")
    except BaseException as error:  # anything the code does when loaded is reported, not raised
        write_frame(replies, b"\1" + f"loading the code failed: {describe(error)}".encode())
        return
    while (payload := read_frame(requests)) is not None:
        try:
            write_frame(replies, b"\0" + evaluate(reward, payload))
        except BaseException as error:
            write_frame(replies, b"\1" + describe(error).encode())


if __name__ == "__main__":
    main()
