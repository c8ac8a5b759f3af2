"""Shared fixtures: the example fracture from ../shared, and the linear-solver backends to run every test on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowlearn.engines import Engine, cholmod_available, make_engine
from flowlearn.reference.lbm import CXX_COMPILERS

# Tests start train.py and the command line in fresh processes, again and again. Where the environment sets
# PYTHONDONTWRITEBYTECODE, every one of them compiles flowlearn's modules from source again (0.4-0.6 s a process,
# a sixth of tests/test_user_errors.py's time): Python's default, restored here for those processes, compiles each
# module once.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

EXAMPLE_FRACTURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "example_fracture.mat"

# Why the CHOLMOD tests skip: the optional accelerator is not installed, and what installs it.
NO_CHOLMOD = "scikit-sparse (CHOLMOD) is not installed: apt-get install libsuitesparse-dev, pip install -e '.[cholmod]'"

DIRECT_BACKENDS = [
    pytest.param("cholmod", marks=pytest.mark.skipif(not cholmod_available(), reason=NO_CHOLMOD)),
    "superlu",
]
ALL_BACKENDS = [*DIRECT_BACKENDS, "amg"]


@pytest.fixture(params=ALL_BACKENDS)
def solver(request) -> Engine:
    """A fresh solver per test, for every backend."""
    return make_engine(request.param)


@pytest.fixture(scope="session")
def example_fracture() -> tuple[np.ndarray, np.ndarray]:
    """(aperture, LBM pressure), float64 (256, 260), from the original work's fracture; skipped when absent."""
    if not EXAMPLE_FRACTURE.exists():
        pytest.skip(f"{EXAMPLE_FRACTURE} is not present")
    with h5py.File(EXAMPLE_FRACTURE, "r") as f:
        aperture = f["fracture_1/aperture_field"][0, 0].astype(np.float64)
        pressure = f["fracture_1/pressure_field"][0, 0].astype(np.float64)
    return aperture, pressure


def require_openfoam() -> None:
    """Skip the calling test (or module) where OpenFOAM's tools are not on PATH; the reason says how to install."""
    from flowlearn.reference.stokes import TOOLS

    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"OpenFOAM is not installed ({', '.join(missing)} not on PATH): apt-get install openfoam",
            allow_module_level=True,
        )


def require_lbm() -> None:
    """Skip the calling test (or, at module level, module) where an LBM run cannot: without lbmpy, or without the
    C++ compiler its CPU kernels are built with; the reason names what to install."""
    pytest.importorskip("lbmpy", reason="lbmpy is not installed: pip install -e '.[lbm]'")
    if not any(shutil.which(compiler) for compiler in CXX_COMPILERS):
        pytest.skip(
            "no C++ compiler (g++ or clang++) for lbmpy's kernels: apt-get install g++",
            allow_module_level=True,
        )


# Parallel plates this many voxels apart, for the tests of a 2x refinement's recorded change.
PLATES_GAP = 4.0


def parallel_plates(refine_every: int = 0):
    """(config, fracture): parallel plates ``PLATES_GAP`` voxels apart on a 6x32 map, generated with the LBM to a
    tight steady state (the published recipe's first special case), and ``config`` made them."""
    require_lbm()
    from dataclasses import replace

    from flowlearn.fractures.recipes import Published
    from flowlearn.reference.generate import DatasetConfig, _make

    config = DatasetConfig(
        count=1,
        shape=(6, 32),
        mean_aperture=PLATES_GAP,
        recipe=Published(mismatch_ratio=2.0, wavelength_ratio=1.0, special_every=6),
        refine_every=refine_every,
    )
    assert config.recipe.kind(0) == "parallel"
    return config, _make(config, 0, replace(config.lbm, tolerance=1e-8, threads=1))


def plates_refinement_change(b: float = PLATES_GAP) -> float:
    """Q(2x)/Q(1x) - 1 of plates b voxels apart: with TRT's magic parameter 3/16 the node velocities are the exact
    parabola, and the lattice's flux is their sum, b³/12 + b/24 (per unit of the force over the viscosity), so
    refining the grid 2× changes it by [(8b³/12 + 2b/24)/8] / (b³/12 + b/24) - 1 (the 1× flux is 1/(2b²) high)."""
    return (8 * b**3 / 12 + 2 * b / 24) / 8 / (b**3 / 12 + b / 24) - 1


# The LBM's SLURM arrays of tests/test_generate_slurm.py and tests/test_reference_slurm.py: two tasks of one CPU and
# 1 GB each, which both fit the test node (4 CPUs, 4 GB) at once.
ARRAY = ["--slurm", "--tasks", "2", "--cpus-per-task", "1", "--mem-gb", "1", "--timeout-min", "10"]


@pytest.fixture(scope="module")
def cluster():
    """The one-node SLURM cluster of tests/slurm_cluster.py, one per module, for tests that run the LBM on it
    (skipped, saying why, where the cluster or lbmpy cannot run)."""
    from slurm_cluster import slurm_cluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    require_lbm()
    with slurm_cluster(cpus=4) as running:
        yield running
