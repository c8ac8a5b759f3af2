"""``flowlearn reference --slurm`` on a real one-node SLURM cluster (tests/slurm_cluster.py): the array job of
``flowlearn generate --slurm`` (flowlearn.reference.cluster.run_array), computing references.

Three aperture maps of 6x16 pixels (gaps of 3 to 5 voxels), two array tasks of one CPU; the output is the one a local
run writes, and a rerun keeps every fracture.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ARRAY
from slurm_cluster import SlurmCluster

from flowlearn.cli import main
from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.schema import Fracture

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]


def _maps(path: Path) -> Path:
    """Three fractures without walls: a wavy aperture of 3 to 5 voxels of 10 µm."""
    x = np.arange(16)
    fractures = [
        Fracture(
            f"map{k}",
            np.tile(4e-5 + 1e-5 * np.sin(2 * np.pi * (x + 3 * k) / 16), (6, 1)),
            None,
            voxel_size=1e-5,
        )
        for k in range(3)
    ]
    write_fractures(path, fractures)
    return path


def _reference(
    cluster: SlurmCluster, source: Path, output: Path, *options: str
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "flowlearn.cli", "reference", str(source), "-o", str(output), "--quiet"]
    return subprocess.run(
        [*command, "--tolerance", "1e-5", *options],
        env=cluster.env(PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_array_computes_the_references_of_a_local_run_and_a_rerun_keeps_them(cluster, tmp_path):
    source = _maps(tmp_path / "maps.h5")
    result = _reference(cluster, source, tmp_path / "slurm.h5", *ARRAY)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert (summary["fractures"], summary["computed_now"], summary["kept"]) == (3, 3, 0)
    assert not (tmp_path / "slurm.h5.parts").exists()
    local = tmp_path / "local.h5"
    assert (
        main(["reference", str(source), "-o", str(local), "--quiet", "--tolerance", "1e-5", "--threads", "1"])
        == 0
    )
    for x, y in zip(read_fractures(tmp_path / "slurm.h5"), read_fractures(local), strict=True):
        assert x.name == y.name and x.flow_rate == y.flow_rate
        np.testing.assert_array_equal(x.pressure, y.pressure)
    rerun = _reference(cluster, source, tmp_path / "slurm.h5", *ARRAY)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(rerun.stdout)["kept"] == 3 and json.loads(rerun.stdout)["computed_now"] == 0
