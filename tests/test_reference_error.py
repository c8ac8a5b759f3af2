"""Each fracture's reference error against its smooth walls (``flowlearn smooth-walls``), and the held-out verdict that
calls a gain a gain only where it is larger than that error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flowlearn.cli import main
from flowlearn.data.datamodule import FractureDataset, FractureRef
from flowlearn.data.files import read_fracture, read_fractures, write_fractures
from flowlearn.data.provenance import ERRORS, recorded_error
from flowlearn.data.schema import Fracture
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR, MSE
from flowlearn.models.baselines import COMPARED
from flowlearn.reference.reference_error import INFERRED, MEASURED
from flowlearn.reporting.heldout import MODEL, HeldOut, verdict_table
from flowlearn.training.predictions import FractureFields, read_predictions, write_fields

SHAPE = (6, 10)
VOXEL = 1e-5  # metres
Q_REF = 2.0e-15  # m³/s


def _bumped(name: str, bump: float, flow_rate: float, provenance: dict | None = None) -> Fracture:
    """Plates with the straight pressure 2 -> 1 plus ``bump`` · sin(π x / L), which vanishes at the inlet and outlet
    columns."""
    x = np.linspace(0.0, 1.0, SHAPE[1])
    pressure = np.tile(2 - x + bump * np.sin(np.pi * x), (SHAPE[0], 1))
    return Fracture(
        name,
        np.full(SHAPE, 4 * VOXEL),
        pressure,
        voxel_size=VOXEL,
        flow_rate=flow_rate,
        provenance=provenance or {},
    )


def _stokes(name: str, cells: int, flow_rate: float, bump: float) -> Fracture:
    record = {"stokes": {"mesh": "walls", "settings": {"cells_per_voxel": cells}}}
    return _bumped(name, bump, flow_rate, record)


def test_the_record_holds_the_reference_against_the_second_order_limit_and_the_finer_pressure(
    tmp_path, capsys
):
    """Solves at 1 and 2 cells per voxel with Q(r) = Q∞ (1 - c / r²) extrapolate to Q∞ exactly; the reference's
    pressure bump b against the finer solve's a gives MSE (a - b)² ⟨sin²⟩ and departure error (a - b)² / a²
    (the coarser solve's pressure must not enter). The unsolved fracture gets the median of the three measured and
    their rms spread about it."""
    limits = {"f0": 1.10 * Q_REF, "f1": 1.05 * Q_REF, "f2": 1.02 * Q_REF}
    data = tmp_path / "data.h5"
    bumps = {"f0": 0.02, "f1": 0.03, "f2": 0.01}
    write_fractures(
        data, [_bumped(name, b, Q_REF) for name, b in bumps.items()] + [_bumped("f3", 0.0, Q_REF)]
    )
    coarse, fine = tmp_path / "walls1.h5", tmp_path / "walls2.h5"
    write_fractures(coarse, [_stokes(name, 1, q * (1 - 0.3), 0.5) for name, q in limits.items()])
    write_fractures(fine, [_stokes(name, 2, q * (1 - 0.3 / 4), 0.04) for name, q in limits.items()])

    assert main(["smooth-walls", str(data), str(coarse), str(fine), "--infer"]) == 0
    assert "recorded the reference error of 3 fracture(s)" in capsys.readouterr().out
    sin2 = np.mean(np.sin(np.pi * np.linspace(0.0, 1.0, SHAPE[1])) ** 2)
    expected = {}
    for name, q in limits.items():
        fracture = read_fracture(data, name)
        record = fracture.provenance["reference_error"]
        assert record["how"] == MEASURED and record["cells_per_voxel"] == [1, 2]
        assert record["smooth_wall_flow_rate"] == pytest.approx(q, rel=1e-12)
        expected[name] = (
            Q_REF / q - 1,
            (0.04 - bumps[name]) ** 2 / 0.04**2,
            (0.04 - bumps[name]) ** 2 * sin2,
        )
        assert recorded_error(fracture) == pytest.approx(expected[name], rel=1e-9)
    inferred = read_fracture(data, "f3").provenance["reference_error"]
    values = np.array(list(expected.values()))
    median = np.median(values, axis=0)
    assert inferred["how"] == INFERRED and inferred["fitted_on"] == 3
    assert [inferred[key] for key in ERRORS] == pytest.approx(median, rel=1e-9)
    spread = np.sqrt(np.mean((values - median) ** 2, axis=0))
    assert [inferred["spread"][key] for key in ERRORS] == pytest.approx(spread, rel=1e-9)


def test_a_training_item_and_a_predictions_group_carry_the_recorded_error(tmp_path):
    """What the provenance records reaches the dataset item and survives a predictions file; NaN where none is."""
    record = {"reference_error": {"flow_rate_error": -0.06, "departure_error": 0.005, "pressure_mse": 1e-5}}
    data = tmp_path / "data.h5"
    write_fractures(data, [_bumped("f0", 0.0, Q_REF, record), _bumped("f1", 0.0, Q_REF)])
    dataset = FractureDataset([FractureRef(str(data), name, SHAPE) for name in ("f0", "f1")])
    assert dataset[0]["reference_error"].tolist() == pytest.approx([-0.06, 0.005, 1e-5])
    assert np.isnan(dataset[1]["reference_error"].numpy()).all()

    pressure = read_fractures(data)[0].pressure
    fields = [
        _fields(name, pressure, error)
        for name, error in (("f0", (-0.06, 0.005, 1e-5)), ("f1", (math.nan,) * 3))
    ]
    write_fields(tmp_path / "predictions.h5", fields, None)
    back = read_predictions(tmp_path / "predictions.h5")
    assert back[0].reference_error == pytest.approx((-0.06, 0.005, 1e-5))
    assert all(math.isnan(value) for value in back[1].reference_error)


def _fields(name: str, pressure: np.ndarray, reference_error: tuple[float, ...]) -> FractureFields:
    return FractureFields(
        name=name, split="test", law="mlcl", correction_name="W", voxel_size=VOXEL,
        aperture=np.full(SHAPE, 4 * VOXEL), active=np.ones(SHAPE, bool), correction=np.ones(SHAPE),
        log_k=np.zeros(SHAPE), pressure=pressure, pressure_reference=pressure,
        baseline_pressures={COMPARED: pressure}, flow_rate=1.0, flow_rate_reference=1.0,
        baseline_flow_rates={COMPARED: 1.0}, power_exponent=math.nan, reference_error=reference_error,
    )  # fmt: skip


def _held_out(reference_error: dict[str, float]) -> HeldOut:
    """Two fractures with the same errors each: the model's and mlcl's, and the LCL's."""
    rows = {
        MODEL: {MSE: 1e-4, DEPARTURE_ERR: 0.01, FLOW_RATE_ERR: 2.0},
        "mlcl": {MSE: 4e-4, DEPARTURE_ERR: 0.0081, FLOW_RATE_ERR: 6.0},
        COMPARED: {MSE: 9e-4, DEPARTURE_ERR: 0.09, FLOW_RATE_ERR: 40.0},
    }
    metrics = {row: {m: np.full(2, value) for m, value in values.items()} for row, values in rows.items()}
    errors = {m: np.full(2, value) for m, value in reference_error.items()}
    return HeldOut(["a", "b"], metrics, math.nan, errors)


@pytest.mark.parametrize(
    "metric, error, clear",
    [
        # Flow-rate errors are a norm already: a gain of 6 - 2 = 4 points.
        (FLOW_RATE_ERR, 3.9, True),
        (FLOW_RATE_ERR, 4.1, False),
        # Squared metrics compare as norms: √4e-4 - √1e-4 = 0.01, against √error.
        (MSE, 0.81e-4, True),
        (MSE, 1.21e-4, False),
    ],
)
def test_a_gain_is_clear_only_where_it_is_larger_than_the_reference_error(metric, error, clear):
    result = _held_out({metric: error})
    assert result.clear_of_reference("mlcl", metric) is clear
    assert result.clear_of_reference("mlcl", DEPARTURE_ERR) is None  # no gain over mlcl there, and no error


def test_the_verdict_marks_each_gain_and_counts_the_fractures_clear_of_the_error():
    """Against mlcl the flow-rate gain (4 points) is within an error of 5 %; against the LCL (38 points) clear; the
    departure gain over the LCL, √0.09 - √0.01 = 0.2, is clear of an error of 0.01 (0.1 as a norm)."""
    table = verdict_table(_held_out({FLOW_RATE_ERR: 5.0, DEPARTURE_ERR: 0.01}))
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("|")}
    assert "67% lower (mlcl; within the reference's error)" in rows["model vs best closed form"]
    assert rows["model vs LCL"].count("clear of the reference's error") == 2
    assert "0.01 | 5" in rows["the reference's own error (vs its smooth walls)"]
    assert "by more than the reference's own error: departure on 0 of 2, flow rate on 0 of 2" in table
    assert "by more than the reference's own error: departure on 2 of 2, flow rate on 2 of 2" in table


def test_without_a_recorded_error_the_verdict_is_as_before():
    table = verdict_table(_held_out({}))
    # No row of the reference's error, no gain called clear of it or within it, no count of fractures by it; the
    # verdict says that there is no error to measure the gains by (the model is not lower than mlcl in departure).
    assert "own error" not in table and "clear of" not in table and "within the reference" not in table
    assert "the model beats mlcl beyond the reference's error? no (departure 0.01 vs 0.0081, " in table
