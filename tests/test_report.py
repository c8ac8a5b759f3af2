"""``flowlearn report``: one run, a multirun sweep, and directories that are not finished runs."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_support import run_counting_lightning
from viz_support import tiny_run, train

from flowlearn.cli import main
from flowlearn.reporting.heldout import (
    DONE_WIDTH,
    HeldOut,
    closing_line,
    held_out,
    summary,
    verdict,
    verdict_sentence,
    verdict_table,
)
from flowlearn.reporting.report import final_metrics, verdict_section
from flowlearn.runs import read_metrics
from flowlearn.training.predictions import read_predictions


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


def verdict_rows(report: str) -> dict[tuple[str, str], list[str]]:
    """Rows of a run report's table of medians keyed by (split, row label)."""
    rows = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in ("train (not held out)", "val", "test"):
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_run_report_has_figures_one_table_of_medians_and_config(flowlearn, run, tmp_path):
    status, out, err = flowlearn("report", str(run), "--output", str(tmp_path), "--dpi", "50")
    assert status == 0, err
    assert out.strip() == f"wrote {tmp_path / 'report.md'}"
    report = (tmp_path / "report.md").read_text()
    for name in ("aperture", "correction", "pressure", "error", "curves", "gallery", "baselines"):
        assert f"![{name}](figures/{name}.png)" in report
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 5000
    # One table: the medians over fractures. The means of metrics.csv and the improvement over the LCL are gone.
    assert sum(line.startswith("|---") for line in report.splitlines()) == 1
    assert "| split |  | MSE | departure error (1 − R²) | flow-rate error (%) |" in report
    assert "improvement" not in report and "| learned |" not in report
    rows = verdict_rows(report)
    # The held-out splits are judged; the training split, which the model fitted, is not.
    assert {split for split, _ in rows} == {"val", "test"}
    fields = read_predictions(run / "predictions.h5")
    for split in ("val", "test"):
        result = held_out(run / "predictions.h5", split, fields)
        labels = [label for s, label in rows if s == split]
        best = result.best("departure_err")
        # The model first, then the best closed form (named so), the other baselines, the LCL last where it is
        # not the best; the cells are the medians flowlearn evaluate prints.
        assert labels[0] == "model" and labels[1].startswith(f"{best} (best closed form")
        assert sorted(label.split(" (")[0] for label in labels[1:]) == sorted(set(result.metrics) - {"model"})
        for label in labels:
            row = label.split(" (")[0]
            expected = [f"{result.median(row, m):.3g}" for m in ("mse", "departure_err")]
            assert rows[(split, label)] == [*expected, "n/a"], (split, label)
        # The verdict's own line, as the run's closing line and flowlearn evaluate word it.
        assert f"- {split}, {len(result.names)} fractures: the model {verdict_sentence(result)}" in report
    # The test fractures carry no flow rate and no record of the reference's error: the report says so.
    assert "no flow-rate errors: the run's fractures carry no reference flow rate" in report
    assert "the reference's own error (vs its smooth walls)" not in report
    # Without reference flow rates no fracture can be judged on both: they are counted apart, not as wins.
    tests = sum(f.split == "test" for f in fields)
    assert re.search(
        rf"beats the LCL \(departure and flow rate\) on 0 of 0 fractures; {tests} with no flow rate are not "
        r"counted \(its departure error lower on \d+ of them\)",
        report,
    )
    assert "epochs trained: 3" in report
    assert "model=cnn" in report and "law=mlcl" in report
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
    # Different learning rates, different results: each row carries its own run's numbers. (After one step from
    # W = 1 both models are within 0.1 % of the LCL, so the improvement over it tells them apart.)
    assert rows["0"][5] != rows["1"][5]


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


