"""``flowlearn.reference.references``: the reference of a fracture without walls, its gap centred on a flat mid-plane,
is the generator's of the same gap between flat walls; what a rerun keeps; what it drops of an earlier reference."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import PLATES_GAP, parallel_plates

from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.reference.references import RECORD, reference_file
from flowlearn.reference.refinement import lbm_settings_of


@pytest.fixture(scope="module")
def plates() -> Fracture:
    """Parallel plates 4 voxels apart on a 6x32 map, generated (walls, LBM reference) to a tight steady state."""
    return parallel_plates()[1]


def test_an_aperture_map_is_centred_on_a_flat_mid_plane(plates, tmp_path):
    source, output = tmp_path / "maps.h5", tmp_path / "referenced.h5"
    record = {"convergence": {"flow_rate_change": 0.02, "how": "measured: the LBM on the 2x grid"}}
    aperture_only = Fracture(
        "plates",
        plates.aperture,
        None,
        voxel_size=plates.voxel_size,
        provenance={"origin": "a map", **record},
    )
    write_fractures(source, [aperture_only])
    settings = lbm_settings_of(plates, threads=1)  # the generator's, the tolerance tightened
    done = reference_file(source, output, settings, progress=False)
    assert (done.computed, done.kept) == (1, 0)
    (referenced,) = read_fractures(output)
    # The same voxels in the same box as the generator's flat walls: the same flow, to its tolerance.
    assert referenced.provenance["voxel_box"] == plates.provenance["voxel_box"] == [6, 32, PLATES_GAP]
    assert referenced.flow_rate == pytest.approx(plates.flow_rate, rel=1e-6)
    np.testing.assert_allclose(referenced.pressure, plates.pressure, atol=1e-6)
    assert referenced.bottom is None and "geometry" not in referenced.provenance
    assert referenced.provenance[RECORD]["gap"] == "its aperture about a flat mid-plane"
    # The input's provenance is kept, less the record of how far an earlier reference lay from the converged flow.
    assert referenced.provenance["origin"] == "a map" and "convergence" not in referenced.provenance
    # A rerun keeps it; other settings (a tighter tolerance), or another geometry, compute it again.
    assert reference_file(source, output, settings, progress=False).kept == 1
    tighter = replace(settings, tolerance=settings.tolerance / 2)
    assert reference_file(source, output, tighter, progress=False).computed == 1
    write_fractures(source, [replace(aperture_only, aperture=plates.aperture * 0.999)])
    assert reference_file(source, output, tighter, progress=False).computed == 1
