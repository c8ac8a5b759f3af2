"""The generator's converged reference: the Stokes flow of a fracture's smooth walls, extrapolated from two meshes.

The LBM sees the walls as a voxel staircase and converges to their flow erratically (data/README.md, "Resolution").
The wall-fitted Stokes solve (:func:`~flowlearn.reference.stokes.solve_walls`, OpenFOAM on a hexahedral mesh that
follows the walls) converges at second order in the cell size h, so two meshes, r₁ and r₂ cells per voxel, give

    Q = Q(r₂) + (Q(r₂) - Q(r₁)) / ((r₂/r₁)² - 1)          (Richardson extrapolation)

with the flow rate Q the conductance Q ν / (p_in - p_out) between the map's inlet and outlet columns (each column's
pressure its cells' mean weighted by their flow, :func:`~flowlearn.reference.voxels.end_pressure`). The pressure is
the finer mesh's, gap-averaged over each voxel column and normalised as the LBM's (heads 2 and 1). On plates the
scheme's error is exactly a multiple of h², so the extrapolation is exact there.

The finer solve starts from the coarser one's fields (OpenFOAM's ``mapFields``): about 0.6 times the iterations
from rest. Both stop when the pressure's normalised residual falls below ``tolerance``: at 1e-7 (the default) the
extrapolated flow rate lies within 1e-4 of the one at 1e-8 on the rock recipe's walls, at 1e-6 within 3e-4 at
relaxation 0.9 but 1 % off at 0.7 (the residual says little about the flow rate across settings, so the tolerance
is tight). A solve that diverges is run again at relaxation 0.7 and a tenth of the tolerance.

What the extrapolation misses is measured, not assumed: ``flowlearn stokes --mesh walls`` at r₂ and a finer r₃ on
a share of a dataset's fractures, and ``flowlearn smooth-walls DATA FILE... --infer`` records each fracture's error
in its provenance (:mod:`flowlearn.reference.reference_error`).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowlearn.checks import check_setting, is_integer, is_number
from flowlearn.data.schema import Fracture
from flowlearn.errors import ReferenceConvergenceError
from flowlearn.reference.stokes import (
    StokesResult,
    StokesSettings,
    extrapolate,
    fracture_walls,
    solve_walls,
)
from flowlearn.reference.wall_mesh import Window

METHOD = (
    "wall-fitted Stokes (OpenFOAM simpleFoam) on the smooth walls at two resolutions: the flow rate extrapolated "
    "at second order, the pressure of the finer mesh"
)

# The coarser mesh must put at least this many cells across the mean gap. At 4 (the published study's fractures at
# 4 voxels per mean aperture, 1 and 2 cells per voxel) the extrapolated flow missed the smooth walls' by -4.9 ... +3.2 %,
# within 2 % on 4 of 8, the coarser mesh being outside the range where the error falls as h²; at 6 (the rock
# recipe's walls) it was within 1 % of the extrapolation from 2 and 3 cells per voxel on 3 of 3.
MIN_GAP_CELLS = 6


@dataclass(frozen=True)
class WallReferenceSettings:
    """Settings of the extrapolated wall-fitted Stokes reference.

    Attributes:
        cells_per_voxel: (r₁, r₂), the coarser and the finer mesh, cells along each voxel; r₂ > r₁ >= 1.
        tolerance: each solve is steady when the pressure's normalised initial residual is below it.
        relaxation: under-relaxation of the velocity per SIMPLE iteration (0.7 steadies very steep walls).
        reservoir: open columns before the inlet and after the outlet (voxels).
        max_iterations: SIMPLE iterations after which a solve that is not steady fails.
    """

    cells_per_voxel: tuple[int, int] = (1, 2)
    tolerance: float = 1e-7
    relaxation: float = 0.9
    reservoir: int = 4
    max_iterations: int = 20_000

    def __post_init__(self) -> None:
        pair = self.cells_per_voxel
        check_setting(
            isinstance(pair, tuple | list)
            and len(pair) == 2
            and all(is_integer(r) for r in pair)
            and 1 <= pair[0] < pair[1],
            "cells_per_voxel",
            "must be two integers r1 < r2, r1 >= 1 (the coarser and the finer mesh)",
            pair,
        )
        object.__setattr__(self, "cells_per_voxel", (int(pair[0]), int(pair[1])))
        # The solves' own settings check the rest, with their names.
        self.solve_settings(1)
        check_setting(
            is_number(self.tolerance) and self.tolerance <= 1e-6,
            "tolerance",
            "must be at most 1e-6: above, the flow rate may stop short of steady by more than the extrapolation's "
            "accuracy (1 % at 1e-6 and relaxation 0.7)",
            self.tolerance,
        )

    def solve_settings(self, cells_per_voxel: int) -> StokesSettings:
        """The :class:`StokesSettings` of one of the two solves."""
        return StokesSettings(
            cells_per_voxel=cells_per_voxel,
            reservoir=self.reservoir,
            tolerance=self.tolerance,
            max_iterations=self.max_iterations,
            relaxation=self.relaxation,
        )

    def to_dict(self) -> dict[str, Any]:
        settings = asdict(self)
        settings["cells_per_voxel"] = list(self.cells_per_voxel)
        return settings


def wall_reference(
    fracture: Fracture,
    settings: WallReferenceSettings | None = None,
    window: Window | None = None,
    progress: bool = False,
) -> Fracture:
    """``fracture`` (with walls, metres) with the extrapolated Stokes flow of its smooth walls as its reference: the
    finer solve's fields (aperture: the walls' gap at the pixels' centres; pressure; mask of the meshed columns),
    the extrapolated flow rate (m³ per unit of head over viscosity), and the provenance's record ``stokes_reference``.
    ``window``: the larger walls where the map is a window of them (the ``rock`` recipe).

    Raises:
        ProblemError, ReferenceConvergenceError, UnavailableError, RuntimeError: as
            :func:`~flowlearn.reference.stokes.solve_walls`.
    """
    settings = settings or WallReferenceSettings()
    bottom, top = fracture_walls(fracture)
    coarse_r, fine_r = settings.cells_per_voxel
    with tempfile.TemporaryDirectory(prefix="flowlearn-walls-") as folder:
        coarse_case, fine_case = Path(folder, "coarse"), Path(folder, "fine")
        coarse, coarse_relaxation = steady_solve(
            bottom, top, settings, coarse_r, coarse_case, progress, window, None
        )
        fine, fine_relaxation = steady_solve(
            bottom, top, settings, fine_r, fine_case, progress, window, coarse_case
        )
    conductance = extrapolate(coarse.conductance, fine.conductance, fine_r / coarse_r)
    size = fracture.voxel_size
    fields = fine.fracture_fields(size)
    record = {
        "method": METHOD,
        "library": f"OpenFOAM ({fine.openfoam})",
        "settings": settings.to_dict(),
        "conductance": [coarse.conductance, fine.conductance, conductance],
        # The finer solve's distance from the extrapolation: an upper bound of the extrapolated value's error where
        # both lie in the asymptotic range (the measured error is ``reference_error``'s).
        "finer_change": fine.conductance / conductance - 1,
        "iterations": [coarse.iterations, fine.iterations],
        "relaxation": [coarse_relaxation, fine_relaxation],
        "cells": [coarse.cells, fine.cells],
        "flux_imbalance": fine.flux_imbalance,
        "seconds": coarse.seconds + fine.seconds,
    }
    return replace(
        fracture,
        **{**fields, "flow_rate": conductance * size**3},
        provenance={**fracture.provenance, "stokes_reference": record},
    )


# Where a solve diverges at the settings' relaxation it is run again at this one, with a tolerance ten times
# tighter: at lower relaxation each iteration changes less, so the residual falls below a tolerance sooner before
# the flow rate is steady (on the rock recipe at 0.7 and 1e-6 the flow rate stopped 0.6 % short; at 1e-8, within
# 3e-5 of the steady one at 0.9).
STEADIER_RELAXATION = 0.7


def steady_solve(
    bottom: np.ndarray,
    top: np.ndarray,
    settings: WallReferenceSettings,
    cells_per_voxel: int,
    case: Path,
    progress: bool,
    window: Window | None,
    start: Path | None,
) -> tuple[StokesResult, float]:
    """One solve of :func:`wall_reference` at ``cells_per_voxel``, in the new folder ``case``, from the fields of the
    case ``start`` (None: from rest), run again more steadily where it diverges; and the relaxation it converged
    at."""
    solve = settings.solve_settings(cells_per_voxel)
    try:
        return solve_walls(bottom, top, solve, case, progress, window, start=start), solve.relaxation
    except ReferenceConvergenceError:
        if solve.relaxation <= STEADIER_RELAXATION:
            raise
    shutil.rmtree(case)
    steadier = replace(solve, relaxation=STEADIER_RELAXATION, tolerance=solve.tolerance / 10)
    return solve_walls(bottom, top, steadier, case, progress, window, start=start), STEADIER_RELAXATION
