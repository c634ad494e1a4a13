"""Build and install CityFlow, pinned, into the running Python (called by ``make venv``).

    python -m llmtraffic.signal.backends.install

Source: the vendored archive ``../shared/vendor/cityflow-src.tar.gz`` beside the project when
present (its SHA-256 must be :data:`SHA256`), else a clone of :data:`REPO` at :data:`COMMIT`
with its submodules (the commit pins them). Before building, :func:`run_inline` patches the
engine so that ``thread_num=1`` computes each step in the calling thread (see there); the build
is marked with the version :data:`VERSION` (``0.1+<commit>.inline``), which provenance records
for every output that imported CityFlow. Needs cmake and a C++ compiler; without them it says
what is missing and leaves the SUMO scenarios working.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from llmtraffic.study.data import sha256

REPO = "https://github.com/cityflow-project/CityFlow"
COMMIT = "81ee0f47659ca66177a71f81676691c58ee89184"
"""CityFlow's commit (the vendored archive's SOURCE.txt names the same)."""
SHA256 = "d3e284c5a4065a564ee1d4a5e190197ddd75da31731f7ae8083a569a8b7fdcf1"
"""Of ``cityflow-src.tar.gz`` (CityFlow at COMMIT with pybind11 v2.13.6 and rapidjson 24b5e7a)."""
VERSION = f"0.1+{COMMIT[:7]}.inline"
"""Version our build installs under (CityFlow's setup.py says 0.1 for every commit; ``inline``:
patched by :func:`run_inline`)."""
VENDORED = Path(os.environ.get("LLMTRAFFIC_VENDOR", Path(__file__).resolve().parents[4].parent / "shared" / "vendor")) / "cityflow-src.tar.gz"
"""``../shared/vendor`` beside the project root (or ``$LLMTRAFFIC_VENDOR``)."""


class CityFlowMissing(ImportError):
    """CityFlow is not installed (or not our pinned build)."""


def require_cityflow():
    """The ``cityflow`` module, or a :class:`CityFlowMissing` that says how to get it."""
    try:
        import cityflow
    except ImportError:
        raise CityFlowMissing(
            "CityFlow is not installed, so CityFlow scenarios (hangzhou1x1) cannot run; "
            "`make venv` builds it (needs cmake and a C++ compiler); after installing those later, run "
            "`.venv/bin/python -m llmtraffic.signal.backends.install`. SUMO scenarios work without it.") from None
    return cityflow


def installed_version() -> str | None:
    try:
        return metadata.version("cityflow")
    except metadata.PackageNotFoundError:
        return None


def missing_tools() -> list[str]:
    """Build tools CityFlow needs that are not on PATH."""
    missing = [] if shutil.which("cmake") else ["cmake"]
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        missing.append("a C++ compiler (c++, g++ or clang++; or set CXX)")
    return missing


def vendored_source(archive: Path, into: Path) -> Path:
    """Unpack the checksummed archive; returns the CityFlow source folder."""
    digest = sha256(archive)
    if digest != SHA256:
        raise RuntimeError(f"{archive} has SHA-256 {digest}, expected {SHA256} (pinned CityFlow source)")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "CityFlow"


def cloned_source(into: Path) -> Path:
    """Clone CityFlow at the pinned commit with its submodules."""
    src = into / "CityFlow"
    run = lambda *cmd, cwd=None: subprocess.run(cmd, cwd=cwd, check=True)  # noqa: E731
    run("git", "clone", "--quiet", REPO, str(src))
    run("git", "checkout", "--quiet", COMMIT, cwd=src)
    run("git", "submodule", "update", "--init", "--recursive", "--quiet", cwd=src)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    if head != COMMIT:
        raise RuntimeError(f"CityFlow clone is at {head}, expected {COMMIT}")
    return src


WORKER_PHASES = {
    "planRoute": "threadPlanRoute(threadRoadPool[0])",
    "initSegments": "threadInitSegments(threadRoadPool[0])",
    "planLaneChange": "threadPlanLaneChange(threadVehiclePool[0])",
    "updateLeaderAndGap": "threadUpdateLeaderAndGap(threadDrivablePool[0])",
    "notifyCross": "threadNotifyCross(threadIntersectionPool[0])",
    "getAction": "threadGetAction(threadVehiclePool[0])",
    "updateLocation": "threadUpdateLocation(threadDrivablePool[0])",
    "updateAction": "threadUpdateAction(threadVehiclePool[0])",
}
"""Each phase of ``Engine::nextStep`` that hands work to the worker threads, and the worker's
function for it (``Engine::threadController`` runs them in this order)."""
_WAIT = "startBarrier.wait();\n        endBarrier.wait();"


def run_inline(src: Path) -> None:
    """Patch ``src/engine/engine.cpp`` so that an engine with ``thread_num=1`` starts no worker
    thread: each phase of a step calls the worker's function itself, and the barriers count one
    thread (a wait returns at once).

    Why: with one worker, CityFlow hands every step to its thread and back 16 times through a
    mutex and condition variable, which costs more than the step itself, most of all with several
    engines stepped in turn (the way evaluations run side by side; docs/performance.md has the
    times). Inline, the same functions run in the same order on the same vehicle pool, so the
    results are the same numbers."""
    engine = src / "src" / "engine" / "engine.cpp"
    text = engine.read_text()
    edits = [("startBarrier(threadNum + 1),", "startBarrier(threadNum == 1 ? 1 : threadNum + 1),"),
             ("endBarrier(threadNum + 1) {", "endBarrier(threadNum == 1 ? 1 : threadNum + 1) {"),
             ("for (int i = 0; i < threadNum; i++) {\n            threadPool.emplace_back",
              "for (int i = 0; threadNum > 1 && i < threadNum; i++) {\n            threadPool.emplace_back")]
    edits += [(f"void Engine::{phase}() {{\n        {_WAIT}",
               f"void Engine::{phase}() {{\n        if (threadNum == 1) {{ {worker}; }} else {{ {_WAIT} }}")
              for phase, worker in WORKER_PHASES.items()]
    for old, new in edits:
        if text.count(old) != 1:
            raise RuntimeError(f"{engine}: expected one `{old.splitlines()[0]}` (is this CityFlow at {COMMIT[:7]}?)")
        text = text.replace(old, new)
    engine.write_text(text)


def build(src: Path) -> None:
    """Mark the version, patch the engine (:func:`run_inline`) and pip-install the source folder
    into this Python."""
    setup = src / "setup.py"
    text = setup.read_text()
    if "version='0.1'" not in text:
        raise RuntimeError(f"{setup}: expected version='0.1' (is this CityFlow at {COMMIT[:7]}?)")
    run_inline(src)
    setup.write_text(text.replace("version='0.1'", f"version='{VERSION}'"))
    # with setuptools at hand, build without fetching another copy of it
    flags = ["--no-build-isolation"] if _has_setuptools() else []
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *flags, str(src)], check=True)


def _has_setuptools() -> bool:
    try:
        import setuptools  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    if installed_version() == VERSION:
        print(f"CityFlow {VERSION} already installed")
        return 0
    missing = missing_tools()
    if missing:
        print(f"WARNING: CityFlow not built: missing {', '.join(missing)}. CityFlow scenarios "
              "(hangzhou1x1) will not run and their tests are skipped; SUMO scenarios work. "
              "Install the tools (e.g. apt-get install cmake g++), then run "
              "`.venv/bin/python -m llmtraffic.signal.backends.install`.", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="cityflow-") as tmp:
        if VENDORED.exists():
            print(f"building CityFlow {VERSION} from {VENDORED}")
            src = vendored_source(VENDORED, Path(tmp))
        else:
            print(f"building CityFlow {VERSION} from {REPO} at {COMMIT}")
            src = cloned_source(Path(tmp))
        build(src)
    print(f"CityFlow {installed_version()} installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