def test_evaluate_prints_the_held_out_medians_of_the_model_and_every_baseline(flowlearn, run):
    result = held_out(run / "predictions.h5", "test")
    assert result.names and set(result.metrics) >= {"model", "lcl", "uniform", "ap2"}
    # The uniform conductance solves to the straight line between the heads wherever there is no contact spot,
    # and the departure error of the straight line is 1 by definition.
    fields = {f.name: f for f in read_predictions(run / "predictions.h5")}
    uniform = result.metrics["uniform"]["departure_err"]
    for name, value in zip(result.names, uniform, strict=True):
        if fields[name].active.all():
            assert value == pytest.approx(1.0, abs=1e-9)
    judged, beaten = result.beats("lcl", "lcl")
    assert not judged.any() and not beaten.any()  # the tiny run's data store no flow rates
    model, lcl = result.metrics["model"]["departure_err"], result.metrics["lcl"]["departure_err"]
    status, out, _ = flowlearn("evaluate", str(run / "predictions.h5"))
    assert (
        status == 0
        and "| lcl |" in out
        and "| model vs LCL |" in out
        and "| model vs best closed form |" in out
    )
    assert (
        f"beats the LCL (departure and flow rate) on 0 of 0 fractures; {model.size} with no flow rate are not counted "
        f"(its departure error lower on {(model < lcl).sum()} of them)"
    ) in out


@pytest.mark.parametrize(
    ("command", "lightning"),
    [("evaluate", False), ("report", False), ("ensemble", False), ("predict", True)],
)
def test_only_the_commands_that_run_a_model_load_lightning(run, tmp_path, command, lightning):
    """Reading a predictions file needs no Lightning (whose import is 1.5-2 s of a 2 s ``flowlearn evaluate``);
    ``predict``, which loads the trained model, is the control that the count sees Lightning where it loads."""
    predictions = str(run / "predictions.h5")
    # A second member: an ensemble's members are distinct files.
    copy = shutil.copy(predictions, tmp_path / "member.h5")
    argv = {
        "evaluate": ["evaluate", predictions],
        "report": ["report", str(run), "--output", str(tmp_path / "report"), "--dpi", "50"],
        "ensemble": ["ensemble", predictions, str(copy), "--output", str(tmp_path / "ensemble.h5")],
        "predict": [
            "predict",
            str(run),
            str(run.parent / "fractures.h5"),
            "--output",
            str(tmp_path / "predicted.h5"),
        ],
    }[command]
    _, errors, status, count = run_counting_lightning(argv)
    assert status == 0, errors
    assert (count > 0) == lightning


def test_the_verdict_names_the_best_closed_form_and_counts_fractures_without_flow_rates_apart():
    # Four fractures, the last without a reference flow rate. mlcl has the lowest median departure error, inclined
    # the lowest median flow-rate error; power (fitted to data) is lower still but is no closed form.
    nan = math.nan

    def row(departure, flow):
        return {"mse": np.ones(4), "departure_err": np.array(departure), "flow_rate_err": np.array(flow)}

    result = HeldOut(
        ["a", "b", "c", "d"],
        {
            "model": row([0.01, 0.02, 0.05, 0.01], [1.0, 3.0, 1.0, nan]),
            "lcl": row([0.07, 0.08, 0.06, 0.09], [40.0, 45.0, 50.0, nan]),
            "inclined": row([0.04, 0.04, 0.04, 0.04], [2.0, 2.0, 2.0, nan]),
            "mlcl": row([0.015, 0.03, 0.04, 0.03], [3.0, 3.0, 3.0, nan]),
            "power": row([0.001] * 4, [0.1, 0.1, 0.1, nan]),
        },
        3.1,
    )
    assert result.best("departure_err") == "mlcl" and result.best("flow_rate_err") == "inclined"
    judged, beaten = result.beats("mlcl", "inclined")
    # a: 0.01 < 0.015 and 1 < 2; b: 3 > 2; c: 0.05 > 0.04; d: no flow rate, not judged.
    np.testing.assert_array_equal(judged, [True, True, True, False])
    np.testing.assert_array_equal(beaten, [True, False, False, False])
    table = verdict_table(result)
    # Medians: departure 0.015 against mlcl's 0.03, flow rate 1 against inclined's 2, MSE 1 against 1 (all tie).
    assert (
        "| model vs best closed form | 0% lower (inclined) | 50% lower (mlcl) | 50% lower (inclined) |"
        in table
    )
    assert (
        "the model beats the best closed form (mlcl; inclined) (departure and flow rate) on 1 of 3 fractures; 1 with "
        "no flow rate are not counted (its departure error lower on 1 of them)"
    ) in table
    assert (
        "the model beats the LCL (departure and flow rate) on 3 of 3 fractures; 1 with no flow rate" in table
    )


