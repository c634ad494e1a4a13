import hashlib
import http.server
import threading
from functools import partial
from pathlib import Path

import pytest

from llmtraffic.study import DataMissingError, data_path
from llmtraffic.study import data as study_data

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_missing_file_names_the_file_and_make_data(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_DATA", str(tmp_path))
    with pytest.raises(DataMissingError) as err:
        data_path("libsignal/cologne1/cologne1.sumocfg")
    text = str(err.value)
    assert "libsignal/cologne1/cologne1.sumocfg" in text and "make data" in text and str(tmp_path) in text


def test_sources_are_pinned_commits():
    url = study_data.source_url("libsignal/cologne1/Creative Commons Legal Code.pdf")
    assert url.endswith("/127af9f93902778e556de2eedb2b606c4c9447e6/data/raw_data/cologne1/Creative%20Commons%20Legal%20Code.pdf")
    assert "/3166e956f08123508bd2827988fe29a68520780b/real_world/data_case2/" in study_data.source_url(
        "busholding/pkl/data_case2/mid_travel_time_3436.pkl")
    assert study_data.source_url("busholding/authors_code/real_world/bus_update.py").endswith(
        "/87acaa6106116bad5c5b7e664376d78f3b619527/real_world/bus_update.py")
    with pytest.raises(ValueError, match="no public source"):
        study_data.source_url("elsewhere/file.txt")


@pytest.mark.skipif(not SHARED.exists(), reason="needs the shared data copy beside the checkout")
def test_manifest_matches_the_shared_copy():
    assert study_data.check(SHARED) == []
    assert len(study_data.manifest()) == 104  # 63 data files + 41 .py/.ini of the bus authors' code


@pytest.fixture
def file_server(tmp_path):
    """A real HTTP server on loopback serving tmp_path/src."""
    src = tmp_path / "src"
    src.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(src))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield src, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_fetch_downloads_verifies_and_skips_present_files(file_server, tmp_path):
    src, base = file_server
    (src / "a.txt").write_bytes(b"alpha")
    (src / "b.txt").write_bytes(b"beta")
    files = [study_data.DataFile(name, hashlib.sha256(body).hexdigest()) for name, body in (("a.txt", b"alpha"), ("b.txt", b"beta"))]
    dest = tmp_path / "data"
    url_of = lambda f: base + f.path  # noqa: E731
    assert len(study_data.fetch(dest, files, url_of=url_of, log=lambda _: None)) == 2
    assert (dest / "a.txt").read_bytes() == b"alpha"
    assert study_data.fetch(dest, files, url_of=url_of, log=lambda _: None) == []  # already complete


def test_fetch_rejects_a_corrupted_download_and_writes_nothing(file_server, tmp_path):
    src, base = file_server
    (src / "a.txt").write_bytes(b"tampered")
    files = [study_data.DataFile("a.txt", hashlib.sha256(b"alpha").hexdigest())]
    dest = tmp_path / "data"
    with pytest.raises(study_data.ChecksumError, match="a.txt: checksum"):
        study_data.fetch(dest, files, url_of=lambda f: base + f.path, log=lambda _: None)
    assert not dest.exists() or not any(dest.rglob("*"))
