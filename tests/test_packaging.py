"""What a cited research tool ships: licence, citation, type hints, changelog, one version."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import fedsparse
from fedsparse.cli import main

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(fedsparse.__file__).parent


def test_the_licence_text_matches_the_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub


def test_the_version_has_one_source():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "fedsparse.__version__"}
    lines = (ROOT / "CITATION.cff").read_text().splitlines()
    assert not [line for line in lines if line.startswith("version:")]  # no second copy


def test_python_m_fedsparse_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "fedsparse", "--version"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == f"fedsparse {fedsparse.__version__}"


def test_every_summary_records_the_version(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("""
[defaults]
rounds = 2
problem = { kind = "least_squares" }
[defaults.data]
kind = "shifted_gaussian"
num_clients = 3
samples_per_client = 10
dim = 8
sparsity = 2
[[runs]]
label = "Fed-HT"
algorithm = { kind = "fed_ht", sparsity = 2, step_size = 0.01, local_steps = 2 }
""")
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["fedsparse_version"] == fedsparse.__version__


def test_type_hints_ship():
    assert (PACKAGE / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = data["package-data"]["fedsparse"]
    assert "py.typed" in shipped
    assert {"report/*.css", "report/*.js"} <= set(shipped)  # the report page's own parts


def test_citation_lists_the_four_papers():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["license"] == "Apache-2.0" and cff["type"] == "software"
    assert cff["message"] and cff["title"] and cff["authors"]
    cited = {(r["authors"][0]["family-names"], r["year"]): r["title"]
             for r in cff["references"]}
    assert cited == {
        ("Tong", 2022): "Federated Optimization of l0-norm Regularized Sparse Learning",
        ("Jeong", 2024): "Federated Gradient Matching Pursuit",
        ("Mao", 2022): "SAFARI: Sparsity-Enabled Federated Learning with Limited and "
                       "Unreliable Communications",
        ("Liu", 2023): "Sparse Personalized Federated Learning via Maximizing Correlation",
    }
    for ref in cff["references"]:
        assert ref["type"] == "article" and all(a["given-names"] for a in ref["authors"])


def test_the_changelog_names_the_released_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{fedsparse.__version__}]" in text and "## [Unreleased]" in text


def test_dir_offers_the_api_not_the_imports_behind_it():
    import fedsparse as fs

    public = [name for name in dir(fs) if not name.startswith("__")]
    assert public == sorted(fs.__all__)
    assert "__version__" in dir(fs)
    for name in public:  # each name it offers is there
        getattr(fs, name)
