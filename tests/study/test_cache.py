import importlib
import json
import sys
import textwrap
import types
from functools import partial

import pytest

from llmtraffic import study
from llmtraffic.study import cached, provenance
from llmtraffic.study.cache import cache_dir, dependency_digest, dependency_files


def test_cached_builds_once_per_params_and_fresh_rebuilds(outdirs, monkeypatch):
    calls = []

    def build(tag):
        calls.append(tag)
        return {"weights": [len(calls)], "tag": tag}

    a = cached("agent", {"lr": 0.1, "seed": 0}, lambda: build("a"))
    assert cached("agent", {"seed": 0, "lr": 0.1}, lambda: build("again")) == a  # key ignores dict order
    assert calls == ["a"]
    b = cached("agent", {"lr": 0.2, "seed": 0}, lambda: build("b"))
    assert b["tag"] == "b" and calls == ["a", "b"]
    folder = cache_dir("agent", {"lr": 0.1, "seed": 0}, lambda: None)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["params"] == {"lr": 0.1, "seed": 0} and meta["key"] == folder.name
    assert any(f.endswith("tests/study/test_cache.py") for f in meta["files"])
    assert oct((folder / "artifact.pkl").stat().st_mode & 0o777) == "0o644"
    monkeypatch.setenv("LLMTRAFFIC_FRESH", "1")
    assert cached("agent", {"lr": 0.1, "seed": 0}, lambda: build("fresh"))["tag"] == "fresh"


def test_is_cached_says_what_cached_would_load(outdirs, monkeypatch):
    def build():
        return 1

    assert not study.is_cached("agent", {"seed": 3}, build)
    cached("agent", {"seed": 3}, build)
    assert study.is_cached("agent", {"seed": 3}, build) and not study.is_cached("agent", {"seed": 4}, build)
    monkeypatch.setenv("LLMTRAFFIC_FRESH", "1")
    assert not study.is_cached("agent", {"seed": 3}, build)


def test_corrupt_entry_is_rebuilt(outdirs):
    def build():
        return 1

    cached("x", {"k": 1}, build)
    (cache_dir("x", {"k": 1}, build) / "artifact.pkl").write_bytes(b"not a pickle")
    assert cached("x", {"k": 1}, lambda: 2) == 2


def test_source_digest_follows_the_code(tmp_path, monkeypatch):
    from llmtraffic.study import source_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pkg, a = importlib.import_module("pkg"), importlib.import_module("pkg.a")
    whole, single = source_digest(pkg), source_digest(a)
    assert source_digest(pkg) == whole and whole != single
    (tmp_path / "pkg" / "a.py").write_text("X = 2\n")
    assert source_digest(pkg) != whole and source_digest(a) != single
    (tmp_path / "pkg" / "b.py").write_text("")
    changed = source_digest(pkg)
    assert source_digest(a) != single and changed != whole
    for name in ("pkg", "pkg.a"):
        sys.modules.pop(name, None)


@pytest.fixture
def depkg(tmp_path, monkeypatch):
    """A package whose ``job.build`` depends on ``helper`` (which imports ``deep``) and, through a
    lazy import inside the function, on ``lazy``; ``unrelated`` is imported by nobody."""
    root = tmp_path / "depkg"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "job.py": """
            from .helper import scale

            def build(calls):
                from .sub import lazy
                calls.append(1)
                return scale() * lazy.FACTOR
        """,
        "helper.py": "from depkg import deep\n\ndef scale():\n    return deep.BASE\n",
        "deep.py": "BASE = 2\n",
        "sub/__init__.py": "",
        "sub/lazy.py": "FACTOR = 10\n",
        "unrelated.py": "Y = 0\n",
    }
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m == "depkg" or m.startswith("depkg.")]:
        del sys.modules[name]


def test_dependency_files_follow_imports_transitively(depkg):
    job = importlib.import_module("depkg.job")
    names = {f.relative_to(depkg).as_posix() for f in dependency_digest(job.build)[1]}
    assert names == {"__init__.py", "job.py", "helper.py", "deep.py", "sub/__init__.py", "sub/lazy.py"}
    # the harness itself is left out: importing llmtraffic.study adds no study module
    assert not [f for f in dependency_files(["llmtraffic.llm"]) if "study" in f.parts]


