"""Lattice-Boltzmann reference pressure for a voxelised fracture, computed with lbmpy.

The fracture gap is voxelised into a 3D box of cubic voxels (array order (H, W, D): rows y, columns x, depth z).
Pressure-driven flow runs along x: open reservoirs (the full depth of the box) sit before column 0 and after
column W-1, with fixed densities (anti-bounce-back pressure boundaries) at their far ends. The box's two y faces
are planes of symmetry (no flow across them and no friction along them), as the no-flow rows of the Darcy model
are: the box is simulated with its mirror image in y beside it, periodic in y. (A no-slip side wall would slow a
gap of aperture b over a width of about b on each side, 15% in a channel 32 voxels wide and 8 open; lbmpy's
free-slip boundary loses mass where a rough wall meets it.) No-slip holds everywhere else (the fracture's
walls). The method is D3Q19 TRT
with the "magic" parameter 3/16, for which halfway bounce-back puts a straight wall exactly half-way between
fluid and solid voxel centres whatever the viscosity; apertures of a few voxels then give the right flux.

The run stops at steady state, judged on the quantity a fracture is measured by: every ``check_interval`` steps
the relative change of the flow rate Q through the outlet face, |Q(t) - Q(t - check_interval)| / |Q(t)|, is
compared with ``tolerance``. The driver returns

* the 2D pressure averaged over the gap, weighted by the local in-plane flux (speed) of each voxel,
  p(x, y) = Σ_z |u| p / Σ_z |u|, the pressure the flow carries (a column's stagnant pockets do not count), and
  normalised so that the inlet column averages 2 and the outlet column 1;
* the flow rate Q and the conductance Q μ / (p_inlet - p_outlet) between those two faces, which a Darcy model
  of the 2D map reproduces when its transmissivity is right.

lbmpy is an optional dependency (``pip install flowlearn[lbm]``); importing this module does not need it, running
a simulation does. A CUDA GPU is used when ``cupy`` is installed and sees a device.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from flowlearn.checks import available_memory, check_cores, check_setting, is_integer, is_number
from flowlearn.errors import ProblemError, ReferenceConvergenceError, UnavailableError
from flowlearn.reference.voxels import ReferenceFlow, active_cells, add_reservoirs, check_fluid, gap_pressure

CS2 = 1.0 / 3.0  # squared lattice speed of sound: p = cs² ρ in lattice units
# The largest density drop a run may be driven by. The LBM is a weakly compressible fluid, a model of Stokes flow
# only while the density stays close to its mean of 1: at most 0.1 keeps it within ±5%. Below that the flow rate is
# linear in the drop (Q/Δρ of a 4-voxel channel 16 long moved by 2e-5 between 1e-3 and 0.1, 0.2% by 1.0); at 1.5
# and 1.9 the same channel went unstable (a NaN flow rate) and ran to max_steps before failing.
MAX_DENSITY_DROP = 0.1


@dataclass(frozen=True)
class LBMSettings:
    """Numerical settings of a run, all in lattice units.

    Attributes:
        omega: relaxation rate of the symmetric (viscous) moments; kinematic viscosity ν = (1/ω - 1/2)/3.
        magic: TRT magic parameter Λ; 3/16 makes halfway bounce-back walls exact for Poiseuille flow.
        density_drop: inlet minus outlet density around a mean of 1, in (0, :data:`MAX_DENSITY_DROP`]. Small, to
            stay in the Stokes regime with weak compressibility.
        tolerance: steady state when the relative change of the outlet flow rate over ``check_interval`` steps is
            below.
        check_interval: steps between convergence checks.
        max_steps: the run fails with :class:`ReferenceConvergenceError` when not steady after this many steps.
        target: "cpu", "gpu" or "auto" (GPU when cupy sees a CUDA device).
        threads: OpenMP threads on the CPU, at most the cores of the process that runs the simulation (checked
            there, not here: a SLURM job's settings are made on another machine); None uses every core.
        reservoir: columns of open fluid (the full depth of the box) added before the inlet and after the
            outlet face. The anti-bounce-back pressure condition disturbs the pressure in the first few
            columns next to it; the reservoirs keep that disturbance out of the fracture.
    """

    omega: float = 1.0
    magic: float = 3.0 / 16.0
    density_drop: float = 1e-3
    tolerance: float = 1e-6
    check_interval: int = 100
    max_steps: int = 200_000
    target: str = "auto"
    threads: int | None = None
    reservoir: int = 4

    def __post_init__(self) -> None:
        # Checked here, before any simulation: a bad value would otherwise surface only after max_steps steps.
        check_setting(is_number(self.omega) and 0 < self.omega < 2, "omega", "must be in (0, 2)", self.omega)
        check_setting(is_number(self.magic) and self.magic > 0, "magic", "must be > 0", self.magic)
        check_setting(
            is_number(self.density_drop) and 0 < self.density_drop <= MAX_DENSITY_DROP,
            "density_drop",
            f"must be in (0, {MAX_DENSITY_DROP:g}]",
            self.density_drop,
        )
        check_setting(
            is_number(self.tolerance) and self.tolerance > 0, "tolerance", "must be > 0", self.tolerance
        )
        check_setting(
            is_integer(self.check_interval) and self.check_interval >= 1,
            "check_interval",
            "must be an integer >= 1",
            self.check_interval,
        )
        check_setting(
            is_integer(self.max_steps) and self.max_steps >= self.check_interval,
            "max_steps",
            f"must be an integer >= check_interval ({self.check_interval})",
            self.max_steps,
        )
        check_setting(
            self.target in ("auto", "cpu", "gpu"), "target", "must be auto, cpu or gpu", self.target
        )
        check_setting(
            self.threads is None or (is_integer(self.threads) and self.threads >= 1),
            "threads",
            "must be an integer >= 1 (or unset: every core)",
            self.threads,
        )
        check_setting(
            is_integer(self.reservoir) and self.reservoir >= 0,
            "reservoir",
            "must be an integer >= 0",
            self.reservoir,
        )

    @property
    def viscosity(self) -> float:
        return (1.0 / self.omega - 0.5) / 3.0

    @property
    def omega_odd(self) -> float:
        # Λ = (1/ω⁺ - 1/2)(1/ω⁻ - 1/2)
        return 1.0 / (self.magic / (1.0 / self.omega - 0.5) + 0.5)


@dataclass(frozen=True)
class LBMResult(ReferenceFlow):
    """Outcome of one run: the :class:`~flowlearn.reference.voxels.ReferenceFlow` fields in lattice units, and

    Attributes:
        flux: Σ_z u_x over fluid voxels. For a parabolic profile this sum exceeds the integral by the midpoint-rule
            error, a factor 1 + 1/(2b²) for an aperture of b voxels.
        flow_rate: Σ u_x over the outlet column's fluid voxels (voxels³ per step).
        flux_imbalance: (max - min) / mean over the columns of their flux Σ u_x.
        pressure_lattice: float64 (H, W), flux-weighted gap-averaged pressure cs²ρ in lattice units (NaN where
            inactive); the conductance takes μ = ν (unit density).
        velocity: float64 (H, W, D), x-velocity in every voxel (0 in solid), lattice units.
        steps: time steps run; converged: whether the criterion was met; residual: the last relative change of Q.
        seconds: wall time of the time loop; mlups: million lattice-cell updates per second (all cells of the box).
        device: "cpu" or "gpu".
    """

    pressure_lattice: np.ndarray
    velocity: np.ndarray
    steps: int
    converged: bool
    residual: float
    seconds: float
    mlups: float
    device: str

    def provenance(self, settings: LBMSettings) -> dict[str, Any]:
        """JSON-ready record of the method, settings, convergence and library versions."""
        return {
            "lbm": {
                "library": "lbmpy",
                "method": "D3Q19 TRT, halfway bounce-back walls, anti-bounce-back fixed-density inlet/outlet",
                "settings": asdict(settings),
                "viscosity": settings.viscosity,
                "omega_odd": settings.omega_odd,
                "pressure_average": "over the gap, weighted by each voxel's in-plane speed |u|",
                "convergence": {
                    "criterion": "|Q(t) - Q(t - check_interval)| / |Q(t)| < tolerance, Q the outlet flow rate",
                    "converged": self.converged,
                    "steps": self.steps,
                    "residual": self.residual,
                    "flux_imbalance": self.flux_imbalance,
                },
                "flow_rate": self.flow_rate,
                "conductance": self.conductance,
                "seconds": self.seconds,
                "mlups": self.mlups,
                "device": self.device,
                "versions": library_versions(),
            }
        }


def library_versions() -> dict[str, str]:
    """Versions of the packages that shape the LBM result."""
    versions = {"python": platform.python_version()}
    for pkg in ("lbmpy", "pystencils", "numpy", "scipy", "sympy", "flowlearn"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return versions


# pystencils compiles the LBM's CPU kernels with the first of these on PATH.
CXX_COMPILERS = ("g++", "clang++")


def pick_target(target: str) -> str:
    """Where the LBM runs: "cpu" or "gpu" as asked, and for "auto" the GPU when cupy sees a CUDA device.

    Raises:
        UnavailableError: "gpu" where cupy sees no CUDA device (or is not installed); "cpu" without a C++
            compiler.
    """
    if target not in ("auto", "cpu", "gpu"):
        raise ValueError(f"target must be 'cpu', 'gpu' or 'auto', got {target!r}")
    devices, reason = (0, "") if target == "cpu" else _cuda_devices()
    if target == "gpu" and not devices:
        raise UnavailableError(
            f"the LBM's target gpu needs cupy and a CUDA device, and {reason}: install the cupy of your CUDA "
            "(e.g. pip install cupy-cuda12x), or run on the CPU (target cpu, or auto)"
        )
    if devices:
        return "gpu"
    if not any(shutil.which(compiler) for compiler in CXX_COMPILERS):
        raise UnavailableError(
            "the LBM on the CPU compiles its kernels with a C++ compiler, and neither g++ nor clang++ is on PATH: "
            "install one (e.g. apt-get install g++), or run on a CUDA GPU with cupy (target gpu)"
        )
    return "cpu"


def _cuda_devices() -> tuple[int, str]:
    """The CUDA devices cupy sees, and if none, why."""
    try:
        import cupy
    except ImportError:
        return 0, "cupy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, or a broken one: cupy's own exception types
        return 0, f"cupy finds no CUDA driver ({error})"
    return count, "cupy sees no CUDA device"


# Bytes per cell of a box: lbmpy's two D3Q19 population fields (source and destination), density and velocity, all
# float64.
BYTES_PER_CELL = (2 * 19 + 1 + 3) * 8


def least_box_bytes(shape: tuple[int, int], depth: float, reservoir: int) -> int:
    """The least memory of a run on an (H, W) map whose gap spans at least ``depth`` voxels: its box of
    2H x (W + 2 reservoir) x (the depth rounded up to DEPTH_QUANTUM) cells, the map and its mirror image in y
    (see :func:`simulate`)."""
    height, width = shape
    depth = DEPTH_QUANTUM * max(1, math.ceil(depth / DEPTH_QUANTUM))
    return 2 * height * (width + 2 * reservoir) * depth * BYTES_PER_CELL


def largest_reservoir(shape: tuple[int, int], depth: float, memory: int) -> int:
    """The most reservoir columns at each end for which the box of a map of ``shape`` (H, W) and ``depth`` voxels
    fits in ``memory`` bytes (:func:`least_box_bytes`; negative where even none do)."""
    return (memory // least_box_bytes((shape[0], 1), depth, 0) - shape[1]) // 2


def check_box_memory(shape: tuple[int, int, int], reservoir: int) -> None:
    """Raise :class:`ProblemError` where the run of a fluid box of ``shape`` (H, W, D) voxels with
    ``reservoir`` columns at each end would need more memory than this process has available
    (:func:`least_box_bytes`), naming each size, and the largest reservoir that fits where a smaller one would
    do."""
    height, width, depth = shape
    needed, memory = least_box_bytes((height, width), depth, reservoir), available_memory()
    if needed <= memory:
        return
    advice = "solve a smaller map or a thinner gap"
    if least_box_bytes((height, width), depth, 0) <= memory:
        advice = f"use a reservoir of at most {largest_reservoir((height, width), depth, memory)} columns"
    raise ProblemError(
        f"the LBM box of this {height}x{width}x{depth}-voxel map with reservoirs of {reservoir} columns at each "
        f"end needs {needed / 2**30:.3g} GiB, more than the {memory / 2**30:.3g} GiB available: {advice}"
    )


# Depths of the box are rounded up to a multiple of this (with solid), so that fractures of one dataset share a few
# box shapes, and so the compiled time step (see _step_for).
DEPTH_QUANTUM = 8

# The last few lbmpy time steps built in this process, by box shape and settings: building one (symbolic
# derivation and C compilation) takes 30-60 s, far longer than a small fracture's run, and a new geometry only
# changes its flags.
_STEPS: dict[tuple, Any] = {}
_KEPT_STEPS = 4


def _step_for(shape: tuple[int, int, int], settings: LBMSettings, device: str):
    """The lbmpy time step of a box of ``shape`` (H, W, D) cells, periodic in y, built once per process."""
    from flowlearn.threads import usable_cores  # numba: only where a run starts

    threads = settings.threads or usable_cores()
    key = (shape, settings.omega, settings.magic, settings.density_drop, threads, device)
    if key in _STEPS:
        _STEPS[key] = _STEPS.pop(key)  # most recently used last
        return _STEPS[key]
    from lbmpy import LBMConfig, LBStencil, Method, Stencil
    from lbmpy.lbstep import LatticeBoltzmannStep
    from pystencils import CreateKernelConfig, Target

    height, width, depth = shape
    config = CreateKernelConfig(target=Target.GPU if device == "gpu" else Target.CPU)
    if device == "cpu":
        config.cpu.openmp.enable = True
        config.cpu.openmp.num_threads = threads
    lbm_config = LBMConfig(
        stencil=LBStencil(Stencil.D3Q19),
        method=Method.TRT,
        relaxation_rates=[settings.omega, settings.omega_odd],
        # The incompressible (He-Luo) equilibrium keeps the steady velocity divergence-free despite the
        # density drop that drives the flow.
        compressible=False,
    )
    # lbmpy orders axes (x, y, z); flowlearn arrays are (y, x, z).
    step = LatticeBoltzmannStep(
        domain_size=(width, height, depth),
        lbm_config=lbm_config,
        config=config,
        periodicity=(False, True, False),
    )
    while len(_STEPS) >= _KEPT_STEPS:
        _STEPS.pop(next(iter(_STEPS)))
    _STEPS[key] = step
    return step


def _load(step, fluid: np.ndarray, settings: LBMSettings) -> None:
    """Set the walls and reservoirs of ``fluid`` (bool (H, W, D), the step's shape) and start from rest."""
    from lbmpy.boundaries import FixedDensity, NoSlip

    height, width, depth = fluid.shape
    solid = ~fluid.transpose(1, 0, 2)

    def wall_cells(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        ix, iy, iz = (np.floor(c).astype(int) for c in (x, y, z))
        outside = (iz < 0) | (iz >= depth)
        walls = outside.copy()
        # The inlet and outlet ghost layers continue the solid of the first and last column, so the reservoirs
        # touch the fracture only through its open face, never diagonally past a wall; y wraps around.
        ix, iy = np.clip(ix, 0, width - 1), iy % height
        walls[~outside] = solid[ix[~outside], iy[~outside], iz[~outside]]
        return walls

    def reservoir(x: np.ndarray, y: np.ndarray, z: np.ndarray, inlet: bool) -> np.ndarray:
        return ((x < 0) if inlet else (x > width)) & ~wall_cells(x, y, z)

    bh = step.boundary_handling
    bh.set_boundary("domain")  # forget the previous geometry
    bh.set_boundary(NoSlip(), mask_callback=wall_cells)
    for rho, inlet in ((1.0 + 0.5 * settings.density_drop, True), (1.0 - 0.5 * settings.density_drop, False)):
        bh.set_boundary(
            FixedDensity(rho), mask_callback=lambda x, y, z, inlet=inlet: reservoir(x, y, z, inlet)
        )
    handling = step.data_handling
    handling.fill(step.density_data_name, 1.0, ghost_layers=True, inner_ghost_layers=True)
    handling.fill(step.velocity_data_name, 0.0, ghost_layers=True, inner_ghost_layers=True)
    step.set_pdf_fields_from_macroscopic_values()
    step.time_steps_run = 0


def simulate(fluid: np.ndarray, settings: LBMSettings | None = None, progress: bool = True) -> LBMResult:
    """Run pressure-driven flow through the fluid voxels ``fluid`` (bool (H, W, D)) to steady state.

    Raises :class:`ReferenceConvergenceError` if the steady-state criterion is not met within ``settings.max_steps``,
    :class:`ProblemError` if no fluid path joins the inlet (column 0) to the outlet (column W-1) or the box
    does not fit in memory (:func:`check_box_memory`), :class:`SettingError` for more ``settings.threads`` than
    the cores this process may use, and :class:`UnavailableError` for target "gpu" without a CUDA device.
    """
    settings = settings or LBMSettings()
    check_fluid(fluid)
    # The cores of the machine that runs it, not of the one that made the settings (a SLURM job's login node):
    # 100,000 OpenMP threads segfaulted.
    check_cores("threads", settings.threads)
    check_box_memory(fluid.shape, settings.reservoir)
    active = active_cells(fluid)
    device = pick_target(settings.target)
    n = settings.reservoir
    height = fluid.shape[0]
    extra_depth = -fluid.shape[2] % DEPTH_QUANTUM
    # Solid below the depth of the map, so that boxes share a few depths; the reservoirs stay open to it.
    padded = np.pad(add_reservoirs(fluid, n), ((0, 0), (0, 0), (0, extra_depth)), constant_values=False)
    # The mirror image in y, periodic: both y faces become planes of symmetry. Rows [0, H) are the fracture.
    mirrored = np.concatenate([padded, padded[::-1]], axis=0)
    step = _step_for(mirrored.shape, settings, device)
    _load(step, mirrored, settings)
    fluid_xyz = padded.transpose(1, 0, 2)
    rows = slice(0, height)

    cells = mirrored.size
    # The first step compiles the kernels (once per process and box); it stays out of the timing so that MLUPS
    # measures the time loop.
    step.run(1)
    outlet = n + fluid.shape[1] - 1
    outlet_fluid = fluid_xyz[outlet]
    previous = None
    residual = math.inf
    converged = False
    seconds = 0.0
    with tqdm(total=settings.max_steps, desc="LBM", unit="step", disable=not progress, leave=False) as bar:
        while step.time_steps_run < settings.max_steps:
            start = time.perf_counter()
            step.run(settings.check_interval)
            seconds += time.perf_counter() - start
            flow_rate = float(np.ma.getdata(step.velocity[outlet, :, :, 0])[rows][outlet_fluid].sum())
            if previous is not None:
                change = abs(flow_rate - previous)
                residual = change / abs(flow_rate) if flow_rate != 0 else math.inf
                bar.set_postfix(change=f"{residual:.2e}")
                converged = residual < settings.tolerance
            previous = flow_rate
            bar.update(settings.check_interval)
            if converged:
                break
    steps = int(step.time_steps_run)
    timed_steps = steps - 1
    if not converged:
        raise ReferenceConvergenceError(
            f"LBM not steady after {steps} steps: relative change of the flow rate {residual:.3e} over "
            f"{settings.check_interval} steps, tolerance {settings.tolerance:.1e}"
        )

    width = fluid.shape[1]
    inside = slice(n, n + width)
    fluid_inside = fluid_xyz[inside]
    rho = np.where(fluid_inside, np.ma.getdata(step.density[:, :, :])[inside, rows], 0.0)
    velocity = np.where(fluid_inside[..., None], np.ma.getdata(step.velocity[:, :, :, :])[inside, rows], 0.0)
    ux = velocity[..., 0]
    # lbmpy's axes are (x, y, z): the in-plane speed is that of (u_x, u_y).
    speed = np.hypot(ux, velocity[..., 1])
    gap = gap_pressure(
        CS2 * rho.transpose(1, 0, 2), speed.transpose(1, 0, 2), fluid_inside.transpose(1, 0, 2), active
    )
    flux = ux.sum(axis=2).T
    column_flux = flux.sum(axis=0)
    flow_rate = float(column_flux[-1])
    return LBMResult(
        pressure=gap.pressure,
        pressure_lattice=gap.raw,
        flux=flux,
        velocity=ux.transpose(1, 0, 2)[..., : fluid.shape[2]],
        aperture=fluid.sum(axis=2).astype(np.int64),
        active=active,
        flow_rate=flow_rate,
        conductance=flow_rate * settings.viscosity / (gap.inlet - gap.outlet),
        flux_imbalance=float(np.ptp(column_flux) / column_flux.mean()),
        steps=steps,
        converged=converged,
        residual=residual,
        seconds=seconds,
        mlups=cells * timed_steps / seconds / 1e6,
        device=device,
    )
