"""An independent Stokes solve of a voxelised fracture with OpenFOAM, to check the LBM reference against.

The finite-volume mesh is the LBM's box (:mod:`flowlearn.reference.voxels`): every fluid voxel, and the open reservoirs
before and after the map, split into r x r x r hexahedral cells (``cells_per_voxel``). OpenFOAM's own tools build
it: ``blockMesh`` meshes the whole box, ``subsetMesh`` keeps the fluid cells, and the faces it exposes become the
no-slip walls. The boundary conditions are the LBM's:

* fixed pressures p_in and 0 on the far faces of the inlet and outlet reservoirs, zero velocity gradient there;
* planes of symmetry at the box's two y faces;
* no slip on the fracture's walls and on the box's z faces.

``simpleFoam`` (laminar, SIMPLEC) solves the steady incompressible Navier-Stokes equations

    ∇·u = 0,    (u·∇)u = -∇p + ν ∇²u,

with p the kinematic pressure, at Reynolds numbers b³ p_in / (12 ν² L) below 1e-3 for gaps b up to 40 voxels over
L = 100 columns (p_in / ν² = 1e-4), where they are Stokes' equations. Lengths are in voxels. Only the fluid that
shares faces with the reservoirs is meshed (:func:`connected_fluid`). The solve is steady when the normalised
initial residual of the pressure falls below ``tolerance``.

Its result is measured as the LBM's (:func:`~flowlearn.reference.voxels.gap_pressure`): the flux-weighted gap-averaged
pressure of each voxel column (over the r x r x rD cells it holds), normalised to 2 at the inlet and 1 at the outlet
column, and the conductance Q ν / (p_in - p_out) in voxels³, with Q the flow through the outlet face.

On plates b voxels apart the scheme's flux is G b³ / (12 ν) (1 + 2 / (r b)²) for a pressure gradient G: second
order in the cell size, so two refinements extrapolate to the exact value (:func:`extrapolate`).

OpenFOAM is not a Python package: ``apt-get install openfoam`` on Debian and Ubuntu installs its tools on PATH
(``openfoam`` 1912 on Debian 12).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage
from tqdm.auto import tqdm

from flowlearn.checks import available_memory, check_setting, is_integer, is_number
from flowlearn.data.files import check_writable
from flowlearn.data.schema import Fracture
from flowlearn.errors import (
    DataValidationError,
    OutputError,
    ProblemError,
    ReferenceConvergenceError,
    UnavailableError,
)
from flowlearn.fractures.closure import ClosureParams, closed_fracture
from flowlearn.reference.voxels import (
    GapPressure,
    ReferenceFlow,
    active_cells,
    add_reservoirs,
    check_fluid,
    flowing_cells,
    fracture_voxels,
    gap_pressure,
    joined_to_ends,
    voxel_size_of,
)
from flowlearn.reference.wall_mesh import WallMesh, Window, corners, open_columns, wall_mesh

# The kinds of fracture whose maps a recipe may cut from larger walls (the plates ignore ``extent``).
WINDOWED = ("rough", "flat_mid_surface")
# The OpenFOAM tools the solve runs, in order.
TOOLS = ("blockMesh", "subsetMesh", "simpleFoam")
# Where Debian's package keeps OpenFOAM's etc/ (its default dictionaries); the tools find it through
# WM_PROJECT_DIR, which only sourcing OpenFOAM's bashrc would set.
DEBIAN_PROJECT_DIR = "/usr/share/openfoam"
# What each mesh is, as a solve's provenance says it.
MESHES = {
    "voxels": "the fluid voxels split into r³ hexahedra",
    "walls": "a hexahedral mesh fitted to the smooth walls, r x r columns per voxel",
}
# Kinematic viscosity and inlet pressure, voxels²/s and voxels²/s²: Stokes flow (see the module docstring).
VISCOSITY = 1.0
INLET_PRESSURE = 1e-4
# Peak memory of the meshing (blockMesh holds the whole box, fluid and solid) and of simpleFoam, bytes per cell: the
# largest tool's peak resident memory was 1.75 kB per fluid cell (0.89 kB per box cell) for a 64x64 fracture split
# 3x3x3 (1.1 million fluid cells, 1.9 GB), 1.9 kB at 2x2x2; these bound it with a margin of about a fifth.
BYTES_PER_BOX_CELL = 1_000
BYTES_PER_FLUID_CELL = 2_000
# Non-orthogonal corrections of the pressure per SIMPLE iteration on the wall-fitted mesh, whose faces between
# columns slant with the walls (the voxel mesh is orthogonal and needs none). They change the path of the
# iterations, not the steady solution: 3 (with relaxation 0.7) kept the steepest walls tried from diverging where 2
# did not.
NON_ORTHOGONAL_CORRECTORS = 3
# A solve is diverging where, after this many iterations, the pressure's residual has risen this many times above
# the least it reached: at 3 cells per voxel and relaxation 0.9 the rock recipe's walls fell to 2e-6 by iteration
# 76 and rose past 1e-3 by 150, where they sat at 0.07 (steady solves fall by 1e-2 to 1e-4 in their first 50).
DIVERGENCE_AFTER = 50
DIVERGENCE_RISE = 100.0
# The most SIMPLE iterations a solve may be given: OpenFOAM reads the case's writeInterval (the iteration count) as a
# 32-bit label, and blockMesh failed with a stack dump on 2^31 and above.
MAX_ITERATIONS = 2**31 - 1


@dataclass(frozen=True)
class StokesSettings:
    """Numerical settings of a Stokes solve.

    Attributes:
        cells_per_voxel: r, finite-volume cells along each side of a voxel (r³ cells per voxel).
        reservoir: open columns (the box's full depth) before the inlet and after the outlet, as the LBM's.
        tolerance: steady when the normalised initial residuals of p and u are below.
        max_iterations: SIMPLE iterations after which an unsteady solve fails, at most :data:`MAX_ITERATIONS`.
        processes: MPI processes (``mpirun -np``; 1: serial, no MPI).
        relaxation: under-relaxation factor of the velocity per SIMPLE iteration; lower is slower and steadier
            (a wall-fitted mesh of very steep walls may need 0.7).
    """

    cells_per_voxel: int = 1
    reservoir: int = 4
    tolerance: float = 1e-8
    max_iterations: int = 20_000
    processes: int = 1
    relaxation: float = 0.9

    def __post_init__(self) -> None:
        check_setting(
            is_integer(self.cells_per_voxel) and self.cells_per_voxel >= 1,
            "cells_per_voxel",
            "must be an integer >= 1",
            self.cells_per_voxel,
        )
        check_setting(
            is_integer(self.reservoir) and self.reservoir >= 0,
            "reservoir",
            "must be an integer >= 0",
            self.reservoir,
        )
        check_setting(
            is_number(self.tolerance) and 0 < self.tolerance < 1,
            "tolerance",
            "must be in (0, 1)",
            self.tolerance,
        )
        check_setting(
            is_integer(self.max_iterations) and 1 <= self.max_iterations <= MAX_ITERATIONS,
            "max_iterations",
            f"must be an integer in [1, {MAX_ITERATIONS}]",
            self.max_iterations,
        )
        check_setting(
            is_integer(self.processes) and self.processes >= 1,
            "processes",
            "must be an integer >= 1",
            self.processes,
        )
        check_setting(
            is_number(self.relaxation) and 0 < self.relaxation <= 1,
            "relaxation",
            "must be in (0, 1]",
            self.relaxation,
        )


@dataclass(frozen=True)
class StokesResult(ReferenceFlow):
    """Outcome of a Stokes solve: the :class:`~flowlearn.reference.voxels.ReferenceFlow` fields (lengths in voxels, time
    in seconds of the case's ν = 1 voxel²/s), and

    Attributes:
        aperture: as the LBM counts it, pockets of fluid cut off from the flow included.
        active: cells whose meshed fluid (:func:`connected_fluid`) joins the inlet or outlet column.
        flow_rate: the flow through the outlet face, voxels³/s.
        flux_imbalance: |Q_in - Q_out| / Q_out between the inlet and outlet faces.
        pressure_kinematic: float64 (H, W), the gap-averaged pressure before normalising, voxels²/s² (NaN where
            inactive).
        iterations: SIMPLE iterations run.
        cells: finite-volume cells of the mesh.
        openfoam: the build of OpenFOAM that solved, as its tools print it ("OPENFOAM=1912 patch=200626").
        seconds: wall time of the meshing and the solve.
        mesh: "voxels" (:func:`solve`) or "walls" (:func:`solve_walls`).
    """

    pressure_kinematic: np.ndarray
    iterations: int
    cells: int
    openfoam: str
    seconds: float
    mesh: str = "voxels"

    def provenance(self, settings: StokesSettings) -> dict[str, Any]:
        """JSON-ready record of the method, settings and convergence."""
        return {
            "stokes": {
                "library": f"OpenFOAM ({self.openfoam})",
                "mesh": self.mesh,
                "method": f"simpleFoam (laminar, SIMPLEC) on {MESHES[self.mesh]}; "
                "fixed-pressure reservoirs, symmetry planes in y, no-slip walls",
                "settings": asdict(settings),
                "iterations": self.iterations,
                "cells": self.cells,
                "flux_imbalance": self.flux_imbalance,
                "flow_rate": self.flow_rate,
                "conductance": self.conductance,
                "seconds": self.seconds,
            }
        }


def check_openfoam(processes: int = 1) -> None:
    """Refuse to start without OpenFOAM's tools (and ``mpirun`` for a parallel solve).

    Raises:
        UnavailableError: naming the missing tool and how to install it.
    """
    needed = TOOLS + (("decomposePar", "reconstructPar", "mpirun") if processes > 1 else ())
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        raise UnavailableError(
            f"the Stokes solve runs OpenFOAM, and {', '.join(missing)} is not on PATH: install it "
            "(apt-get install openfoam on Debian or Ubuntu), or source your OpenFOAM's etc/bashrc"
        )


def check_box(fluid: np.ndarray, settings: StokesSettings, memory: int | None = None) -> None:
    """Refuse a box that no fluid path crosses, or whose mesh would not fit in ``memory`` bytes (default: what this
    process has available now)."""
    check_fluid(fluid)
    active_cells(fluid)
    height, width, depth = fluid.shape
    fluid_voxels = int(fluid.sum())

    def needed(cells_per_voxel: int, reservoir: int) -> float:
        r3 = cells_per_voxel**3
        box = height * (width + 2 * reservoir) * depth * r3
        fluid_cells = (fluid_voxels + 2 * reservoir * height * depth) * r3
        return max(box * BYTES_PER_BOX_CELL, fluid_cells * BYTES_PER_FLUID_CELL)

    _check_mesh_memory(
        f"the Stokes mesh of this {height}x{width}x{depth}-voxel box", "needs about", needed, settings, memory
    )


def _check_mesh_memory(
    mesh: str,
    needs: str,
    needed: Callable[[int, int], float],
    settings: StokesSettings,
    memory: int | None,
) -> None:
    """Raise :class:`ProblemError` where the ``mesh`` ("the Stokes mesh of this HxWxD-voxel box") ``needs``
    ("needs about") more than ``memory`` bytes (default: what this process has available now), by ``needed``'s
    count of its bytes at (cells per voxel, reservoir columns at each end) as ``settings`` set them; the message
    names both, and the largest value of each that fits on its own."""
    memory = available_memory() if memory is None else memory
    r, reservoir = settings.cells_per_voxel, settings.reservoir
    if needed(r, reservoir) <= memory:
        return
    fixes = []
    if needed(1, reservoir) <= memory:
        fixes.append(f"cells_per_voxel <= {_largest(lambda k: needed(k, reservoir) <= memory, 1, r)}")
    if needed(r, 0) <= memory:
        fixes.append(f"reservoir <= {_largest(lambda n: needed(r, n) <= memory, 0, reservoir)}")
    advice = "solve a smaller map"
    if fixes:
        advice = f"use {' or '.join(fixes)}, or {advice}"
    elif needed(1, 0) <= memory:
        advice = "lower cells_per_voxel and reservoir together (each alone is too large)"
    raise ProblemError(
        f"{mesh} at {r} cells per voxel {needs} {needed(r, reservoir) / 2**30:.3g} GiB with reservoirs of "
        f"{reservoir} columns at each end, more than the {memory / 2**30:.3g} GiB available: {advice}"
    )


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [``low``, ``high``) for which ``fits(n)``, where ``fits`` holds at ``low``, not at
    ``high``, and turns false once as n grows (a bisection)."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def check_walls(
    bottom: np.ndarray,
    top: np.ndarray,
    settings: StokesSettings,
    memory: int | None = None,
    window: Window | None = None,
) -> None:
    """Refuse walls (float (H, W), voxels; a ``window`` of larger walls where they are one) that leave no open path
    from inlet to outlet, or whose wall-fitted mesh could need more than ``memory`` bytes (default: what this process
    has available now).

    Raises:
        ProblemError: naming the problem and, for memory, what to lower.
    """
    if bottom.shape != top.shape or bottom.ndim != 2:
        raise ValueError(f"bottom and top must be equal 2D shapes, got {bottom.shape} and {top.shape}")
    height, width = bottom.shape
    span = float(top.max() - bottom.min())

    def needed(cells_per_voxel: int, reservoir: int) -> float:
        # At most every cell of the box's columns, the gap's, the reservoirs' and the solid's, at r per voxel.
        cells = cells_per_voxel**3 * height * (width + 2 * reservoir) * (span + 2)
        return cells * BYTES_PER_FLUID_CELL

    _check_mesh_memory(
        f"the wall-fitted Stokes mesh of this {height}x{width}-voxel map",
        "may need",
        needed,
        settings,
        memory,
    )
    open_columns(*corners(bottom, top, 1, window))


def check_case_dir(case_dir: str | os.PathLike) -> None:
    """Refuse to write a case into an existing folder, whose files OpenFOAM would mix with the new case's, or into
    a folder that cannot be created (below a file, or in a place this process may not write).

    Raises:
        OutputError: naming the folder, and why.
    """
    if Path(case_dir).exists():
        raise OutputError(
            f"{case_dir}: exists already; give a new folder for the OpenFOAM case, or remove it"
        )
    check_writable(case_dir)


def solve(
    fluid: np.ndarray,
    settings: StokesSettings | None = None,
    case_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> StokesResult:
    """Solve steady Stokes flow through the fluid voxels ``fluid`` (bool (H, W, D)) with OpenFOAM.

    ``case_dir``: where the OpenFOAM case is written and kept (a new folder), for inspection in ParaView; by default
    a temporary folder, removed afterwards.

    Raises:
        ProblemError: no fluid path joins the inlet to the outlet column, or the mesh would not fit in memory.
        OutputError: ``case_dir`` exists.
        UnavailableError: OpenFOAM is not installed.
        ReferenceConvergenceError: not steady after ``max_iterations``.
        RuntimeError: an OpenFOAM tool failed (its log's last lines).
    """
    settings = settings or StokesSettings()
    check_box(fluid, settings)
    box = connected_fluid(add_reservoirs(fluid, settings.reservoir))

    def write(case: Path) -> None:
        write_case(case, box, settings)
        _run(["blockMesh"], case)
        _write_cell_set(case, box, settings.cells_per_voxel)
        _run(["subsetMesh", "fluid", "-patch", "walls", "-overwrite"], case)

    return _run_case(
        settings,
        case_dir,
        progress,
        write,
        lambda case, iterations: _measure(case, box, settings, iterations),
        aperture=fluid.sum(axis=2).astype(np.int64),
    )


def solve_walls(
    bottom: np.ndarray,
    top: np.ndarray,
    settings: StokesSettings | None = None,
    case_dir: str | os.PathLike | None = None,
    progress: bool = True,
    window: Window | None = None,
    start: str | os.PathLike | None = None,
) -> StokesResult:
    """Solve steady Stokes flow between the smooth walls ``bottom`` and ``top`` (float (H, W), heights at the map's
    pixel centres in voxels; periodic Fourier walls, planes, or a ``window`` of larger walls, as the generator draws
    them) on the wall-fitted mesh of
    :mod:`flowlearn.reference.wall_mesh`, cells of about 1/``cells_per_voxel`` voxel. The result is measured as
    :func:`solve`'s, on the voxel columns; its ``aperture`` is the walls' separation at the pixels' centres (float64,
    voxels), not a count of voxels.

    Raises:
        ProblemError: the walls leave no open path from inlet to outlet, or the mesh would not fit in memory.
        OutputError, UnavailableError, ReferenceConvergenceError, RuntimeError: as :func:`solve`.
    """
    settings = settings or StokesSettings()
    check_walls(bottom, top, settings, window=window)
    r = settings.cells_per_voxel
    mesh = wall_mesh(bottom, top, r, settings.reservoir, window)

    def write(case: Path) -> None:
        write_poly_mesh(mesh, case)
        # The walls slant the faces between columns: correct the pressure's normal gradient for it.
        write_dictionaries(case, settings, correctors=NON_ORTHOGONAL_CORRECTORS)
        if start is not None:
            # Mesh sequencing: the coarser solve's fields interpolated onto this mesh start the iterations nearer
            # the solution (about 0.6 times the iterations from rest on the rock recipe's walls).
            _run(["mapFields", os.fspath(start), "-consistent", "-sourceTime", "latestTime"], case)

    return _run_case(
        settings,
        case_dir,
        progress,
        write,
        lambda case, iterations: _measure_walls(case, mesh, r, iterations),
        aperture=np.maximum(top - bottom, 0.0),
        mesh="walls",
    )


def _run_case(
    settings: StokesSettings,
    case_dir: str | os.PathLike | None,
    progress: bool,
    write: Callable[[Path], None],
    measure: Callable[[Path, int], dict[str, Any]],
    **fields: Any,
) -> StokesResult:
    """Write a case's mesh and dictionaries (``write``), solve it and ``measure`` it, in ``case_dir`` or a temporary
    folder; ``fields``: the result's fields that the solve does not give."""
    check_openfoam(settings.processes)
    start = time.perf_counter()
    with ExitStack() as stack:
        if case_dir is None:
            case = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flowlearn-stokes-")))
        else:
            case = Path(case_dir)
            check_case_dir(case)
            case.mkdir(parents=True)
        write(case)
        iterations, converged = _solve(case, settings, progress)
        build = re.search(r"^Build\s*:\s*(.+)$", (case / "log.simpleFoam").read_text(), re.MULTILINE)
        if not converged:
            raise ReferenceConvergenceError(
                f"Stokes solve not steady after {iterations} iterations: the pressure's residual stays above "
                f"{settings.tolerance:.1e} (raise max_iterations, or keep the case (case_dir) and read its "
                "log.simpleFoam)"
            )
        result = measure(case, iterations)
    return StokesResult(
        **result,
        **fields,
        openfoam=build.group(1).strip() if build else "unknown",
        seconds=time.perf_counter() - start,
    )


# The order at which Stokes solves on the wall-fitted mesh converge to the smooth walls' flow (a test measures it).
WALL_MESH_ORDER = 2.0


def extrapolate(coarse: float, fine: float, ratio: float, order: float = WALL_MESH_ORDER) -> float:
    """Richardson extrapolation to h -> 0 of a quantity whose error falls as h^``order`` (by default the wall-fitted
    mesh's), from cells of size h (``coarse``) and h / ``ratio`` (``fine``)."""
    return fine + (fine - coarse) / (ratio**order - 1)


def connected_fluid(box: np.ndarray) -> np.ndarray:
    """The fluid of ``box`` (bool (H, W', D), reservoirs included) that a path of shared faces joins to the inlet or
    outlet face: the finite-volume mesh. A pocket enclosed by solid, or touching the rest only along an edge or at a
    corner, has no pressure level of its own to solve for, and would make the pressure equation singular."""
    return joined_to_ends(ndimage.label(box)[0])  # face (6-) connectivity, as the cells of a mesh connect


def foam_header(cls: str, name: str, extra: str = "") -> str:
    """The FoamFile header of an ASCII OpenFOAM file of class ``cls``; ``extra``: more entries (a ``note``)."""
    return f"FoamFile\n{{\n    version 2.0;\n    format ascii;\n    class {cls};\n    object {name};\n{extra}}}\n"


def write_case(case: Path, box: np.ndarray, settings: StokesSettings) -> None:
    """The OpenFOAM dictionaries of a solve on ``box`` (bool (H, W', D), reservoirs included) in ``case``, with
    ``blockMesh``'s of the whole box."""
    height, width, depth = box.shape
    r = settings.cells_per_voxel
    # The box in voxels: OpenFOAM's x is the flow (array axis 1), y the rows (axis 0), z the depth (axis 2).
    block_mesh = f"""convertToMeters 1;
vertices ((0 0 0) ({width} 0 0) ({width} {height} 0) (0 {height} 0)
          (0 0 {depth}) ({width} 0 {depth}) ({width} {height} {depth}) (0 {height} {depth}));
blocks (hex (0 1 2 3 4 5 6 7) ({r * width} {r * height} {r * depth}) simpleGrading (1 1 1));
boundary
(
    inlet {{ type patch; faces ((0 4 7 3)); }}
    outlet {{ type patch; faces ((1 2 6 5)); }}
    symmetryLow {{ type symmetryPlane; faces ((0 1 5 4)); }}
    symmetryHigh {{ type symmetryPlane; faces ((3 7 6 2)); }}
    walls {{ type wall; faces ((0 3 2 1) (4 5 6 7)); }}
);
"""
    write_dictionaries(case, settings, {"system/blockMeshDict": block_mesh})


def write_dictionaries(
    case: Path,
    settings: StokesSettings,
    extra: dict[str, str] | None = None,
    correctors: int = 0,
) -> None:
    """The OpenFOAM dictionaries of a solve in ``case``, whatever its mesh (patches inlet, outlet, symmetry*,
    walls), and the ``extra`` files (path in the case: body). ``correctors``: non-orthogonal corrections of the
    pressure per iteration, which a mesh with slanted faces needs."""
    files = {
        **(extra or {}),
        "system/controlDict": f"""application simpleFoam;
startFrom startTime; startTime 0; stopAt endTime; endTime {settings.max_iterations}; deltaT 1;
writeControl timeStep; writeInterval {settings.max_iterations}; writeFormat ascii; writePrecision 15;
writeCompression off; timeFormat general; timePrecision 8; runTimeModifiable false;
functions
{{
    inletFlow {{ type surfaceFieldValue; libs ("libfieldFunctionObjects.so"); regionType patch; name inlet;
                operation sum; fields (phi); writeFields false; log false; }}
    outletFlow {{ type surfaceFieldValue; libs ("libfieldFunctionObjects.so"); regionType patch; name outlet;
                 operation sum; fields (phi); writeFields false; log false; }}
}}
""",
        "system/fvSchemes": """ddtSchemes { default steadyState; }
gradSchemes { default Gauss linear; }
divSchemes { default none; div(phi,U) bounded Gauss linear; div((nuEff*dev2(T(grad(U))))) Gauss linear; }
laplacianSchemes { default Gauss linear corrected; }
interpolationSchemes { default linear; }
snGradSchemes { default corrected; }
""",
        "system/fvSolution": f"""solvers
{{
    p {{ solver GAMG; smoother GaussSeidel; tolerance 1e-14; relTol 0.01; }}
    U {{ solver smoothSolver; smoother symGaussSeidel; tolerance 1e-14; relTol 0.01; }}
}}
SIMPLE {{ nNonOrthogonalCorrectors {correctors}; consistent yes;
         residualControl {{ p {settings.tolerance:g}; }} }}
relaxationFactors {{ equations {{ U {settings.relaxation:g}; }} }}
""",
        # Slabs along the flow: Debian's OpenFOAM is built without scotch.
        "system/decomposeParDict": f"numberOfSubdomains {settings.processes};\nmethod simple;\n"
        f"simpleCoeffs {{ n ({settings.processes} 1 1); delta 0.001; }}\n",
        "constant/transportProperties": f"transportModel Newtonian;\nnu {VISCOSITY};\n",
        "constant/turbulenceProperties": "simulationType laminar;\n",
        "0/U": """dimensions [0 1 -1 0 0 0 0];
internalField uniform (0 0 0);
boundaryField
{
    inlet { type zeroGradient; }
    outlet { type zeroGradient; }
    "symmetry.*" { type symmetryPlane; }
    walls { type noSlip; }
}
""",
        "0/p": f"""dimensions [0 2 -2 0 0 0 0];
internalField uniform 0;
boundaryField
{{
    inlet {{ type fixedValue; value uniform {INLET_PRESSURE}; }}
    outlet {{ type fixedValue; value uniform 0; }}
    "symmetry.*" {{ type symmetryPlane; }}
    walls {{ type zeroGradient; }}
}}
""",
    }
    for relative, body in files.items():
        path = case / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        cls = {"0/U": "volVectorField", "0/p": "volScalarField"}.get(relative, "dictionary")
        path.write_text(foam_header(cls, path.name) + body)


def _split(box: np.ndarray, r: int) -> np.ndarray:
    """``box`` with each voxel split into r x r x r cells: bool (rH, rW', rD)."""
    return box.repeat(r, axis=0).repeat(r, axis=1).repeat(r, axis=2)


def _cell_labels(cells: np.ndarray) -> np.ndarray:
    """blockMesh's labels of the fluid ``cells`` (bool (ny, nx, nz)): the label of cell (x, y, z) is
    x + nx (y + ny z), and subsetMesh keeps the cells in that order."""
    return np.flatnonzero(cells.transpose(2, 0, 1).ravel())


def _write_cell_set(case: Path, box: np.ndarray, r: int) -> None:
    labels = _cell_labels(_split(box, r))
    sets = case / "constant/polyMesh/sets"
    sets.mkdir(exist_ok=True)
    _write_list(sets / "fluid", "cellSet", labels, "%d")


def _write_list(path: Path, cls: str, rows: np.ndarray, fmt: str, extra: str = "") -> None:
    """An OpenFOAM ASCII list file of class ``cls`` at ``path``: its header (with ``extra`` entries), the count,
    and one row of ``rows`` per line in the printf format ``fmt``."""
    with open(path, "w") as out:
        out.write(foam_header(cls, path.name, extra))
        out.write(f"{len(rows)}\n(\n")
        np.savetxt(out, rows, fmt=fmt)
        out.write(")\n")


def _environment(case: Path) -> dict[str, str]:
    env = dict(os.environ, PWD=str(case))
    if "WM_PROJECT_DIR" not in env and Path(DEBIAN_PROJECT_DIR, "etc").is_dir():
        env["WM_PROJECT_DIR"] = DEBIAN_PROJECT_DIR
    # Open MPI (Debian's MPI) refuses to start as root, as in containers, and more processes than cores, unless
    # told; other MPIs ignore these variables.
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _run(command: list[str], case: Path) -> None:
    """Run an OpenFOAM tool in ``case``; its output goes to ``case/log.<tool>``."""
    done = subprocess.run(command, cwd=case, env=_environment(case), capture_output=True, text=True)
    output = done.stdout + done.stderr
    (case / f"log.{command[0]}").write_text(output)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {case}:\n" + "\n".join(output.splitlines()[-15:]))


def _solve(case: Path, settings: StokesSettings, progress: bool) -> tuple[int, bool]:
    """Run simpleFoam (under mpirun for several processes), with a progress bar over its iterations. Returns the
    iterations run and whether the residuals met the tolerance."""
    command = ["simpleFoam"]
    if settings.processes > 1:
        _run(["decomposePar", "-force"], case)
        command = ["mpirun", "-np", str(settings.processes), "simpleFoam", "-parallel"]
    iterations, converged = 0, False
    log_path = case / "log.simpleFoam"
    # The pressure's residual at the start of each iteration, and the least it has been.
    residual, least, first_of_iteration = math.inf, math.inf, False
    with (
        open(log_path, "w") as log,
        subprocess.Popen(
            command,
            cwd=case,
            env=_environment(case),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process,
        tqdm(desc="Stokes", unit="it", disable=not progress, leave=False) as bar,
    ):
        for line in process.stdout:
            log.write(line)
            if line.startswith("Time = "):
                iterations = int(float(line.split()[2]))
                bar.update(iterations - bar.n)
                first_of_iteration = True
            elif "Solving for p, Initial residual" in line and first_of_iteration:
                first_of_iteration = False
                residual = float(line.split("=")[1].split(",")[0])
                least = min(least, residual)
                bar.set_postfix_str(f"p residual {residual:.2e}", refresh=False)
                if iterations > DIVERGENCE_AFTER and residual > DIVERGENCE_RISE * least:
                    # Diverging slowly: the iterations would otherwise run to max_iterations.
                    process.kill()
                    process.wait()
                    raise ReferenceConvergenceError(
                        f"Stokes solve diverging: the pressure's residual rose from {least:.1e} to "
                        f"{residual:.1e} by iteration {iterations}; lower the relaxation (now "
                        f"{settings.relaxation:g}; 0.7 steadied the steepest walls tried)"
                    )
            elif "SIMPLE solution converged" in line:
                converged = True
    if process.returncode != 0:
        tail = [line for line in log_path.read_text().splitlines() if not line.startswith("#")][-15:]
        if iterations > 1:
            # It stopped mid-way: the iterations diverged (OpenFOAM traps the overflow as a floating-point error).
            raise ReferenceConvergenceError(
                f"Stokes solve diverged after {iterations} iterations ({' '.join(command)} stopped): lower the "
                f"relaxation (--relaxation, now {settings.relaxation:g}; 0.7 steadied the steepest walls tried), or keep "
                "the case (case_dir) and read its log.simpleFoam"
            )
        raise RuntimeError(f"{' '.join(command)} failed in {case}:\n" + "\n".join(tail))
    if settings.processes > 1:
        _run(["reconstructPar", "-latestTime"], case)
    return iterations, converged


def _read_field(path: Path, components: int) -> np.ndarray:
    """The internal field of an ASCII OpenFOAM field file: float64 (cells,) or (cells, components)."""
    text = path.read_text()
    body = text[text.index("internalField") :]
    count_match = re.search(r"nonuniform\s+List<\w+>\s*(\d+)\s*\(", body)
    if count_match is None:
        raise RuntimeError(f"{path}: expected a nonuniform internalField")
    count = int(count_match.group(1))
    # The values come first after the count; vectors are parenthesised.
    tokens = body[count_match.end() :].replace("(", " ").replace(")", " ").split(maxsplit=count * components)
    numbers = np.array(tokens[: count * components], dtype=float)
    return numbers.reshape(count, components) if components > 1 else numbers


def _patch_flow(case: Path, name: str) -> float:
    """The last value the ``name`` function object wrote: the sum of phi over its patch."""
    files = sorted((case / "postProcessing" / name).glob("*/surfaceFieldValue.dat"))
    rows = [line.split() for line in files[-1].read_text().splitlines() if line and not line.startswith("#")]
    return float(rows[-1][1])


def _measure(case: Path, box: np.ndarray, settings: StokesSettings, iterations: int) -> dict[str, Any]:
    """The dataset's fields of the solution in ``case``'s last time folder; ``box`` is the meshed fluid."""
    last = max((p for p in case.iterdir() if re.fullmatch(r"\d+", p.name)), key=lambda p: int(p.name))
    r, n = settings.cells_per_voxel, settings.reservoir
    fluid = box[:, n : box.shape[1] - n]
    active = active_cells(fluid)
    height, width, depth = fluid.shape
    cells = _split(box, r)
    labels = _cell_labels(cells)
    velocity = _read_field(last / "U", 3)
    pressure = _read_field(last / "p", 1)
    if len(velocity) != labels.size or len(pressure) != labels.size:
        raise RuntimeError(f"{case}: the solution has {len(pressure)} cells, the fluid {labels.size}")
    shape = (r * height, r * box.shape[1], r * depth)  # (y, x, z) cells

    def on_box(values: np.ndarray) -> np.ndarray:
        full = np.zeros(shape[2] * shape[0] * shape[1])
        full[labels] = values
        return full.reshape(shape[2], shape[0], shape[1]).transpose(1, 2, 0)

    def by_column(cells: np.ndarray) -> np.ndarray:
        """(rH, rW', rD) cells of the box -> (H, W, r·r·rD), the cells of each voxel column of the map."""
        return _voxel_columns(cells[:, r * n : r * (n + width)], r)

    ux, uy = on_box(velocity[:, 0]), on_box(velocity[:, 1])
    fine_fluid = by_column(cells)
    gap: GapPressure = gap_pressure(
        by_column(on_box(pressure)), by_column(np.hypot(ux, uy)), fine_fluid, active
    )
    q_in, q_out = -_patch_flow(case, "inletFlow"), _patch_flow(case, "outletFlow")
    return {
        "pressure": gap.pressure,
        "pressure_kinematic": gap.raw,
        # Σ u_x dy dz over a voxel column's cells, per voxel of width: cells of side 1/r, r columns across.
        "flux": by_column(ux).sum(axis=2) / r**3,
        "active": active,
        "flow_rate": q_out,
        "conductance": q_out * VISCOSITY / (gap.inlet - gap.outlet),
        "flux_imbalance": abs(q_in - q_out) / abs(q_out) if q_out else math.inf,
        "iterations": iterations,
        "cells": labels.size,
    }


def _voxel_columns(cells: np.ndarray, r: int) -> np.ndarray:
    """(rH, rW, N) values of the cells of a map meshed r x r columns per voxel -> (H, W, r·r·N), the cells of each
    voxel column."""
    height, width = (n // r for n in cells.shape[:2])
    blocks = cells.reshape(height, r, width, r, cells.shape[2]).transpose(0, 2, 1, 3, 4)
    return blocks.reshape(height, width, -1)


def _measure_walls(case: Path, mesh: WallMesh, r: int, iterations: int) -> dict[str, Any]:
    """The dataset's fields of the solution on the wall-fitted ``mesh`` (``r`` x ``r`` columns per voxel) in
    ``case``'s last time folder, each voxel column's over its r x r columns' gap cells."""
    last = max((p for p in case.iterdir() if re.fullmatch(r"\d+", p.name)), key=lambda p: int(p.name))
    velocity, pressure = _read_field(last / "U", 3), _read_field(last / "p", 1)
    cells = int(mesh.cells.sum())
    if len(velocity) != cells or len(pressure) != cells:
        raise RuntimeError(f"{case}: the solution has {len(pressure)} cells, the mesh {cells}")
    below, gap, _ = mesh.layers
    labels = mesh.cell_labels()[:, mesh.reservoir : mesh.cells.shape[1] - mesh.reservoir, below : below + gap]
    fluid = labels >= 0
    on_cells = lambda values: np.where(fluid, values[np.maximum(labels, 0)], 0.0)  # noqa: E731
    ux = on_cells(velocity[:, 0])
    # Cells are weighed by their in-plane flux: speed times height, which differs between a voxel's columns.
    cell_height = np.broadcast_to((mesh.map_thickness() / gap)[..., None], fluid.shape)
    speed = np.hypot(ux, on_cells(velocity[:, 1])) * cell_height
    column_fluid = _voxel_columns(fluid, r)
    active = flowing_cells(column_fluid.any(axis=2))
    result = gap_pressure(
        _voxel_columns(on_cells(pressure), r), _voxel_columns(speed, r), column_fluid, active
    )
    q_in, q_out = -_patch_flow(case, "inletFlow"), _patch_flow(case, "outletFlow")
    return {
        "pressure": result.pressure,
        "pressure_kinematic": result.raw,
        # Σ u_x dz over a voxel column's cells, per voxel of width: r columns across, r along, each 1/r wide.
        "flux": _voxel_columns(ux * cell_height, r).sum(axis=2) / r**2,
        "active": active,
        "flow_rate": q_out,
        "conductance": q_out * VISCOSITY / (result.inlet - result.outlet),
        "flux_imbalance": abs(q_in - q_out) / abs(q_out) if q_out else math.inf,
        "iterations": iterations,
        "cells": cells,
    }


def write_poly_mesh(mesh: WallMesh, case: Path) -> None:
    """Write ``mesh`` as ``case/constant/polyMesh``, in ASCII."""
    folder = case / "constant" / "polyMesh"
    folder.mkdir(parents=True, exist_ok=True)
    note = (
        f'    note "nPoints:{len(mesh.points)} nCells:{int(mesh.cells.sum())} nFaces:{len(mesh.faces)} '
        f'nInternalFaces:{len(mesh.neighbour)}";\n'
    )
    lists = {
        "points": ("vectorField", mesh.points, "(%.12g %.12g %.12g)"),
        "faces": ("faceList", mesh.faces, "4(%d %d %d %d)"),
        "owner": ("labelList", mesh.owner, "%d"),
        "neighbour": ("labelList", mesh.neighbour, "%d"),
    }
    for name, (cls, rows, fmt) in lists.items():
        _write_list(folder / name, cls, rows, fmt, note if cls == "labelList" else "")
    types = {"inlet": "patch", "outlet": "patch", "walls": "wall"}
    entries = "".join(
        f"    {name}\n    {{\n        type {types.get(name, 'symmetryPlane')};\n"
        f"        nFaces {count};\n        startFace {start};\n    }}\n"
        for name, (start, count) in mesh.patches.items()
    )
    (folder / "boundary").write_text(
        foam_header("polyBoundaryMesh", "boundary") + f"{len(mesh.patches)}\n(\n{entries})\n"
    )


def stokes_fracture(
    fracture: Fracture,
    settings: StokesSettings | None = None,
    voxel_size: float | None = None,
    case_dir: str | os.PathLike | None = None,
    progress: bool = True,
    mesh: str = "voxels",
) -> Fracture:
    """``fracture`` with its pressure and flow rate replaced by the Stokes solve's, in the dataset's convention; the
    provenance records the solve. ``mesh``: "voxels" solves its voxels (:func:`solve` on
    :func:`~flowlearn.reference.voxels.fracture_voxels`), "walls" its smooth walls (:func:`solve_walls`; the fracture
    must store them). ``voxel_size`` overrides the fracture's own (metres per voxel)."""
    settings = settings or StokesSettings()
    size = fracture.voxel_size if voxel_size is None else voxel_size
    if mesh == "walls":
        bottom, top = fracture_walls(fracture, voxel_size)
        window = fracture_window(fracture, bottom, top)
        result = solve_walls(bottom, top, settings, case_dir=case_dir, progress=progress, window=window)
    else:
        result = solve(fracture_voxels(fracture, voxel_size), settings, case_dir=case_dir, progress=progress)
    return replace(
        fracture,
        **result.fracture_fields(size),
        provenance={"source": fracture.provenance, **result.provenance(settings)},
    )


def fracture_walls(fracture: Fracture, voxel_size: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The walls of a dataset's fracture in voxels (float64 (H, W) each), for :func:`solve_walls`.

    Raises:
        DataValidationError: naming the fracture, where it stores no walls (or its voxel size is unknown).
    """
    size = voxel_size_of(fracture, voxel_size)
    if fracture.bottom is None or fracture.top is None:
        raise DataValidationError(
            f"fracture {fracture.name!r}: stores no walls (bottom, top), and the wall-fitted mesh follows them; "
            "solve its voxels instead (--mesh voxels)"
        )
    return np.asarray(fracture.bottom, np.float64) / size, np.asarray(fracture.top, np.float64) / size


# How far (voxels) a fracture's stored walls may lie from the walls its provenance makes again: float32 storage of
# heights up to a few hundred voxels rounds them by about 1e-5.
WALLS_TOLERANCE = 1e-3


def fracture_window(fracture: Fracture, bottom: np.ndarray, top: np.ndarray) -> Window | None:
    """Where ``fracture``'s walls (``bottom``, ``top``: float64 (H, W), voxels, as :func:`fracture_walls` gives them)
    are a window of larger walls, as the ``rock`` recipe draws them: those walls, made again from the settings and
    seed its provenance records (``roughness``); None where its walls are periodic or planes.

    Raises:
        DataValidationError: naming the fracture and its first cell, where the stored walls are not the window the
            provenance makes (the walls were edited, or another version of the generator drew them).
    """
    settings = fracture.provenance.get("roughness") if isinstance(fracture.provenance, dict) else None
    if (
        not isinstance(settings, dict)
        or settings.get("extent", 1) == 1
        or settings.get("kind") not in WINDOWED
    ):
        return None
    made = closed_fracture(ClosureParams(**{**settings, "shape": tuple(settings["shape"])}))
    for name, stored, again in (("bottom", bottom, made.bottom), ("top", top, made.top)):
        off = (
            np.abs(stored - again) > WALLS_TOLERANCE if stored.shape == again.shape else np.ones((1, 1), bool)
        )
        if off.any():
            row, column = np.argwhere(off)[0]
            raise DataValidationError(
                f"fracture {fracture.name!r}: its {name} wall is not the window of larger walls that its provenance "
                f"(roughness) makes, first at row {row}, column {column} (by more than {WALLS_TOLERANCE:g} voxels); "
                "the wall-fitted mesh of a window needs the larger walls, so the walls must be the generator's"
            )
    return Window(made.larger, made.origin)
