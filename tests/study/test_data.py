import hashlib
import http.server
import socket
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


def _files(**bodies: bytes) -> list:
    return [study_data.DataFile(name, hashlib.sha256(body).hexdigest()) for name, body in bodies.items()]


def test_ensure_fetches_missing_refetches_corrupted_and_skips_verified(file_server, tmp_path, monkeypatch):
    src, base = file_server
    monkeypatch.setenv(study_data.MIRROR_ENV, base)
    (src / "a.txt").write_bytes(b"alpha")
    (src / "b.txt").write_bytes(b"beta")
    dest = tmp_path / "data"
    dest.mkdir()
    (dest / "b.txt").write_bytes(b"bet")  # corrupted: same name, wrong content
    files = _files(**{"a.txt": b"alpha", "b.txt": b"beta"})
    report = study_data.ensure(files, dest, progress=False)
    assert report.fetched == ["a.txt", "b.txt"] and report.missing == [] and report.fetched_bytes == 9
    assert (dest / "a.txt").read_bytes() == b"alpha" and (dest / "b.txt").read_bytes() == b"beta"
    assert report.summary() == (f"data: fetched 2 files (0.0 MB) into {dest}, sha256 verified; "
                                "0 were already present and verified")
    (src / "a.txt").unlink()  # present and verified files are not asked for again
    again = study_data.ensure(files, dest, progress=False)
    assert again.fetched == [] and again.verified == ["a.txt", "b.txt"]
    assert again.summary() == f"data: all 2 files present and verified in {dest}"


def test_ensure_writes_no_download_whose_checksum_differs(file_server, tmp_path, monkeypatch):
    src, base = file_server
    monkeypatch.setenv(study_data.MIRROR_ENV, base)
    (src / "a.txt").write_bytes(b"tampered")
    dest = tmp_path / "data"
    report = study_data.ensure(_files(**{"a.txt": b"alpha", "gone.txt": b"x"}), dest, progress=False)
    assert report.missing == ["a.txt", "gone.txt"] and report.fetched == [] and report.unreachable == ""
    assert "sha256 " + hashlib.sha256(b"tampered").hexdigest() in report.failed["a.txt"]
    assert report.failed["gone.txt"] == f"HTTP 404 from {base}gone.txt"
    assert not dest.exists() or not any(dest.rglob("*"))


def test_an_unreachable_source_is_tried_once_and_named_in_one_message(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(study_data.MIRROR_ENV, f"http://127.0.0.1:{port}/")
    asked = []

    def get(url):
        asked.append(url)
        return study_data._http_get(url)

    files = _files(**{"libsignal/x/a.xml": b"a", "libsignal/x/b.xml": b"b", "busholding/c.pkl": b"c"})
    report = study_data.ensure(files, tmp_path / "data", get=get, progress=False)
    assert len(asked) == 1 and report.fetched == []
    assert report.missing == ["busholding/c.pkl", "libsignal/x/a.xml", "libsignal/x/b.xml"]
    text = report.problem()
    assert text.startswith(f"data: 3 files are missing from the data directory {tmp_path / 'data'} "
                           f"and the source is unreachable (http://127.0.0.1:{port}/libsignal/x/a.xml: ConnectError")
    assert "  busholding/: c.pkl\n  libsignal/x/: a.xml, b.xml\n" in text
    assert "run `make data`" in text and "set LLMTRAFFIC_DATA to a directory that already holds these files" in text


def test_without_a_mirror_files_come_from_their_pinned_source(monkeypatch):
    monkeypatch.delenv(study_data.MIRROR_ENV, raising=False)
    [f] = study_data.files_under(["libsignal/cologne1/cologne1.sumocfg"])
    assert study_data.mirror_url(f) == study_data.source_url(f.path)
    assert len(study_data.files_under(["libsignal/cologne1"])) == 7
    assert study_data.files_under(["libsignal/cologne"]) == []  # a folder, not a string prefix
