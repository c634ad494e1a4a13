"""The CityFlow installer: pinned source, checksum, and a clear message without a C++ toolchain."""

import tarfile

import pytest

from llmtraffic.signal.backends import install


def test_missing_toolchain_is_named_and_leaves_sumo_working(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(install, "installed_version", lambda: None)
    assert install.missing_tools() == ["cmake", "a C++ compiler (c++, g++ or clang++; or set CXX)"]
    assert install.main() == 0  # a warning, not a failed make: SUMO scenarios still work
    err = capsys.readouterr().err
    assert "missing cmake, a C++ compiler" in err and "SUMO scenarios work" in err


def test_vendored_archive_with_another_checksum_is_refused(tmp_path):
    fake = tmp_path / "cityflow-src.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        (tmp_path / "x").write_text("not CityFlow")
        tar.add(tmp_path / "x", arcname="CityFlow/x")
    with pytest.raises(RuntimeError, match=f"expected {install.SHA256}"):
        install.vendored_source(fake, tmp_path / "out")


def test_the_pin_is_one_commit_and_the_build_is_marked_with_it(tmp_path):
    assert len(install.COMMIT) == 40 and install.VERSION == f"0.1+{install.COMMIT[:7]}.inline"
    (tmp_path / "setup.py").write_text("setup(version='0.2')")
    with pytest.raises(RuntimeError, match="expected version='0.1'"):
        install.build(tmp_path)


def test_missing_cityflow_says_how_to_get_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cityflow(name, *args, **kwargs):
        if name == "cityflow":
            raise ImportError("no module named cityflow")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cityflow)
    with pytest.raises(install.CityFlowMissing, match="make venv.*backends.install.*SUMO scenarios work without it"):
        install.require_cityflow()


def test_inline_patch_refuses_a_source_it_does_not_know(tmp_path):
    (tmp_path / "src" / "engine").mkdir(parents=True)
    (tmp_path / "src" / "engine" / "engine.cpp").write_text("namespace CityFlow {}")
    with pytest.raises(RuntimeError, match="expected one `startBarrier"):
        install.run_inline(tmp_path)


def test_inline_patch_calls_each_workers_function_from_its_phase(tmp_path):
    phases = "".join(f"    void Engine::{p}() {{\n        startBarrier.wait();\n        endBarrier.wait();\n    }}\n"
                     for p in install.WORKER_PHASES)
    (tmp_path / "src" / "engine").mkdir(parents=True)
    engine = tmp_path / "src" / "engine" / "engine.cpp"
    engine.write_text("Engine(int threadNum) : threadNum(threadNum), startBarrier(threadNum + 1),\n"
                      "endBarrier(threadNum + 1) {\n"
                      "        for (int i = 0; i < threadNum; i++) {\n            threadPool.emplace_back(x);\n        }\n"
                      + phases)
    install.run_inline(tmp_path)
    text = engine.read_text()
    assert "startBarrier(threadNum == 1 ? 1 : threadNum + 1)" in text and "threadNum > 1 && i < threadNum" in text
    assert "void Engine::getAction() {\n        if (threadNum == 1) { threadGetAction(threadVehiclePool[0]); } else {" in text
    assert text.count("if (threadNum == 1)") == len(install.WORKER_PHASES) == 8


def test_our_build_steps_in_the_calling_thread():
    """The installed engine (thread_num=1) starts no worker thread: the patch is in the build."""
    cityflow = pytest.importorskip("cityflow", reason="CityFlow not built")
    from pathlib import Path

    from llmtraffic.signal import scenarios

    tasks = lambda: len(list(Path("/proc/self/task").iterdir()))  # noqa: E731
    before = tasks()
    engine = cityflow.Engine(str(scenarios.load("hangzhou1x1").source(0)), thread_num=1)
    engine.next_step()
    assert tasks() == before and install.installed_version() == install.VERSION
