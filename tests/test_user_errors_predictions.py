"""A damaged predictions file (``predictions.h5``) gets one line naming the file, the group, the field or attribute,
its value and what is expected, and exit status 2, from every reader: ``flowlearn evaluate``, ``report`` and
``ensemble``; a sweep lists the run whose predictions are damaged as unreadable, and exits 1.

Each bad file is the predictions of a real (tiny) finished run with one edit to its first test group.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from viz_support import tiny_run

from flowlearn.cli import main
from flowlearn.training.predictions import FractureFields, read_predictions, write_fields


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real finished run (shared with the report tests: trained once a session)."""
    return tiny_run(tmp_path_factory.getbasetemp())


def _flowlearn(capsys, *argv: str) -> tuple[int, str, str]:
    """`flowlearn <argv>` in this process: (exit status, stdout, stderr)."""
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _first_test_group(f: h5py.File) -> str:
    return next(name for name, group in f.items() if group.attrs["split"] == "test")


def _damaged(source: Path, target: Path, edit: Callable[[h5py.Group], object]) -> str:
    """Copy the predictions file ``source`` to ``target`` and ``edit`` its first test group; returns that group's
    name."""
    shutil.copy(source, target)
    with h5py.File(target, "r+") as f:
        name = _first_test_group(f)
        edit(f[name])
    return name


def _error(status: int, err: str, command: str, message: str) -> None:
    """Exit status 2 and stderr exactly the one line ``flowlearn <command>: error: <message>``."""
    assert status == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.rstrip("\n") == f"flowlearn {command}: error: {message}"


def _replace(group: h5py.Group, field: str, value: np.ndarray) -> None:
    del group[field]
    group.create_dataset(field, data=value)


def _set(attribute: str, value: object) -> Callable[[h5py.Group], None]:
    return lambda group: group.attrs.__setitem__(attribute, value)


def test_an_intact_predictions_file_is_read(run, capsys):
    # The checks refuse none of what training writes (no reference flow rate is NaN in this run's file).
    status, out, err = _flowlearn(capsys, "evaluate", str(run / "predictions.h5"))
    assert status == 0, err
    # Its test fractures lie outside the training range of a statistic or two: warnings, no error.
    assert all(line.startswith("flowlearn evaluate: warning: ") for line in err.splitlines()), err
    assert "| lcl |" in out


def test_evaluate_a_group_without_the_lcl_pressure(run, tmp_path, capsys):
    # Audit row 18: a KeyError: 'lcl' traceback.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, lambda group: group.__delitem__("pressure_lcl"))
    status, out, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': field 'pressure_lcl' is missing: every predictions group holds it (as training "
        "and flowlearn predict write it)",
    )
    assert out == ""


def test_report_a_run_whose_group_lacks_the_lcl_pressure(run, tmp_path, capsys):
    # Audit row 18, `flowlearn report`: the same traceback, now one line, and nothing written.
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report.md"))
    shutil.rmtree(copy / "figures", ignore_errors=True)
    path = copy / "predictions.h5"
    name = _damaged(run / "predictions.h5", path, lambda group: group.__delitem__("pressure_lcl"))
    status, _, err = _flowlearn(capsys, "report", str(copy))
    _error(
        status,
        err,
        "report",
        f"{path}: group '{name}': field 'pressure_lcl' is missing: every predictions group holds it (as training "
        "and flowlearn predict write it)",
    )
    assert not (copy / "report.md").exists() and not (copy / "figures").exists()


