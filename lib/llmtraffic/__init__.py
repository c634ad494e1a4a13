"""llmtraffic: LLMs inside the reinforcement-learning loop for traffic control.

Subpackages: ``study`` (profiles, papermill runner, outputs, provenance, sweeps),
``bus`` (bus-holding study), ``signal`` (OracleTSC study), ``rl`` and ``llm`` (shared).
"""

import os
import platform
import sys

__version__ = "0.1.0"


def _pin_cpu_kernels() -> None:
    """Run PyTorch's CPU kernels at the AVX2 level on every x86-64 machine that has AVX2, so that
    results do not depend on whether the machine also has AVX-512.

    PyTorch picks its vectorised kernels by the CPU's instruction set, and the AVX-512 ones round
    differently: on one machine, the Hangzhou surrogate before fine-tuning queued 91.70 vehicles
    (9.1 % invalid answers) with them and 92.16 (5.1 %) with ``ATEN_CPU_CAPABILITY=avx2``, the
    numbers a machine without AVX-512 had given for the same commit, and four OracleTSC verdicts
    differed between the two. Set here, before torch is imported, and inherited by every process
    the study starts (notebooks, workers, simulators). A value the user set is kept; a process
    that imported torch before this package keeps torch's own choice (provenance records it)."""
    if "ATEN_CPU_CAPABILITY" in os.environ or "torch" in sys.modules:
        return
    if has_avx2():
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"


def has_avx2() -> bool:
    """Whether this is an x86-64 machine whose CPU flags (Linux's /proc/cpuinfo) include AVX2."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return "avx2" in next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return False


_pin_cpu_kernels()
