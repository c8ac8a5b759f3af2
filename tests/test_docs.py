"""The documentation site builds with warnings as errors, and its API reference renders every module's docstrings."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The docs extra (pip install -e ".[docs]"): import name -> distribution name, for the skip reason.
DOCS_PACKAGES = {
    "mkdocs": "mkdocs",
    "mkdocstrings": "mkdocstrings",
    "mkdocstrings_handlers.python": "mkdocstrings-python",
    "material": "mkdocs-material",
}


def _reference_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in (ROOT / "docs" / "reference").glob("*.md"))


def _missing_docs_packages() -> list[str]:
    missing = []
    for module, distribution in DOCS_PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is absent
            found = False
        if not found:
            missing.append(distribution)
    return missing


def test_every_module_has_a_place_in_the_api_reference():
    documented = set(re.findall(r"^::: ([\w.]+)$", _reference_text(), re.M))
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in (ROOT / "flowlearn").rglob("*.py")
    }
    assert not modules - documented, f"add to a page of docs/reference/: {sorted(modules - documented)}"


def test_the_docs_build_strictly_with_the_api_reference(tmp_path):
    missing = _missing_docs_packages()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[docs]')")
    site = tmp_path / "site"
    command = ["mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    result = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-5000:]

    # The reference really rendered: solve_pressure's heading, its signature and its docstring's text.
    darcy = (site / "reference" / "darcy.html").read_text(encoding="utf-8")
    assert 'id="flowlearn.darcy.solve.solve_pressure"' in darcy
    assert "dirichlet_values" in darcy
    assert ":::" not in darcy
    # Sphinx roles in docstrings became links or code, not literal ':class:' text.
    engines = (site / "reference" / "engines.html").read_text(encoding="utf-8")
    assert 'id="flowlearn.engines.make_engine"' in engines
    assert ":class:`" not in engines
    # The pages and the images they show are there.
    assert (site / "getting-started.html").is_file()
    assert (site / "img" / "departure.png").is_file()
