"""``flowlearn refine``: each fracture's flow-rate change under 2× refinement, measured or inferred, in its
provenance."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from conftest import parallel_plates, plates_refinement_change

from flowlearn.cli import main
from flowlearn.data.files import read_fracture, read_fractures, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.reference.refinement import MEASURED, infer_rule, measured_convergence, wall_slope

VOXEL = 1e-5  # metres


def sloped_fracture(name: str, slope: float, change: float | None = None) -> Fracture:
    """Plates 4 voxels apart, both walls tilted across the flow by ``slope`` (so their rms slope is ``slope``), with a
    recorded measured change where given."""
    shape = (8, 12)
    y = np.arange(shape[0], dtype=np.float64)[:, None] * np.ones(shape)
    bottom = slope * y * VOXEL
    provenance = {} if change is None else {"convergence": measured_convergence(change)}
    return Fracture(
        name=name,
        aperture=np.full(shape, 4 * VOXEL),
        pressure=np.tile(np.linspace(2.0, 1.0, shape[1]), (shape[0], 1)),
        voxel_size=VOXEL,
        flow_rate=1e-15,
        bottom=bottom,
        top=bottom + 4 * VOXEL,
        provenance=provenance,
    )


def test_the_inferred_estimates_lie_on_the_line_the_measured_ones_lie_on(tmp_path, capsys):
    """Measured changes exactly on c = 0.01 + 0.05 s: the rule recovers that line with no residual, and each
    unmeasured fracture with walls gets its value at its own slope; measured ones keep theirs."""
    line = lambda s: 0.01 + 0.05 * s  # noqa: E731
    measured = [sloped_fracture(f"m{i}", s, line(s)) for i, s in enumerate((0.1, 0.3, 0.6))]
    others = [sloped_fracture("u0", 0.2), sloped_fracture("u1", 0.9)]
    path = tmp_path / "data.h5"
    write_fractures(path, measured + others, attrs={"recipe": json.dumps({"name": "test"})})

    assert main(["refine", str(path), "--infer-only"]) == 0
    assert "fitted on 3 measured fractures" in capsys.readouterr().out
    for fracture in read_fractures(path):
        record = fracture.provenance["convergence"]
        assert record["flow_rate_change"] == pytest.approx(line(wall_slope(fracture)), abs=1e-12)
        assert (record["how"] == MEASURED) == fracture.name.startswith("m")
    assert [wall_slope(read_fracture(path, name)) for name in ("u0", "u1")] == pytest.approx([0.2, 0.9])
    assert read_fracture(path, "u0").provenance["convergence"]["rule"]["residual"] == pytest.approx(
        0, abs=1e-12
    )
    with h5py.File(path) as f:  # the root attributes survive the rewrite
        assert json.loads(f.attrs["recipe"]) == {"name": "test"}
    # The per-fracture table marks the inferred changes.
    assert main(["departure", str(path), "--table"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line[:1] in "mu"}
    assert lines["u0"].endswith(f"{line(0.2):.2%}*") and lines["m0"].endswith(f"{line(0.1):.2%}")


def test_a_rule_needs_three_measured_fractures_of_different_slopes():
    with pytest.raises(ValueError, match="at least 3 measured fractures, this file has 2"):
        infer_rule([0.1, 0.2], [0.01, 0.02])
    with pytest.raises(ValueError, match="the same wall slope"):
        infer_rule([0.1, 0.1, 0.1], [0.01, 0.02, 0.03])


def test_refine_measures_plates_as_theory_says_and_a_rerun_keeps_what_it_measured(tmp_path, capsys):
    """Parallel plates: the 1x flow rate stored in the file is the lattice's own, so the measured change must be the
    lattice's exact one (:func:`plates_refinement_change`), run with the settings the file records."""
    _, fracture = parallel_plates()
    assert "convergence" not in fracture.provenance
    path = tmp_path / "plates.h5"
    write_fractures(path, [fracture])

    assert main(["refine", str(path), "--threads", "1"]) == 0
    assert "measured 1 fracture(s)" in capsys.readouterr().out
    record = read_fracture(path, "fracture_000").provenance["convergence"]
    assert record["how"] == MEASURED
    assert record["flow_rate_change"] == pytest.approx(plates_refinement_change(), abs=2e-3)

    before = path.read_bytes()
    assert main(["refine", str(path)]) == 0
    assert "measured 0 fracture(s)" in capsys.readouterr().out
    assert path.read_bytes() == before
