"""Shared fixtures: the example fracture from ../shared, and the linear-solver backends to run every test on."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowlearn.data.lbm import CXX_COMPILERS
from flowlearn.engines import Engine, cholmod_available, make_engine

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
    from flowlearn.data.stokes import TOOLS

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