def test_a_sweep_lists_a_run_whose_predictions_group_is_damaged(run, tmp_path, capsys):
    # Audit row 19: a 42-line traceback, and the sweep's table was never written.
    sweep = tmp_path / "sweep"
    for index in ("0", "1"):
        shutil.copytree(run, sweep / index, ignore=shutil.ignore_patterns("report.md", "figures"))
    path = sweep / "1" / "predictions.h5"
    name = _damaged(run / "predictions.h5", path, lambda group: group.__delitem__("pressure_lcl"))
    message = (
        f"{path}: group '{name}': field 'pressure_lcl' is missing: every predictions group holds it (as training "
        "and flowlearn predict write it)"
    )
    status, _, err = _flowlearn(capsys, "report", str(sweep), "--dpi", "50")
    assert status == 1, err
    assert err == f"flowlearn report: incomplete run: {sweep / '1'} is unreadable: {message}\n"
    table = (sweep / "report.md").read_text()
    assert f"| 1 | (defaults) | unreadable: {message} |" in table
    assert "| [0](0/report.md) | (defaults) | complete |" in table
    assert not (sweep / "1" / "report.md").exists()


def test_evaluate_a_reference_error_that_is_text(run, tmp_path, capsys):
    # Audit row 20: ValueError: could not convert string to float: 'b'.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, _set("reference_error", "big"))
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': attribute 'reference_error' is 'big'; expected 3 numbers (flow_rate_error, "
        "departure_error, pressure_mse)",
    )


def test_evaluate_a_pressure_of_another_shape(run, tmp_path, capsys):
    # Audit row 21: "error: operands could not be broadcast together with shapes (20,28) (5,5)", no file or group.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, lambda group: _replace(group, "pressure", np.zeros((5, 5))))
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': field 'pressure': shape (5, 5) does not match field 'active' (20, 28)",
    )


def test_report_a_run_whose_pressure_has_another_shape(run, tmp_path, capsys):
    # Audit row 21, `flowlearn report`: a ValueError traceback.
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report.md", "figures"))
    path = copy / "predictions.h5"
    name = _damaged(
        run / "predictions.h5", path, lambda group: _replace(group, "pressure_ap2", np.zeros((5, 5)))
    )
    status, _, err = _flowlearn(capsys, "report", str(copy))
    _error(
        status,
        err,
        "report",
        f"{path}: group '{name}': field 'pressure_ap2': shape (5, 5) does not match field 'active' (20, 28)",
    )
    assert not (copy / "report.md").exists() and not (copy / "figures").exists()


def test_evaluate_a_group_without_an_active_pixel(run, tmp_path, capsys):
    # Audit row 22: "error: a fracture has no active pixel", no file or group.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, lambda group: group["active"].__setitem__(Ellipsis, False))
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': field 'active' has no active pixel; a fracture needs a path from inlet to outlet",
    )


@pytest.mark.parametrize("value", [0.0, -2e-14, np.inf])
def test_evaluate_a_reference_flow_rate_that_is_no_flow_rate(run, tmp_path, capsys, value):
    # Audit row 23: two RuntimeWarnings, then 0 was counted as "no flow rate". NaN is how the writer marks none
    # (this run's data have no flow rate: test_an_intact_predictions_file_is_read reads NaN).
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, _set("flow_rate_reference", value))
    status, out, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': attribute 'flow_rate_reference' is {float(value)!r}; expected a finite number > 0 "
        "(inlet head 2, outlet head 1), or NaN where there is none",
    )
    assert out == ""


def test_evaluate_an_unknown_split(run, tmp_path, capsys):
    # Audit row 24: the 'tset' group silently dropped out of the test split.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, _set("split", "tset"))
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': attribute 'split' is 'tset'; expected train, val, test or predict",
    )


def test_evaluate_a_file_of_two_laws(run, tmp_path, capsys):
    # Audit row 24: groups of law=lcl in a file of law=mlcl went into the same medians.
    path = tmp_path / "p.h5"
    shutil.copy(run / "predictions.h5", path)
    with h5py.File(path, "r+") as f:
        first, *_, last = f
        law = f[first].attrs["law"]
        assert law != "ap2"
        f[last].attrs["law"] = "ap2"
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{last}': attribute 'law' is 'ap2', and '{law}' in group '{first}': expected one law in "
        "every group (a predictions file holds one run's predictions)",
    )


