"""`flowlearn ensemble`: K members' predictions combined, each flow rate with a prediction interval whose coverage
is what its level says, and `flowlearn evaluate` reporting how often it holds the reference."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from flowlearn.cli import main
from flowlearn.errors import DataValidationError
from flowlearn.reporting.ensemble import combine, coverage
from flowlearn.training.predictions import FractureFields, read_predictions, write_fields

SHAPE = (3, 4)


def _fields(
    name: str, flow_rate: float, reference: float, law: str = "mlcl", split: str = "test"
) -> FractureFields:
    pressure = np.tile(np.linspace(2, 1, SHAPE[1]), (SHAPE[0], 1))
    return FractureFields(
        name=name, split=split, law=law, correction_name="W", voxel_size=1e-5,
        aperture=np.full(SHAPE, 4e-5), active=np.ones(SHAPE, bool), correction=np.full(SHAPE, flow_rate),
        log_k=np.zeros(SHAPE), pressure=pressure + flow_rate, pressure_reference=pressure,
        baseline_pressures={"lcl": pressure}, flow_rate=flow_rate, flow_rate_reference=reference,
        baseline_flow_rates={"lcl": 1.0}, power_exponent=math.nan,
    )  # fmt: skip


def _members(
    tmp_path: Path, rates: np.ndarray, references: np.ndarray, splits: list[str] | None = None, **kwargs
) -> list[Path]:
    """One predictions file per member (row of ``rates``) in ``tmp_path``, a fracture per column (of split
    ``splits[i]``, by default test)."""
    tmp_path.mkdir(exist_ok=True)
    splits = splits or ["test"] * len(references)
    paths = []
    for k, row in enumerate(rates):
        paths.append(tmp_path / f"member{k}.h5")
        fields = [
            _fields(f"f{i:04d}", q, ref, split=split, **kwargs)
            for i, (q, ref, split) in enumerate(zip(row, references, splits))
        ]
        write_fields(paths[-1], fields, None)
    return paths


def test_the_interval_covers_a_new_member_as_often_as_its_level_says(tmp_path):
    # Members and the "reference" all drawn from one log-normal per fracture: the Student-t prediction interval of
    # K members holds the next draw with probability exactly `level`, whatever the fracture's centre and spread.
    rng = np.random.default_rng(0)
    count, k = 800, 4
    centres, spreads = rng.normal(0, 2, count), rng.uniform(0.01, 0.5, count)
    draws = np.exp(centres + spreads * rng.normal(size=(k + 1, count)))
    paths = _members(tmp_path, draws[:k], draws[k])
    for level in (0.5, 0.9):
        combined, how = combine(paths, level, calibrate=None)
        assert how == "Student-t prediction interval of 4 members"
        covered, compared = coverage(combined)
        assert compared == count
        assert covered / count == pytest.approx(level, abs=3 * math.sqrt(level * (1 - level) / count))
    # The centre is the geometric mean, and the fields the members' means (W geometric).
    first = combined[0]
    assert first.flow_rate == pytest.approx(math.exp(np.log(draws[:k, 0]).mean()), rel=1e-12)
    np.testing.assert_allclose(first.correction, math.exp(np.log(draws[:k, 0]).mean()), rtol=1e-12)
    np.testing.assert_allclose(first.pressure - first.pressure_reference, draws[:k, 0].mean(), rtol=1e-12)


def test_the_calibrated_interval_covers_the_reference_at_least_as_often_as_its_level_says(tmp_path):
    # Members that agree closely with each other but miss the reference by a log-normal error of 10 %: their own
    # spread says nothing of it (the Student-t interval covers a fraction), the residuals of a calibration split do.
    rng = np.random.default_rng(1)
    n_val, n_test, k = 99, 1000, 3
    truth = np.exp(rng.normal(0, 1, n_val + n_test))
    model = truth * np.exp(0.1 * rng.normal(size=truth.size))
    members = model * np.exp(0.001 * rng.normal(size=(k, truth.size)))
    paths = _members(tmp_path, members, truth, splits=["val"] * n_val + ["test"] * n_test)
    level = 0.9
    combined, how = combine(paths, level)
    assert how == f"split conformal on {n_val} val fractures"
    covered, compared = coverage([f for f in combined if f.split == "test"])
    # Split conformal: coverage >= level for exchangeable fractures, and below level + 1/(n_val + 1) on average.
    margin = 3 * math.sqrt(level * (1 - level) / n_test)
    assert level - margin <= covered / compared <= level + 1 / (n_val + 1) + margin
    bare, _ = combine(paths, level, calibrate=None)
    assert coverage([f for f in bare if f.split == "test"])[0] < 0.1 * n_test
    # Too few calibration fractures for the level: an unbounded interval, not a false promise.
    few = _members(tmp_path / "few", members[:, :6], truth[:6], splits=["val"] * 5 + ["test"])
    (last,) = [f for f in combine(few, 0.9)[0] if f.split == "test"]
    assert last.flow_rate_interval == (0.0, math.inf)


def test_members_must_hold_the_same_fractures_splits_and_law(tmp_path):
    one = _members(tmp_path / "a", np.ones((1, 3)), np.ones(3))
    other = _members(tmp_path / "b", np.ones((1, 2)), np.ones(2))
    with pytest.raises(DataValidationError, match=r"member0.h5: holds other fractures than .*group 'f0002'"):
        combine([*one, *other])
    law = _members(tmp_path / "c", np.ones((1, 3)), np.ones(3), law="lcl")
    with pytest.raises(
        DataValidationError, match=r"group 'f0000' is split test with law=lcl, and in .* law=mlcl"
    ):
        combine([*one, *law])


def test_evaluate_reports_the_coverage_of_an_ensemble_and_nothing_for_one_model(tmp_path, capsys):
    # Two members at 0.9 and 1.1 of references 1: intervals wide enough for all; a fifth fracture far off.
    rates = np.array([[0.9, 0.9, 0.9, 0.9, 3.0], [1.1, 1.1, 1.1, 1.1, 3.3]])
    paths = _members(tmp_path, rates, np.ones(5))
    output = tmp_path / "ensemble.h5"
    assert main(["ensemble", *map(str, paths), "-o", str(output)]) == 0
    assert [f.flow_rate_interval[0] < 1 < f.flow_rate_interval[1] for f in read_predictions(output)] == [
        True
    ] * 4 + [False]
    capsys.readouterr()
    assert main(["evaluate", str(output)]) == 0
    assert (
        "the ensemble's 90% interval of the flow rate (Student-t prediction interval of 2 members) holds the "
        "reference on 4 of 5 test fractures (80%)"
    ) in capsys.readouterr().out
    assert main(["evaluate", str(paths[0])]) == 0
    assert "interval" not in capsys.readouterr().out
    # A member alone keeps no interval; the ensemble's fields read back as written.
    assert all(math.isnan(end) for end in read_predictions(paths[0])[0].flow_rate_interval)
    assert dataclasses.asdict(read_predictions(output)[0])["flow_rate"] == pytest.approx(math.sqrt(0.9 * 1.1))