def test_evaluate_without_fractures_of_the_split_is_one_line(flowlearn, run):
    status, _, err = flowlearn("evaluate", str(run / "predictions.h5"), "--split", "predict")
    assert status == 2 and "no fracture of split 'predict'" in err


def test_a_run_whose_metrics_hold_no_curve_is_reported_without_curves(flowlearn, run, tmp_path):
    # A metrics.csv of epochs and steps alone (a run stopped before logging a metric) gave plot_curves nothing to
    # draw: an empty figure once, a traceback once plot_curves refused it.
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "metrics.csv").write_text("epoch,step\n0,0\n")
    status, _, err = flowlearn("report", str(copy), "--output", str(tmp_path / "out"), "--dpi", "50")
    assert status == 0, err
    figures = {path.stem for path in (tmp_path / "out" / "figures").iterdir()}
    assert "curves" not in figures and {"aperture", "correction", "pressure"} <= figures


def hand_built(
    model: tuple[float, float], reference_error: tuple[float, float] | None = None, fractures: int = 3
) -> HeldOut:
    """Fractures on which every row has the same (departure error, flow-rate error in %) on each, so its medians
    are those numbers: the model's ``model``; mlcl (0.01, 6 %) the best closed form in both, before inclined
    (0.012, 8 %; the best in MSE) and the LCL (0.07, 44 %); power, lower than all but fitted to the data, no closed
    form. The reference's own error, where given, is ``reference_error`` on every fracture."""
    rows = {
        "model": (1e-5, *model),
        "lcl": (4e-4, 0.07, 44.0),
        "inclined": (1.5e-5, 0.012, 8.0),
        "mlcl": (2e-5, 0.01, 6.0),
        "power": (1e-6, 1e-4, 0.1),
    }

    def row(mse: float, departure: float, flow: float) -> dict[str, np.ndarray]:
        values = {"mse": mse, "departure_err": departure, "flow_rate_err": flow}
        return {metric: np.full(fractures, value) for metric, value in values.items()}

    errors = {}
    if reference_error is not None:
        departure, flow = reference_error
        errors = {"departure_err": np.full(fractures, departure), "flow_rate_err": np.full(fractures, flow)}
    return HeldOut([f"f{i}" for i in range(fractures)], {r: row(*v) for r, v in rows.items()}, 3.1, errors)


@pytest.mark.parametrize(
    ("model", "reference_error", "answer"),
    [
        # Gains over mlcl: departure √0.01 − √0.0016 = 0.06 against √0.0004 = 0.02; flow rate 6 − 2 = 4 points
        # against 3: both larger than the reference's error.
        ((0.0016, 2.0), (0.0004, 3.0), "yes"),
        # Lower in both, but the flow-rate gain (4 points) is within an error of 5 %.
        ((0.0016, 2.0), (0.0004, 5.0), "within the error"),
        # The departure gain 0.1 − 0.09 = 0.01 (√0.0081 = 0.09) is within √0.0004 = 0.02; the flow rate's is not.
        ((0.0081, 2.0), (0.0004, 3.0), "within the error"),
        # Not lower in departure (0.02 against mlcl's 0.01), however much lower in flow rate: no.
        ((0.02, 0.5), (0.0004, 3.0), "no"),
        # Not lower in flow rate: no, whatever the error.
        ((0.0016, 7.0), None, "no"),
        # Lower in both, with no record of the reference's error to measure the gains by.
        ((0.0016, 2.0), None, "lower, no error recorded"),
    ],
)
def test_the_verdict_is_yes_within_the_error_or_no_by_the_medians_and_the_references_error(
    model, reference_error, answer
):
    result = hand_built(model, reference_error)
    assert verdict(result) == answer
    departure, flow = model
    sentence = (
        f"beats mlcl beyond the reference's error? {answer} (departure {departure:.2g} vs 0.01, flow rate "
        f"{flow:.2g} % vs 6 %)"
    )
    assert summary(result, "test") == f"done: test, 3 fractures: {sentence}"
    # flowlearn evaluate and report.md say the same, in the same words.
    assert f"the model {sentence}" in verdict_table(result).splitlines()
    assert f"- val, 3 fractures: the model {sentence}" in verdict_section({"val": result}).splitlines()


