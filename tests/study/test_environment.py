"""environment.yml and pyproject.toml must describe the same pinned environment."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _norm(req: str) -> str:
    name, _, version = req.partition("==")
    return re.sub(r"[-_.]+", "-", name.strip().lower()) + "==" + version.strip()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_norm(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_norm(r) for r in pip if not r.startswith("-e")}
    assert listed == declared
    assert all("==" in r for r in declared), "every dependency is pinned exactly"
    assert "torch==2.13.0" in declared