def test_editing_a_dependency_rebuilds_the_artifact(depkg, outdirs):
    job = importlib.import_module("depkg.job")
    calls: list[int] = []
    build = partial(job.build, calls)
    assert cached("dep", {"n": 1}, build) == 20 and len(calls) == 1
    assert cached("dep", {"n": 1}, build) == 20 and len(calls) == 1  # served from the cache
    (depkg / "unrelated.py").write_text("Y = 1\n")
    assert cached("dep", {"n": 1}, build) == 20 and len(calls) == 1  # not a dependency
    for module, text, builds in (("deep.py", "BASE = 3\n", 2), ("sub/lazy.py", "FACTOR = 100\n", 3)):
        (depkg / module).write_text(text)
        cached("dep", {"n": 1}, build)
        assert len(calls) == builds, f"editing {module} must rebuild"
    keys = [a["key"] for a in provenance.artifacts() if a["kind"] == "dep"]
    assert len(set(keys)) == 3  # three source versions, three keys, each noted for the sidecars


def test_notebook_build_depends_on_the_notebook_imports_and_its_own_code(tmp_path, monkeypatch):
    nb = tmp_path / "nb_x.ipynb"
    cells = [{"cell_type": "code", "source": ["%matplotlib inline\n", "from llmtraffic.bus import sim\n"]},
             {"cell_type": "markdown", "source": ["# A notebook\n", "import llmtraffic.signal\n"]}]
    nb.write_text(json.dumps({"cells": cells}))
    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(nb))
    study.begin("nb_x", None)
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # a kernel's: no file
    space: dict = {"__name__": "__main__"}
    exec("def build():\n    return 1\n\ndef other():\n    return 2\n", space)
    digest, files = dependency_digest(space["build"])
    parts = {f.relative_to(f.parents[2]).as_posix() for f in files}
    assert "llmtraffic/bus/sim.py" in parts and not any("signal" in p for p in parts)
    assert dependency_digest(space["other"])[0] != digest  # the build function's own code counts


def used_artifact(n: int) -> int:
    """A grid job that uses a cached artifact (importable, for the processes executor)."""
    return cached("grid_job", {"n": n}, partial(square, n))


def square(n: int) -> int:
    return n * n


@pytest.mark.slow
def test_artifacts_used_by_worker_processes_reach_the_provenance(outdirs):
    assert study.run_grid(used_artifact, study.grid(n=[2, 3]), executor="processes", jobs=2) == [4, 9]
    kinds = [a for a in provenance.artifacts() if a["kind"] == "grid_job"]
    assert len(kinds) == 2 and all(a["path"].startswith(str(outdirs)) for a in kinds)


def test_work_dir_is_the_folder_of_the_artifact_being_built(outdirs):
    from llmtraffic.study.cache import work_dir

    def build():
        (work_dir() / "checkpoints").mkdir(parents=True)
        return str(work_dir())

    folder = cached("ckpt", {"k": 1}, build)
    assert folder == str(cache_dir("ckpt", {"k": 1}, build)) and (cache_dir("ckpt", {"k": 1}, build) / "checkpoints").is_dir()
    with pytest.raises(RuntimeError, match="only available inside a build"):
        work_dir()


def slow_square(n: int, log: str) -> int:
    """A build that takes a while and says each time it runs (for the concurrency test)."""
    import time

    def build() -> int:
        with open(log, "a") as fh:
            fh.write("built\n")
        time.sleep(1.0)
        return n * n

    return cached("shared_job", {"n": n}, build)


@pytest.mark.slow
def test_two_processes_asking_for_one_artifact_build_it_once(outdirs, tmp_path):
    """Two notebooks run in parallel share an artifact: the second waits for the first's build
    and loads it; without the build lock both would build it (two lines in the log)."""
    log = tmp_path / "builds.log"
    assert study.run_grid(slow_square, study.grid(n=[7, 7], log=[str(log)]), executor="processes", jobs=2) == [49, 49]
    assert log.read_text() == "built\n"
    assert study.run_grid(slow_square, study.grid(n=[8, 7], log=[str(log)]), executor="processes", jobs=2) == [64, 49]
    assert log.read_text() == "built\nbuilt\n"  # another key builds, the shared one is served from the cache
