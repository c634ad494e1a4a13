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
    assert len(install.COMMIT) == 40 and install.VERSION == f"0.1+{install.COMMIT[:7]}"
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
