"""notebooks/visualize.ipynb: committed without outputs, and runs headless against a finished training run."""

from __future__ import annotations

import shutil

import nbformat
import pytest
from nbclient import NotebookClient
from viz_support import ROOT, tiny_run

from flowlearn.reporting.heldout import held_out, verdict_sentence

NOTEBOOK = ROOT / "notebooks" / "visualize.ipynb"


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    # The run directory is the parameter cell at the top (tagged as papermill expects).
    first = code[0]
    assert (
        "parameters" in first.metadata.get("tags", []) and first.source.splitlines()[-1] == "RUN_DIR = None"
    )


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook executed in a copy of the repository layout whose outputs/ holds an older, a newer and an
    unfinished run: by default it must open the newer finished one."""
    run = tiny_run(tmp_path_factory.getbasetemp())
    root = tmp_path_factory.mktemp("checkout")
    (root / "notebooks").mkdir()
    for stamp in ("2026-01-01/09-00-00", "2026-01-02/08-00-00"):
        shutil.copytree(run, root / "outputs" / stamp, ignore=shutil.ignore_patterns("figures", "*.ckpt"))
    (root / "outputs" / "2026-01-02" / "10-00-00").mkdir()  # still training: no predictions yet
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(root / "notebooks")}},
    )
    client.execute()  # raises CellExecutionError when any cell fails
    return notebook, root


def test_notebook_opens_the_newest_finished_run(executed):
    notebook, root = executed
    printed = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    newest = root / "outputs" / "2026-01-02" / "08-00-00"
    assert f"run: {newest}\n" in printed
    tables = [
        output["data"]["text/markdown"]
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "text/markdown" in output.get("data", {})
    ]
    # One table, the report's: the medians of the held-out splits, then each one's verdict.
    (verdict,) = tables
    assert verdict.startswith("| split |  | MSE |")
    result = held_out(newest / "predictions.h5", "test")
    assert f"- test, {len(result.names)} fractures: the model {verdict_sentence(result)}" in verdict


def test_notebook_shows_every_figure(executed):
    notebook, _ = executed
    pictures = [
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    calls = (
        "plot_baselines",
        "plot_aperture",
        "plot_correction",
        "plot_pressure",
        "plot_error",
        "plot_curves",
        "plot_gallery",
    )
    assert len(pictures) == len(calls)
    for call, source in zip(calls, pictures):
        assert call in source