def test_the_verdict_names_each_metrics_best_closed_form_and_judges_without_flow_rates_on_the_departure():
    result = hand_built((0.0016, 2.0), (0.0004, 3.0))
    # Now the best in flow rate, mlcl still in departure; the gain over it, 3.5 points, is larger than 3 %.
    result.metrics["inclined"]["flow_rate_err"][:] = 5.5
    assert summary(result, "test") == (
        "done: test, 3 fractures: beats mlcl/inclined beyond the reference's error? yes (departure 0.0016 vs 0.01, "
        "flow rate 2 % vs 5.5 %)"
    )
    # Fractures without a reference flow rate are judged on the departure alone, and the line shows only it.
    for row in result.metrics.values():
        row["flow_rate_err"][:] = math.nan
    assert summary(result, "val") == (
        "done: val, 3 fractures: beats mlcl beyond the reference's error? yes (departure 0.0016 vs 0.01)"
    )
    # The fit to the training fractures is no held-out verdict: the line says so.
    assert summary(result, "train").startswith("done: train (not held out), 3 fractures: beats mlcl")


def test_the_closing_line_is_at_most_160_characters_whatever_the_run():
    # The longest line there can be: the training split, millions of fractures, two closed forms named, medians
    # in e-notation, and the longest answer. It keeps the verdict and leaves the medians to flowlearn evaluate.
    result = hand_built((1.5e-07, 2.0), None, fractures=123_456)
    result.metrics["inclined"]["flow_rate_err"][:] = 5.5e-3
    result.metrics["model"]["flow_rate_err"][:] = 1.25e-3
    result.metrics["mlcl"]["departure_err"][:] = 1.5e-06
    line = summary(result, "train")
    assert line == (
        "done: train (not held out), 123456 fractures: beats mlcl/inclined beyond the reference's error? lower, "
        "no error recorded"
    )
    assert len(line) <= DONE_WIDTH == 160


def test_the_closing_line_names_no_path_however_long_the_run_directory(run, tmp_path):
    deep = tmp_path.joinpath(*["a-run-directory-with-a-long-name-" + "x" * 60] * 3)
    deep.mkdir(parents=True)
    shutil.copy(run / "predictions.h5", deep / "predictions.h5")
    line = closing_line(deep / "predictions.h5")
    result = held_out(run / "predictions.h5", "test")
    assert line == f"done: test, {len(result.names)} fractures: {verdict_sentence(result)}"
    assert len(line) <= 160 and "a-run-directory" not in line


def test_the_reports_table_holds_the_best_closed_form_and_the_references_error_per_split():
    section = verdict_section(
        {"test": hand_built((0.0016, 2.0), (0.0004, 3.0)), "val": hand_built((0.02, 7.0))}
    )
    lines = section.splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert table[:2] == [
        "| split |  | MSE | departure error (1 − R²) | flow-rate error (%) |",
        "|---|---|---|---|---|",
    ]
    rows = verdict_rows(section)
    assert list(rows) == [
        ("test", "model"),
        ("test", "mlcl (best closed form in departure, flow rate)"),
        ("test", "inclined (best closed form in MSE)"),
        ("test", "power (a = 3.10)"),
        ("test", "lcl"),
        ("test", "the reference's own error (vs its smooth walls)"),
        ("val", "model"),
        ("val", "mlcl (best closed form in departure, flow rate)"),
        ("val", "inclined (best closed form in MSE)"),
        ("val", "power (a = 3.10)"),
        ("val", "lcl"),
    ]
    assert rows[("test", "mlcl (best closed form in departure, flow rate)")] == ["2e-05", "0.01", "6"]
    assert rows[("test", "the reference's own error (vs its smooth walls)")] == ["n/a", "0.0004", "3"]
    assert "- test, 3 fractures: the model beats mlcl beyond the reference's error? yes" in section
    assert "- val, 3 fractures: the model beats mlcl beyond the reference's error? no" in section
