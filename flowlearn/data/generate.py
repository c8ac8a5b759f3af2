"""Make LBM reference datasets: rough fracture -> voxelised gap -> LBM pressure -> flowlearn HDF5 file.

Needs the ``[lbm]`` extra (lbmpy) at run time; the rough-fracture generator and the schema do not.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm.auto import tqdm

from flowlearn.checks import check_setting, is_integer, is_number
from flowlearn.data.lbm import LBMSettings, simulate, voxelize
from flowlearn.data.roughness import RoughnessParams, rough_fracture
from flowlearn.data.schema import Fracture, write_fractures


@dataclass(frozen=True)
class DatasetConfig:
    """A family of rough fractures; fracture i gets seed ``seed + i``. Lengths in voxels unless noted.

    Attributes:
        count: number of fractures.
        shape: (H, W) of each aperture map.
        hurst, rms, mean_aperture, mismatch_length: see :class:`~flowlearn.data.roughness.RoughnessParams`.
        seed: seed of the first fracture.
        voxel_size: metres per voxel, used to store apertures in metres.
        lbm: numerical settings of the LBM runs.
    """

    count: int = 8
    shape: tuple[int, int] = (64, 64)
    hurst: float = 0.8
    rms: float = 2.0
    mean_aperture: float = 5.0
    mismatch_length: float = 64.0
    seed: int = 0
    voxel_size: float = 1e-5
    lbm: LBMSettings = field(default_factory=LBMSettings)

    def __post_init__(self) -> None:
        check_setting(
            is_integer(self.count) and self.count >= 1, "count", "must be an integer >= 1", self.count
        )
        check_setting(
            is_number(self.voxel_size) and self.voxel_size > 0, "voxel_size", "must be > 0", self.voxel_size
        )
        # The roughness parameters share their names with this config's fields; building the first fracture's
        # checks them all before any simulation runs.
        self.roughness(0)

    def roughness(self, index: int) -> RoughnessParams:
        return RoughnessParams(
            shape=tuple(self.shape),
            hurst=self.hurst,
            rms=self.rms,
            mean_aperture=self.mean_aperture,
            mismatch_length=self.mismatch_length,
            seed=self.seed + index,
        )


def generate_fracture(
    params: RoughnessParams, settings: LBMSettings, voxel_size: float, name: str, progress: bool = True
) -> Fracture:
    """One rough fracture and its LBM pressure as a :class:`Fracture` with full provenance.

    The stored aperture is the voxelised one (fluid voxels per column times ``voxel_size``, metres), so the
    Darcy model sees exactly the gap the LBM saw; the mask marks cells that no 4-connected path joins to the
    inlet or outlet column.
    """
    walls = rough_fracture(params)
    fluid = voxelize(walls.bottom, walls.top)
    result = simulate(fluid, settings, progress=progress)
    provenance = {
        "generator": "flowlearn.data.generate",
        "roughness": params.to_dict(),
        "voxel_box": list(fluid.shape),
        **result.provenance(settings),
    }
    return Fracture(
        name=name,
        aperture=result.aperture * voxel_size,
        pressure=result.pressure,
        mask=result.active,
        voxel_size=voxel_size,
        inlet_pressure=2.0,
        outlet_pressure=1.0,
        flow_axis="x",
        provenance=provenance,
    )


def generate_dataset(config: DatasetConfig, path: str | os.PathLike, progress: bool = True) -> dict:
    """Generate ``config.count`` fractures and write them atomically to ``path``; return a run summary."""
    start = time.perf_counter()
    fractures = []
    for i in tqdm(range(config.count), desc="fractures", disable=not progress):
        fracture = generate_fracture(
            config.roughness(i), config.lbm, config.voxel_size, f"fracture_{i:03d}", progress=progress
        )
        dataset = {k: v for k, v in asdict(config).items() if k != "lbm"}
        fracture.provenance["dataset"] = {**dataset, "index": i}
        fractures.append(fracture)
    write_fractures(path, fractures)
    lbm = [fr.provenance["lbm"] for fr in fractures]
    return {
        "path": os.fspath(path),
        "fractures": len(fractures),
        "seconds": time.perf_counter() - start,
        "steps": [rec["convergence"]["steps"] for rec in lbm],
        "mlups": float(np.mean([rec["mlups"] for rec in lbm])),
        "contact_fraction": float(np.mean([(fr.aperture == 0).mean() for fr in fractures])),
    }
