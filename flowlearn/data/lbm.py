"""Lattice-Boltzmann reference pressure for a voxelised fracture, computed with lbmpy.

The fracture gap is voxelised into a 3D box of cubic voxels (array order (H, W, D): rows y, columns x, depth z).
Pressure-driven flow runs along x: open reservoirs (the full depth of the box) sit before column 0 and after
column W-1, with fixed densities (anti-bounce-back pressure boundaries) at their far ends; no-slip holds
everywhere else (the solid walls of the fracture and the box's y and z faces, so the faces parallel to the flow
carry no flow, as in the Darcy model). The method is D3Q19 TRT
with the "magic" parameter 3/16, for which halfway bounce-back puts a straight wall exactly half-way between
fluid and solid voxel centres whatever the viscosity; apertures of a few voxels then give the right flux.

The run stops at steady state: every ``check_interval`` steps the relative change of the velocity field,
||u(t) - u(t - check_interval)|| / ||u(t)||, is compared with ``tolerance``. The driver returns the aperture-
averaged 2D pressure, normalised so that the inlet column averages 2 and the outlet column 1.

lbmpy is an optional dependency (``pip install flowlearn[lbm]``); importing this module does not need it, running
a simulation does. A CUDA GPU is used when ``cupy`` is installed and sees a device.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import ndimage
from tqdm.auto import tqdm

from flowlearn.checks import check_setting, is_integer, is_number
from flowlearn.errors import LBMConvergenceError

CS2 = 1.0 / 3.0  # squared lattice speed of sound: p = cs² ρ in lattice units


@dataclass(frozen=True)
class LBMSettings:
    """Numerical settings of a run, all in lattice units.

    Attributes:
        omega: relaxation rate of the symmetric (viscous) moments; kinematic viscosity ν = (1/ω - 1/2)/3.
        magic: TRT magic parameter Λ; 3/16 makes halfway bounce-back walls exact for Poiseuille flow.
        density_drop: inlet minus outlet density around a mean of 1. Small, to stay in the Stokes regime with
            weak compressibility.
        tolerance: steady state when the relative change of the velocity over ``check_interval`` steps is below.
        check_interval: steps between convergence checks.
        max_steps: the run fails with :class:`LBMConvergenceError` when not steady after this many steps.
        target: "cpu", "gpu" or "auto" (GPU when cupy sees a CUDA device).
        threads: OpenMP threads on the CPU; None uses every core.
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
            is_number(self.density_drop) and 0 < self.density_drop < 2,
            "density_drop",
            "must be in (0, 2)",
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
class LBMResult:
    """Outcome of one run.

    Attributes:
        pressure: float64 (H, W), aperture-averaged pressure normalised to inlet 2 and outlet 1 (dimensionless);
            inactive cells hold the uniform-permeability profile 2 - c/(W-1) as a placeholder.
        pressure_lattice: float64 (H, W), aperture-averaged pressure cs²ρ in lattice units (NaN where inactive).
        flux: float64 (H, W), depth-integrated flux along x per unit width, Σ_z u_x over fluid voxels, lattice
            units. For a parabolic profile this sum exceeds the integral by the midpoint-rule error, a factor
            1 + 1/(2b²) for an aperture of b voxels.
        velocity: float64 (H, W, D), x-velocity in every voxel (0 in solid), lattice units.
        aperture: int64 (H, W), fluid voxels per column (the voxelised aperture).
        active: bool (H, W), cells with fluid that connect (4-neighbour, as in the Darcy grid) to inlet or outlet.
        steps: time steps run; converged: whether the criterion was met; residual: the last relative change.
        seconds: wall time of the time loop; mlups: million lattice-cell updates per second (all cells of the box).
        device: "cpu" or "gpu".
    """

    pressure: np.ndarray
    pressure_lattice: np.ndarray
    flux: np.ndarray
    velocity: np.ndarray
    aperture: np.ndarray
    active: np.ndarray
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
                "convergence": {
                    "criterion": "||u(t) - u(t - check_interval)|| / ||u(t)|| < tolerance",
                    "converged": self.converged,
                    "steps": self.steps,
                    "residual": self.residual,
                },
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


