"""``flowlearn report``: one run, a multirun sweep, and directories that are not finished runs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from viz_support import tiny_run, train

from flowlearn.cli import main
from flowlearn.reporting.report import final_metrics
from flowlearn.reporting.runs import read_metrics


@pytest.fixture
def flowlearn(capsys):
    """Run the ``flowlearn`` command's entry point in this process: (exit status, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, run) -> Path:
    """A real two-run multirun sweep (Hydra's basic launcher) over the learning rate."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    train(
        sweep_dir,
        f"data.path={run.parent / 'fractures.h5'}",
        "data.fractions=[0.5,0.25,0.25]",
        "trainer.max_epochs=1",
        "model.channels=4",
        "optimizer.lr=1e-3,2e-2",
        "~callbacks.figures",  # the report draws them
        multirun=True,
    )
    return sweep_dir


def table_rows(report: str) -> dict[str, list[str]]:
    """Markdown table rows keyed by their first cell (links reduced to their text)."""
    rows = {}
    for line in report.splitlines():
        if line.startswith("| ") and not line.startswith("| run ") and not line.startswith("| split "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[re.sub(r"\[(.*?)\]\(.*?\)", r"\1", cells[0])] = cells[1:]
    return rows


def test_run_report_has_figures_metrics_and_config(flowlearn, run, tmp_path):
    status, out, err = flowlearn("report", str(run), "--output", str(tmp_path), "--dpi", "50")
    assert status == 0, err
    assert out.strip() == f"wrote {tmp_path / 'report.md'}"
    report = (tmp_path / "report.md").read_text()
    for name in ("aperture", "correction", "pressure", "error", "curves", "gallery"):
        assert f"![{name}](figures/{name}.png)" in report
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 5000
    final = final_metrics(read_metrics(run))
    rows = table_rows(report)
    assert set(rows) == {"train", "val", "test"}
    for stage, cells in rows.items():
        mse, mean, _, _, cubic_mean, _, improvement = (float(c) for c in cells)
        assert mse == float(f"{final[f'{stage}/mse']:.4g}")
        assert mean == float(f"{final[f'{stage}/rel_err_mean']:.4g}")
        assert cubic_mean == float(f"{final[f'{stage}/cubic_rel_err_mean']:.4g}")
        # The improvement over the cubic law follows from the two mean errors.
        assert improvement == pytest.approx(100 * (1 - mean / cubic_mean), abs=0.05)
    assert "epochs trained: 3" in report
    assert "model=cnn" in report and "law=cubic" in report
    assert "max_epochs: 3" in report  # the config


def test_sweep_report_lists_every_run_with_its_metrics(flowlearn, sweep):
    status, _, err = flowlearn("report", str(sweep), "--dpi", "50")
    assert status == 0, err
    report = (sweep / "report.md").read_text()
    assert "all with `data.path=" in report and "trainer.max_epochs=1" in report
    rows = table_rows(report)
    assert sorted(rows) == ["0", "1"]
    for name, lr in (("0", "0.001"), ("1", "0.02")):
        overrides, status, epochs, val_mse, val_mean, _, test_mean, *_ = rows[name]
        # Only what varies is in the row (Hydra records the values normalised).
        assert overrides == f"`optimizer.lr={lr}`"
        assert status == "complete" and epochs == "1"
        final = final_metrics(read_metrics(sweep / name))
        assert float(val_mse) == float(f"{final['val/mse']:.4g}")
        assert float(val_mean) == float(f"{final['val/rel_err_mean']:.4g}")
        assert float(test_mean) == float(f"{final['test/rel_err_mean']:.4g}")
        assert (sweep / name / "report.md").is_file() and (sweep / name / "figures" / "error.png").is_file()
    # Different learning rates, different results: each row carries its own run's numbers.
    assert rows["0"][3] != rows["1"][3]


def test_sweep_with_an_incomplete_run_lists_it_and_fails(flowlearn, sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    shutil.rmtree(copy / "1" / "checkpoints")
    status, _, err = flowlearn("report", str(copy), "--dpi", "50")
    assert status == 1
    assert (
        err.strip()
        == f"flowlearn report: incomplete run: {copy / '1'} is missing a checkpoint (checkpoints/*.ckpt)"
    )
    rows = table_rows((copy / "report.md").read_text())
    assert rows["0"][1] == "complete"
    assert rows["1"][1].startswith("incomplete: missing a checkpoint (checkpoints/*.ckpt)")
    assert rows["1"][3] != "–"  # its metrics are still listed


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("checkpoints", "missing a checkpoint (checkpoints/*.ckpt)"),
        ("metrics.csv", "missing metrics (metrics.csv; the run needs logger=csv)"),
    ],
)
def test_a_run_without_checkpoint_or_metrics_gets_one_clear_line(flowlearn, run, tmp_path, remove, message):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    target = copy / remove
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    status, _, err = flowlearn("report", str(copy))
    assert status == 2
    assert err.strip() == f"flowlearn report: error: {copy}: not a finished run; {message}"
    assert not (copy / "report.md").exists()


def test_missing_and_empty_directories(flowlearn, tmp_path):
    status, _, err = flowlearn("report", str(tmp_path / "nowhere"))
    assert status == 2
    assert err.strip() == f"flowlearn report: error: {tmp_path / 'nowhere'}: no such directory"
    status, _, err = flowlearn("report", str(tmp_path))
    assert status == 2
    assert err.startswith(f"flowlearn report: error: {tmp_path}: not a finished run; missing a checkpoint")
    assert "metrics.csv" in err and len(err.strip().splitlines()) == 1
