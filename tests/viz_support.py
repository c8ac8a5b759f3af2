"""A tiny finished training run for the figure, report and notebook tests.

The fractures have contact spots (zero aperture), so every figure has inactive pixels to show. Their "reference"
pressure comes from a Darcy solve with T ∝ Ap^2.5 instead of the local cubic law's Ap³, so the LCL is measurably
wrong and a trained correction differs from W = 1. They carry no reference flow rate.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.data.files import write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture

ROOT = Path(__file__).resolve().parents[1]
VOXEL_SIZE = 1e-5  # metres per pixel of the test fractures
SHAPE = (20, 28)


def make_fractures(path: Path, count: int = 6, seed: int = 0) -> Path:
    """Write ``count`` fractures of shape ``SHAPE`` with contact spots to ``path`` (flowlearn layout)."""
    fractures = []
    for i in range(count):
        params = RoughnessParams(
            SHAPE, hurst=0.8, rms=1.0, mean_aperture=1.2, mismatch_length=16.0, seed=seed + i
        )
        aperture = rough_fracture(params).aperture * VOXEL_SIZE
        problem = DarcyProblem.fracture(SHAPE, active=aperture > 0, drop_unconnected=True)
        log_k = np.where(problem.active, 2.5 * np.log(np.maximum(aperture, 1e-300)), 0.0)
        pressure = solve_pressure(torch.from_numpy(log_k), problem).numpy()
        assert (~problem.active).any(), "the test fractures should have inactive pixels"
        fractures.append(
            Fracture(
                f"fracture_{i:02d}",
                aperture,
                np.where(problem.active, pressure, 1.5),
                # Contact spots are inactive by their zero aperture; the mask drops open cells cut off from the faces.
                mask=problem.active | (aperture == 0),
                voxel_size=VOXEL_SIZE,
            )
        )
    write_fractures(path, fractures)
    return path


def train(run_dir: Path, *overrides: str, multirun: bool = False) -> subprocess.CompletedProcess:
    """``python train.py`` into ``run_dir`` (a sweep directory with ``multirun``); fails the test on error."""
    where = f"hydra.sweep.dir={run_dir}" if multirun else f"hydra.run.dir={run_dir}"
    command = [sys.executable, str(ROOT / "train.py"), *(["-m"] if multirun else []), where, *overrides]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"train.py failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result


def tiny_run(base: Path) -> Path:
    """A finished 3-epoch CNN run under ``base`` (trained once, then reused), with periodic figures every 2 epochs.

    ``base`` is a session-wide folder, so the test modules that import this share one run.
    """
    run_dir = base / "tiny_run"
    if not (run_dir / "predictions.h5").is_file():
        data = make_fractures(base / "fractures.h5")
        train(
            run_dir,
            f"data.path={data}",
            "data.fractions=[0.5,0.25,0.25]",
            "trainer.max_epochs=3",
            "model.channels=4",
            "optimizer.lr=0.02",
            # Render every 2 epochs whatever it costs, so that periodic figures exist.
            "callbacks.figures.every_n_epochs=2",
            "callbacks.figures.max_overhead=1000",
        )
    return run_dir
