"""Child process that runs generated reward code (started by ``sandbox.py``; not imported).

The second wall behind the static allowlist of ``allowlist.py``: it must hold even for code
that skipped those checks. Run as a script (``python -I``) so that it imports nothing but the
standard library and numpy; everything the code may use (``math``, ``numpy``, ``numpy.linalg``,
``typing``) is loaded before the code arrives, and the ndarray methods numpy imports lazily are
called once (`warm_up`). Then, before the code is compiled, the process limits itself:

- address space (`memory_mb` above what numpy needs), CPU seconds (when given), no core files,
  no file writes, no new file descriptors (no files, sockets or pipes) and no new processes;
- when started as root, the user ``nobody`` (without supplementary groups);
- on Linux x86-64, a seccomp filter (any user may install one): every system call but the few
  needed to compute, allocate memory and use the two pipes already open fails with EPERM, so
  even code holding ``os`` cannot open a file, signal the parent, start a thread or a process,
  or install a signal handler;
- ``os``, ``sys`` and friends are dropped from this script's globals.

The code runs with a reduced set of builtins whose ``__import__`` hands out only the preloaded
modules, and in a fresh namespace for every call, so a reward keeps no state between calls.

Protocol on stdin/stdout, every frame a 4-byte little-endian length then the payload:

- child → parent, once it is limited and ready: status byte 0 and ``S`` (seccomp in force) or
  ``-`` (not available here).
- parent → child, once: the code (UTF-8). Child → parent: status byte 0, or 1 + message.
- parent → child, per batch: ``<ii`` (n, dim), then n·dim float64 states, n int64 actions,
  n·dim float64 next states. Child → parent: 0 + n float64 rewards, or 1 + message.

Binary frames rather than pickle: the parent never unpickles what an untrusted child sends.
"""

import builtins
import ctypes
import math
import os
import resource
import struct
import sys
import typing

import numpy as np
import numpy.linalg  # noqa: F401  (loaded now: nothing can be opened once the limits are set)
import numpy.ma  # noqa: F401  (np.median, np.percentile, np.unique … import it when first called)

SAFE_BUILTINS = (
    "abs all any bool dict divmod enumerate filter float int isinstance len list map max min "
    "pow range reversed round set sorted sum tuple zip True False None "
    "ArithmeticError Exception IndexError KeyError OverflowError TypeError ValueError "
    "ZeroDivisionError"
).split()
ALLOWED_MODULES = {"math": math, "numpy": np, "numpy.linalg": np.linalg, "typing": typing}
NOBODY = 65534

# seccomp: every system call not listed fails with EPERM (x86-64 numbers, <asm/unistd_64.h>).
# Enough to compute, allocate memory and talk over the two pipes already open; no open, kill,
# fork, clone, execve, socket, ptrace, signal handlers or uid changes.
SYSCALLS_X86_64 = {
    "read": 0, "write": 1, "close": 3, "fstat": 5, "lseek": 8, "mmap": 9, "mprotect": 10,
    "munmap": 11, "brk": 12, "rt_sigprocmask": 14, "rt_sigreturn": 15, "sched_yield": 24,
    "mremap": 25, "madvise": 28, "exit": 60, "gettimeofday": 96, "getrusage": 98,
    "sigaltstack": 131, "futex": 202, "restart_syscall": 219, "clock_gettime": 228,
    "clock_getres": 229, "exit_group": 231,
}
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW, RET_EPERM = 0x7FFF0000, 0x00050000 | 1
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def warm_up() -> None:
    """Call once the ndarray methods numpy writes in Python (``numpy._core._methods``): numpy
    imports that module at their first call through the calling code's ``__import__``, which for
    a reward is `restricted_import`; after one call numpy keeps the functions."""
    a = np.ones(2)
    for name in ("all", "any", "max", "min", "mean", "prod", "std", "sum", "var"):
        getattr(a, name)()
    a.clip(0.0, 1.0)


def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    """Hand out the preloaded allowed modules; never runs the real import machinery."""
    if level != 0 or name not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed (only math, numpy, numpy.linalg and typing)")
    return ALLOWED_MODULES[name if fromlist else name.split(".")[0]]


def seccomp_filter(allowed: dict[str, int]) -> bytes:
    """A classic-BPF program: right architecture, not x32, and a listed call → allow; else EPERM."""
    def op(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)
    n = len(allowed)
    program = [op(LD_W_ABS, 4), op(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), op(RET_K, RET_EPERM),
               op(LD_W_ABS, 0), op(JGE_K, X32_SYSCALL_BIT, n, 0)]
    program += [op(JEQ_K, nr, n - i, 0) for i, nr in enumerate(sorted(allowed.values()))]
    program += [op(RET_K, RET_EPERM), op(RET_K, RET_ALLOW)]
    return b"".join(program)


