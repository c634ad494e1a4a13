"""`make bench` runs every benchmark to the end and replaces only its own section of the page.

The benchmarks here are tiny scripts in a temporary folder: one that succeeds with declared
arguments, one that fails, one that overruns its declared limit. No timing is asserted.
"""

import sys
import textwrap

import pytest

from llmtraffic.study import bench, cli

OK = '''
"""Prints its arguments."""
import sys
BENCH_ARGS = ["--rows", "2"]
print("| col |")
print("argv", sys.argv[1:])
'''
BAD = '''
"""Fails after printing."""
import sys
print("half a table")
print("boom: engine is None", file=sys.stderr)
sys.exit(3)
'''
SLOW = '''
"""Overruns."""
import time
BENCH_TIMEOUT_S = 1
print("started", flush=True)
time.sleep(60)
print("never")
'''
HEAD, TAIL = "# Performance\n\nhand-written measurements\n\n", "\n\nhand-written after\n"


def folder(tmp_path, **scripts):
    where = tmp_path / "benchmarks"
    where.mkdir()
    for name, text in scripts.items():
        (where / f"{name}.py").write_text(textwrap.dedent(text))
    return where


@pytest.fixture
def doc(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text(f"{HEAD}{bench.BEGIN}\nold generated text\n{bench.END}{TAIL}")
    return page


def bench_cli(where, page, *extra):
    return cli.main(["bench", "--benchmarks", str(where), "--doc", str(page), *extra])


def test_a_failing_benchmark_does_not_stop_the_others_and_the_exit_says_so(tmp_path, doc, capsys, monkeypatch):
    monkeypatch.setattr(bench.provenance, "speed_reference", lambda: {"small_ops_us": 1.0, "matmul_gflops": 2.0})
    where = folder(tmp_path, a_bad=BAD, b_ok=OK, c_slow=SLOW)
    assert bench_cli(where, doc) == 1
    text = doc.read_text()
    assert text.startswith(HEAD + bench.BEGIN) and text.endswith(bench.END + TAIL)
    assert "old generated text" not in text
    assert "| [`a_bad.py`](#a_bad) | defaults | failed (exit 3) |" in text
    assert "| [`b_ok.py`](#b_ok) | `--rows 2` | ok |" in text
    assert "| [`c_slow.py`](#c_slow) | defaults | timed out after 1 s |" in text
    assert "argv ['--rows', '2']" in text  # the declared arguments reached the script, ran after the failure
    assert "boom: engine is None" in text  # a failure's standard error is shown
    assert "started" in text and "never" not in text  # an overrun keeps what it printed
    assert "3 benchmarks, one at a time: 1 ok, 2 failed or timed out" in text
    assert "torch CPU kernels " in text
    assert "1.0 µs per small-op step, 2.0 GFLOP/s" in text
    assert "FAILED a_bad.py: failed (exit 3): boom: engine is None" in capsys.readouterr().err


def test_all_succeeding_exits_0_and_a_second_run_replaces_the_first(tmp_path, doc):
    where = folder(tmp_path, b_ok=OK)
    results = bench.run(where, doc, speed=False)
    assert [r.status for r in results] == ["ok"]
    first = doc.read_text()
    assert first.count(bench.BEGIN) == 1 and first.count(bench.END) == 1
    (where / "b_ok.py").write_text(textwrap.dedent(OK).replace('"| col |"', '"| other |"'))
    assert bench_cli(where, doc) == 0
    second = doc.read_text()
    assert "| other |" in second and "| col |" not in second
    assert second.startswith(HEAD) and second.endswith(TAIL) and second.count(bench.BEGIN) == 1


@pytest.mark.parametrize("page", ["# no markers\n", f"{bench.END}\n{bench.BEGIN}\n", f"{bench.BEGIN}\n{bench.BEGIN}\n{bench.END}\n"])
def test_a_page_without_its_markers_is_refused_before_anything_runs(tmp_path, page, capsys):
    marker = tmp_path / "ran"
    where = folder(tmp_path, a=f"open({str(marker)!r}, 'w').write('x')\n")
    target = tmp_path / "performance.md"
    target.write_text(page)
    assert bench_cli(where, target) == 2
    assert not marker.exists() and target.read_text() == page
    assert "markers" in capsys.readouterr().err


@pytest.mark.parametrize("line, problem", [
    ('BENCH_ARGS = "--repeats 1"', "list of strings"),
    ("BENCH_ARGS = [1]", "list of strings"),
    ("BENCH_TIMEOUT_S = 0", "positive"),
    ("BENCH_TIMEOUT_S = True", "positive"),
    ("BENCH_ARGS = sys.argv", "literal"),
    ("BENCH_TIMEOUTS = 5", "unknown setting BENCH_TIMEOUTS"),
])
def test_a_malformed_declaration_is_an_error_naming_the_file(tmp_path, line, problem):
    where = folder(tmp_path, broken=f"import sys\n{line}\n")
    with pytest.raises(bench.BenchError, match=problem) as err:
        bench.discover(where)
    assert "broken.py" in str(err.value)


def test_declarations_are_read_without_importing_and_the_cli_timeout_wins(tmp_path):
    marker = tmp_path / "imported"
    where = folder(tmp_path, a=f'"""First line\nof the doc.\n\nMore."""\nopen({str(marker)!r}, "w")\n'
                               'BENCH_ARGS: list[str] = ["-x"]\nBENCH_TIMEOUT_S = 30\n', b="def broken(:\n")
    a, b = bench.discover(where)
    assert (a.args, a.timeout_s, a.about) == (("-x",), 30.0, "First line of the doc.")
    assert (b.args, b.timeout_s) == ((), bench.DEFAULT_TIMEOUT_S)  # it will fail when run, and be reported
    assert not marker.exists()
    assert [s.timeout_s for s in bench.discover(where, timeout_s=7)] == [7.0, 7.0]
    assert [s.path.name for s in bench.discover(where, only=["b"])] == ["b.py"]
    with pytest.raises(bench.BenchError, match="no benchmarks"):
        bench.discover(where, only=["zzz"])


def test_only_runs_the_matching_benchmarks_and_leaves_the_page_alone(tmp_path, doc):
    where = folder(tmp_path, a_bad=BAD, b_ok=OK)
    before = doc.read_text()
    assert bench_cli(where, doc, "--only", "b_*") == 0
    assert doc.read_text() == before


def test_output_with_backticks_gets_a_longer_fence():
    assert bench._fence(["a ```` b"]) == ["`````text", "a ```` b", "`````"]
    assert bench._fence(["plain"])[0] == "```text"


def test_the_repository_page_has_its_markers_once():
    assert bench.section_problem(bench.DOC, bench.BEGIN, bench.END) is None
