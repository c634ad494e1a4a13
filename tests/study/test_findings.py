"""The README's findings section is generated from the claims and replaces only its own lines."""

import pytest

from llmtraffic.study import claims, findings
from llmtraffic.study.stats import mean_ci


@pytest.fixture
def recorded(claims_ctx, outdirs):
    # strength |mean| / half-width: weak 1.6 (decided), strong ~200, marked headline inconclusive
    claims.claim("weak", "bus", "§5.2", "weak effect", "q", "t", ours=mean_ci([-3.0, -4.0, -5.0]), paper_value=-1.0)
    claims.claim("strong", "bus", "§5.3", "strong effect", "q", "t", ours=mean_ci([-2.0, -2.01, -1.99]), paper_value=-1.0)
    claims.claim("flat", "bus", "§5.4", "no effect", "q", "t", ours=mean_ci([-1.0, 1.0, 0.5]), paper_value=-1.0)
    claims.claim("marked", "bus", "§5.5", "marked", "q", "t", ours=mean_ci([-1.0, 1.0, 0.4]), paper_value=-1.0, headline=True)
    claims.claim("gpu", "tsc", "§4", "needs gpu", "q", "t", paper_value=-1.0, needs="a GPU")
    return outdirs / "figures"


def test_headlines_rank_marked_then_strongest_decided(recorded):
    bus = [c for c in claims.load(recorded) if c["paper"] == "bus"]
    assert [c["id"] for c in findings.headlines(bus)] == ["marked", "strong", "weak"]
    # an undecided claim is never a headline unless marked
    assert "flat" not in [c["id"] for c in findings.headlines(bus, k=10)]


def test_identical_runs_are_never_a_headline(recorded):
    # three identical runs (a deterministic simulator): one distinct run, no verdict, however big
    claims.claim("same", "bus", "§5.6", "exact", "q", "t", ours=mean_ci([-9.0, -9.0, -9.0]), paper_value=-1.0)
    bus = [c for c in claims.load(recorded) if c["paper"] == "bus"]
    assert [c["id"] for c in findings.headlines(bus, k=4)] == ["marked", "strong", "weak"]
    same = next(c for c in bus if c["id"] == "same")
    assert same["verdict"] == claims.DETERMINISTIC
    assert claims._ours(same) == "-9 (n = 3, identical runs: one distinct run)"


def test_readme_section_is_replaced_between_markers(recorded, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n\n{findings.BEGIN}\nold text\n{findings.END}\n\nafter\n")
    findings.update_readme(readme, recorded)
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old text" not in text
    assert "4 claims: 0 reproduced, 0 opposite, 2 inconclusive, 0 not run" not in text
    assert "5 claims" not in text  # counted per paper
    assert ("4 claims (0 of them our controls): 2 reproduced, 0 opposite, 2 inconclusive, 0 inconclusive (n = 1), "
            "0 inconclusive (deterministic, n = 1), 0 no result, 0 not run.") in text
    assert ("1 claims (0 of them our controls): 0 reproduced, 0 opposite, 0 inconclusive, 0 inconclusive (n = 1), "
            "0 inconclusive (deterministic, n = 1), 0 no result, 1 not run.") in text


def test_readme_without_markers_is_an_error(recorded, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n")
    with pytest.raises(ValueError, match="markers"):
        findings.update_readme(readme, recorded)
    assert readme.read_text() == "# Title\n"