def install_seccomp() -> bool:
    """Confine the process to `SYSCALLS_X86_64` (any uid may); False where the platform cannot."""
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return False

    class SockFprog(ctypes.Structure):  # struct sock_fprog of <linux/filter.h>
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    code = seccomp_filter(SYSCALLS_X86_64)
    program = SockFprog(len(code) // 8, code)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) == 0


def limit(memory_mb: int, cpu_s: int) -> bool:
    """Resource limits, the user nobody when root, then the system-call allowlist (returns
    whether it is in force)."""
    pages = int(open("/proc/self/statm").read().split()[0])
    address_space = pages * os.sysconf("SC_PAGE_SIZE") + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    if cpu_s > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (0, 0))  # fds already open keep working
    if os.geteuid() == 0:  # root ignores RLIMIT_NPROC and may delete anything: become nobody
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no fork, so no shell commands
    return install_seccomp()


def read_frame(stream) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack("<I", head)
    return stream.read(size)


def write_frame(stream, payload: bytes) -> None:
    stream.write(struct.pack("<I", len(payload)) + payload)
    stream.flush()


class Program:
    """The compiled code. Every call runs it afresh in a new namespace with fresh builtins, so
    nothing one call leaves behind (module-level lists, mutated defaults) reaches the next."""

    def __init__(self, code: str, safe_builtins: dict):
        self.code = compile(code, "<reward>", "exec")
        self.builtins = safe_builtins
        self.fresh()  # errors at load time are reported as such

    def fresh(self):
        namespace = {"__builtins__": dict(self.builtins), "__name__": "generated_reward"}
        exec(self.code, namespace)
        reward = namespace.get("reward")
        if not callable(reward):
            raise TypeError("the code defines no function reward")
        return reward


def as_number(value, index: int) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"reward returned {type(value).__name__} ({str(value)[:40]!r}) for transition {index}, expected a number"
        )
    return float(value)


def evaluate(program: Program, payload: bytes) -> bytes:
    n, dim = struct.unpack_from("<ii", payload)
    body = np.frombuffer(payload, offset=8, dtype=np.uint8)
    states = body[: n * dim * 8].view(np.float64).reshape(n, dim)
    actions = body[n * dim * 8 : n * dim * 8 + n * 8].view(np.int64)
    next_states = body[n * dim * 8 + n * 8 :].view(np.float64).reshape(n, dim)
    out = np.empty(n)
    for i in range(n):
        try:
            value = program.fresh()(states[i].copy(), int(actions[i]), next_states[i].copy())
        except MemoryError:
            raise
        except Exception as error:
            raise RuntimeError(
                f"reward raised {type(error).__name__}: {error} on transition {i} "
                f"(current_state {states[i].tolist()}, action {int(actions[i])}, next_state {next_states[i].tolist()})"
            ) from error
        out[i] = as_number(value, i)
    return out.tobytes()


def describe(error: BaseException, memory_mb: int) -> str:
    if isinstance(error, MemoryError):
        return f"MemoryError: the code exceeded the memory limit of {memory_mb} MiB"
    if isinstance(error, RecursionError):
        return "RecursionError: maximum recursion depth exceeded"
    if isinstance(error, (RuntimeError, TypeError)) and str(error).startswith("reward "):
        return str(error)
    lines, tb = [], error.__traceback__  # walked by hand: no traceback module (it opens files)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<reward>":
            lines.append(tb.tb_lineno)
        tb = tb.tb_next
    return f"{type(error).__name__}: {error}" + (f" (line {lines[-1]} of the code)" if lines else "")


HIDDEN = ("os", "sys", "resource", "ctypes", "builtins")
"""Modules this script drops from its globals once the limits are set, so that a frame of the
worker reached from the code does not hand them out (the kernel's limits hold regardless)."""


def main() -> None:
    memory_mb, cpu_s = int(sys.argv[1]), int(sys.argv[2])
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the protocol
    warm_up()
    confined = limit(memory_mb, cpu_s)
    safe = {n: getattr(builtins, n) for n in SAFE_BUILTINS} | {"__import__": restricted_import}
    for name in HIDDEN:
        globals().pop(name)
    write_frame(replies, b"\0" + (b"S" if confined else b"-"))  # ready: the code's time starts now
    try:
        program = Program(read_frame(requests).decode(), safe)
        write_frame(replies, b"\0")
    except BaseException as error:  # anything the code does when loaded is reported, not raised
        write_frame(replies, b"\1" + f"loading the code failed: {describe(error, memory_mb)}".encode())
        return
    while (payload := read_frame(requests)) is not None:
        try:
            write_frame(replies, b"\0" + evaluate(program, payload))
        except BaseException as error:
            write_frame(replies, b"\1" + describe(error, memory_mb).encode())


if __name__ == "__main__":
    main()