def voxelize(bottom: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Fluid voxels between two walls: bool (H, W, D), True where bottom <= z-centre < top.

    ``bottom`` and ``top`` are float (H, W) wall heights in voxels; D spans the lowest bottom to the highest top.
    """
    if bottom.shape != top.shape or bottom.ndim != 2:
        raise ValueError(f"bottom and top must be equal 2D shapes, got {bottom.shape} and {top.shape}")
    z0 = math.floor(float(bottom.min()))
    depth = max(math.ceil(float(top.max())) - z0, 1)
    centres = z0 + np.arange(depth) + 0.5
    return (bottom[..., None] <= centres) & (centres < top[..., None])


def voxelize_aperture(aperture: np.ndarray) -> np.ndarray:
    """Fluid voxels of a gap centred on a flat mid-plane: bool (H, W, D) for a float (H, W) aperture in voxels."""
    return voxelize(-0.5 * aperture, 0.5 * aperture)


def _connected_to_faces(fluid2d: np.ndarray) -> np.ndarray:
    """Cells of ``fluid2d`` (H, W) in a 4-connected component that touches column 0 or column W-1."""
    labels, _ = ndimage.label(fluid2d)
    keep = np.union1d(labels[:, 0], labels[:, -1])
    return np.isin(labels, keep[keep > 0])


def _pick_target(target: str) -> str:
    if target in ("cpu", "gpu"):
        return target
    if target != "auto":
        raise ValueError(f"target must be 'cpu', 'gpu' or 'auto', got {target!r}")
    try:
        import cupy

        return "gpu" if cupy.cuda.runtime.getDeviceCount() > 0 else "cpu"
    except Exception:
        # No cupy, no driver or no device: all mean the CPU.
        return "cpu"


def _build_step(fluid: np.ndarray, settings: LBMSettings, device: str):
    from lbmpy import LBMConfig, LBStencil, Method, Stencil
    from lbmpy.boundaries import FixedDensity, NoSlip
    from lbmpy.lbstep import LatticeBoltzmannStep
    from pystencils import CreateKernelConfig, Target

    height, width, depth = fluid.shape
    config = CreateKernelConfig(target=Target.GPU if device == "gpu" else Target.CPU)
    if device == "cpu":
        config.cpu.openmp.enable = True
        config.cpu.openmp.num_threads = settings.threads or os.cpu_count()
    lbm_config = LBMConfig(
        stencil=LBStencil(Stencil.D3Q19),
        method=Method.TRT,
        relaxation_rates=[settings.omega, settings.omega_odd],
        # The incompressible (He-Luo) equilibrium keeps the steady velocity divergence-free despite the
        # density drop that drives the flow.
        compressible=False,
    )
    # lbmpy orders axes (x, y, z); flowlearn arrays are (y, x, z).
    solid = ~fluid.transpose(1, 0, 2)
    step = LatticeBoltzmannStep(domain_size=(width, height, depth), lbm_config=lbm_config, config=config)

    def wall_cells(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        ix, iy, iz = (np.floor(c).astype(int) for c in (x, y, z))
        outside = (iy < 0) | (iy >= height) | (iz < 0) | (iz >= depth)
        walls = outside.copy()
        # The inlet and outlet ghost layers continue the solid of the first and last column, so the reservoirs
        # touch the fracture only through its open face, never diagonally past a wall.
        ix = np.clip(ix, 0, width - 1)
        walls[~outside] = solid[ix[~outside], iy[~outside], iz[~outside]]
        return walls

    def reservoir(x: np.ndarray, y: np.ndarray, z: np.ndarray, inlet: bool) -> np.ndarray:
        return ((x < 0) if inlet else (x > width)) & ~wall_cells(x, y, z)

    rho_in = 1.0 + 0.5 * settings.density_drop
    rho_out = 1.0 - 0.5 * settings.density_drop
    bh = step.boundary_handling
    bh.set_boundary(NoSlip(), mask_callback=wall_cells)
    bh.set_boundary(FixedDensity(rho_in), mask_callback=lambda x, y, z: reservoir(x, y, z, inlet=True))
    bh.set_boundary(FixedDensity(rho_out), mask_callback=lambda x, y, z: reservoir(x, y, z, inlet=False))
    return step


def simulate(fluid: np.ndarray, settings: LBMSettings | None = None, progress: bool = True) -> LBMResult:
    """Run pressure-driven flow through the fluid voxels ``fluid`` (bool (H, W, D)) to steady state.

    Raises :class:`LBMConvergenceError` if the steady-state criterion is not met within ``settings.max_steps``,
    and ``ValueError`` if no fluid path joins the inlet (column 0) to the outlet (column W-1).
    """
    settings = settings or LBMSettings()
    if fluid.ndim != 3 or fluid.dtype != bool:
        raise ValueError(f"fluid must be a bool (H, W, D) array, got {fluid.dtype} {fluid.shape}")
    aperture = fluid.sum(axis=2)
    active = _connected_to_faces(aperture > 0)
    labels, _ = ndimage.label(active)
    if not np.intersect1d(labels[:, 0], labels[:, -1]).any():
        raise ValueError("no fluid path joins the inlet column to the outlet column; nothing would flow")
    device = _pick_target(settings.target)
    n = settings.reservoir
    padded = np.pad(fluid, ((0, 0), (n, n), (0, 0)), constant_values=True)
    step = _build_step(padded, settings, device)
    fluid_xyz = padded.transpose(1, 0, 2)

    cells = padded.size
    # The first step compiles the kernels; it stays out of the timing so that MLUPS measures the time loop.
    step.run(1)
    previous = None
    residual = math.inf
    converged = False
    seconds = 0.0
    with tqdm(total=settings.max_steps, desc="LBM", unit="step", disable=not progress, leave=False) as bar:
        while step.time_steps_run < settings.max_steps:
            start = time.perf_counter()
            step.run(settings.check_interval)
            seconds += time.perf_counter() - start
            velocity = np.ma.getdata(step.velocity[:, :, :, 0]).copy()
            velocity[~fluid_xyz] = 0.0
            if previous is not None:
                norm = np.linalg.norm(velocity)
                residual = float(np.linalg.norm(velocity - previous) / norm) if norm > 0 else math.inf
                bar.set_postfix(change=f"{residual:.2e}")
                if residual < settings.tolerance:
                    converged = True
            previous = velocity
            bar.update(settings.check_interval)
            if converged:
                break
    steps = int(step.time_steps_run)
    timed_steps = steps - 1
    if not converged:
        raise LBMConvergenceError(
            f"LBM not steady after {steps} steps: relative velocity change {residual:.3e} over "
            f"{settings.check_interval} steps, tolerance {settings.tolerance:.1e}"
        )

    width = fluid.shape[1]
    inside = slice(n, n + width)
    rho = np.where(fluid_xyz, np.ma.getdata(step.density[:, :, :]), 0.0)[inside]
    ux = np.where(fluid_xyz, np.ma.getdata(step.velocity[:, :, :, 0]), 0.0)[inside]
    flux = ux.sum(axis=2).T
    with np.errstate(invalid="ignore", divide="ignore"):
        p_lattice = CS2 * rho.sum(axis=2).T / aperture
    p_lattice = np.where(active, p_lattice, np.nan)
    p_in = float(np.nanmean(p_lattice[:, 0]))
    p_out = float(np.nanmean(p_lattice[:, -1]))
    placeholder = np.broadcast_to(2.0 - np.arange(width) / (width - 1), aperture.shape)
    pressure = np.where(active, 1.0 + (p_lattice - p_out) / (p_in - p_out), placeholder)
    return LBMResult(
        pressure=pressure,
        pressure_lattice=p_lattice,
        flux=flux,
        velocity=ux.transpose(1, 0, 2),
        aperture=aperture.astype(np.int64),
        active=active,
        steps=steps,
        converged=converged,
        residual=residual,
        seconds=seconds,
        mlups=cells * timed_steps / seconds / 1e6,
        device=device,
    )
