from llmtraffic.study import cached
from llmtraffic.study.cache import cache_dir


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
    assert (cache_dir("agent", {"lr": 0.1, "seed": 0}) / "params.json").exists()
    monkeypatch.setenv("LLMTRAFFIC_FRESH", "1")
    assert cached("agent", {"lr": 0.1, "seed": 0}, lambda: build("fresh"))["tag"] == "fresh"


def test_corrupt_entry_is_rebuilt(outdirs):
    cached("x", {"k": 1}, lambda: 1)
    (cache_dir("x", {"k": 1}) / "artifact.pkl").write_bytes(b"not a pickle")
    assert cached("x", {"k": 1}, lambda: 2) == 2


def test_source_digest_follows_the_code(tmp_path, monkeypatch):
    import importlib
    import sys

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
