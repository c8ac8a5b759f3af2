"""The files a research user looks for agree with the package: CITATION.cff's version and licence, LICENSE's text."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import flowlearn

ROOT = Path(__file__).resolve().parents[1]


def test_citation_names_this_version_and_licence():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # Read as text: tomllib is not in Python 3.10, which flowlearn supports.
    (licence,) = re.findall(r'^license = \{ text = "([^"]+)" \}', (ROOT / "pyproject.toml").read_text(), re.M)
    assert citation["cff-version"] == "1.2.0"
    assert str(citation["version"]) == flowlearn.__version__
    assert citation["license"] == licence == "BSD-3-Clause"
    cited = {reference["title"] for reference in citation["references"]}
    assert "DPFEHM.jl" in cited
    assert any("Interlingual Automatic Differentiation" in title for title in cited)


def test_licence_file_is_the_bsd_3_clause_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    # The three clauses, each by its own opening words.
    for clause in (
        "1. Redistributions of source code",
        "2. Redistributions in binary form",
        "3. Neither the name",
    ):
        assert clause in text
