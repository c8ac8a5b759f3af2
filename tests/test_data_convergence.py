"""Grid convergence of the LBM: the same fracture at 1x, 2x and 3x the resolution."""

import numpy as np
import pytest
from conftest import require_lbm

from flowlearn.data.convergence import differences, grid_convergence
from flowlearn.data.lbm import LBMSettings
from flowlearn.data.roughness import RoughnessParams, rough_fracture

require_lbm()


@pytest.mark.slow
def test_flow_rate_and_pressure_converge_with_resolution():
    """Refining a rough fracture brings the flow rate and the pressure's departure from the straight line
    closer to the finest run, and the coarsest is already within a few percent in flow rate."""
    params = RoughnessParams((12, 12), 0.7, 1.5, 4.0, 12.0, seed=2, min_wavelength=6.0, shear=1.0)
    runs = grid_convergence(rough_fracture(params), (1, 2, 3), LBMSettings(tolerance=1e-7))
    rows = differences(runs)
    q1, q2 = (abs(row["flow_rate_difference"]) for row in rows[:2])
    p1, p2 = (row["pressure_rms_difference"] for row in rows[:2])
    assert q2 < q1 < 0.1 and p2 < p1
    # The departure itself is well above the differences between resolutions: the study resolves it.
    assert rows[-1]["departure_rms"] > 3 * p1
    assert np.isfinite([row["conductance"] for row in rows]).all()