@pytest.mark.parametrize("attribute", ["flow_rate", "flow_rate_lcl"])
def test_evaluate_a_negative_predicted_flow_rate(run, tmp_path, capsys, attribute):
    # Audit row 24: a model flow rate of -1 went into the medians.
    path = tmp_path / "p.h5"
    name = _damaged(run / "predictions.h5", path, _set(attribute, -1.0))
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group '{name}': attribute '{attribute}' is -1.0; expected a finite number > 0 (inlet head 2, "
        "outlet head 1), or NaN where there is none",
    )


def test_ensemble_of_a_damaged_member(run, tmp_path, capsys):
    # The ensemble reads its members with the same checks, and writes nothing.
    bad = tmp_path / "bad.h5"
    name = _damaged(run / "predictions.h5", bad, _set("flow_rate", -1.0))
    output = tmp_path / "ensemble.h5"
    status, _, err = _flowlearn(capsys, "ensemble", str(run / "predictions.h5"), str(bad), "-o", str(output))
    _error(
        status,
        err,
        "ensemble",
        f"{bad}: group '{name}': attribute 'flow_rate' is -1.0; expected a finite number > 0 (inlet head 2, "
        "outlet head 1), or NaN where there is none",
    )
    assert not output.exists()


def test_evaluate_training_statistics_that_are_not_json(run, tmp_path, capsys):
    # A traceback (JSONDecodeError) after the verdict had been printed.
    path = tmp_path / "p.h5"
    shutil.copy(run / "predictions.h5", path)
    with h5py.File(path, "r+") as f:
        f.attrs["training_statistics"] = "{bad"
    status, out, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: attribute 'training_statistics' is '{{bad'; expected a JSON object of [low, high] pairs, one per "
        "statistic (as training writes it)",
    )
    assert out == ""


def _synthetic(flow_rate: float, heads: tuple[float, float], law: str = "lcl") -> FractureFields:
    """One 4x6 open fracture whose pressure runs linearly between ``heads`` (inlet, outlet)."""
    shape = (4, 6)
    pressure = np.tile(np.linspace(*heads, shape[1]), (shape[0], 1))
    return FractureFields(
        name="f0", split="test", law=law, correction_name="w" if law == "exponent" else "W", voxel_size=1e-5,
        aperture=np.full(shape, 1e-4), active=np.ones(shape, bool), correction=np.ones(shape),
        log_k=np.zeros(shape), pressure=pressure, pressure_reference=pressure,
        baseline_pressures={"lcl": pressure}, flow_rate=flow_rate, flow_rate_reference=flow_rate,
        baseline_flow_rates={"lcl": flow_rate}, power_exponent=math.nan,
    )  # fmt: skip


@pytest.mark.parametrize(
    "flow_rate, heads, law",
    [
        (-1e-14, (1.0, 2.0), "lcl"),  # data.heads=[1,2]: the flow runs against x, every flow rate is negative
        (math.nan, (2.0, 1.0), "exponent"),  # a law without flow-rate units, and no reference flow rate
    ],
)
def test_what_the_writer_writes_is_read(tmp_path, flow_rate, heads, law):
    path = tmp_path / "p.h5"
    write_fields(path, [_synthetic(flow_rate, heads, law)], None)
    (back,) = read_predictions(path)
    assert back.law == law and back.pressure[0, 0] == heads[0]
    assert np.isnan(back.flow_rate) if math.isnan(flow_rate) else back.flow_rate == flow_rate


def test_a_flow_rate_against_the_head_drop(tmp_path, capsys):
    # Heads 1 -> 2: a positive flow rate runs the wrong way.
    path = tmp_path / "p.h5"
    write_fields(path, [_synthetic(1e-14, (1.0, 2.0))], None)
    status, _, err = _flowlearn(capsys, "evaluate", str(path))
    _error(
        status,
        err,
        "evaluate",
        f"{path}: group 'f0': attribute 'flow_rate' is 1e-14; expected a finite number < 0 (inlet head 1, outlet "
        "head 2), or NaN where there is none",
    )
