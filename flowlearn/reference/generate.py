"""Make LBM reference datasets: rough fracture -> voxelised gap -> LBM pressure and flow rate -> HDF5 file.

Each fracture draws its roughness from the configured ranges, so that a dataset spans the regimes where the
local cubic law holds (smooth, gently varying gaps) and where it fails (roughness at wavelengths near the
aperture, wide aperture distributions, contacts, sheared walls).

Generation is resumable: every finished fracture is written at once to ``<output>.parts/`` (atomically), so a
killed run keeps them and the same command continues where it stopped; the output file is written (atomically)
when all are done, and the parts are removed. Several processes share the fractures.

Needs the ``[lbm]`` extra (lbmpy) at run time; the rough-fracture generator and the schema do not.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from flowlearn.checks import (
    available_memory,
    check_cores,
    check_map_shape,
    check_setting,
    check_voxel_size,
    is_integer,
    is_number,
)
from flowlearn.data.files import atomic_path, read_fracture, write_fractures
from flowlearn.data.schema import MIN_FLOW_LENGTH, Fracture
from flowlearn.errors import DataValidationError, ProblemError, ReferenceConvergenceError, SettingError
from flowlearn.fractures.recipes import Published, Recipe
from flowlearn.fractures.roughness import RoughFracture, geometry_stats
from flowlearn.reference.convergence import refinement_change
from flowlearn.reference.departure import lcl_flow_rate
from flowlearn.reference.lbm import (
    DEPTH_QUANTUM,
    LBMSettings,
    largest_reservoir,
    least_box_bytes,
    library_versions,
    pick_target,
    simulate,
)
from flowlearn.reference.refinement import measured_convergence
from flowlearn.reference.voxels import voxelize
from flowlearn.reference.wall_mesh import Window
from flowlearn.reference.wall_reference import MIN_GAP_CELLS, WallReferenceSettings, wall_reference

# The most fractures one dataset may hold. A generation lists the indices still to make and keeps one part file per
# fracture until all are done; a count of 10^12 filled the memory with that list before anything was printed. At the
# LBM's seconds per fracture of the smallest maps, a million fractures is years of one machine's time already.
MAX_COUNT = 1_000_000
# What solves each fracture's flow: the LBM on its voxels, or the wall-fitted Stokes solve of its smooth walls at
# two resolutions, extrapolated (:mod:`flowlearn.reference.wall_reference`).
REFERENCES = ("lbm", "stokes")


@dataclass(frozen=True)
class DatasetConfig:
    """A dataset of rough fractures: how many, on what grid, from which :mod:`recipe <flowlearn.fractures.recipes>`.

    Lengths in voxels (= pixels of the map) unless noted. Fracture i draws its roughness from the recipe's ranges
    with ``numpy.random.default_rng([seed, i])`` and synthesises its walls with seed ``seed + i``.

    Attributes:
        count: number of fractures, in [1, :data:`MAX_COUNT`].
        shape: (H, W) of each aperture map.
        mean_aperture: the fractures' mean aperture (voxels): the LBM's resolution across the gap.
        recipe: what the fractures draw (:data:`~flowlearn.fractures.recipes.RECIPES`).
        seed: seed of the first fracture.
        voxel_size: metres per voxel, used to store apertures, walls and flow rates in metres; in
            :data:`~flowlearn.checks.VOXEL_SIZE` (a nanometre to a metre).
        lbm: numerical settings of the LBM runs.
        refine_every: every this many fractures (indices 0, n, 2n, ...), the LBM also runs on the grid 2× finer and
            the fracture's provenance records the flow rate's change (``convergence``); 0: never. Each such
            fracture costs about 17× one that is not.
        reference: what solves each fracture's flow, one of :data:`REFERENCES`.
        stokes: settings of the ``stokes`` reference.
    """

    count: int = 96
    shape: tuple[int, int] = (64, 64)
    mean_aperture: float = 8.0
    recipe: Recipe = field(default_factory=Published)
    seed: int = 0
    voxel_size: float = 1e-5
    lbm: LBMSettings = field(default_factory=LBMSettings)
    refine_every: int = 0
    reference: str = "lbm"
    stokes: WallReferenceSettings = field(default_factory=WallReferenceSettings)

    def __post_init__(self) -> None:
        check_setting(
            self.reference in REFERENCES,
            "reference",
            f"must be one of {', '.join(REFERENCES)}",
            self.reference,
        )
        check_setting(
            self.refine_every == 0 or self.reference == "lbm",
            "refine_every",
            "must be 0 with the stokes reference, which extrapolates from two meshes of its own (the 2x grid "
            "refines the LBM)",
            self.refine_every,
        )
        check_setting(
            is_integer(self.refine_every) and self.refine_every >= 0,
            "refine_every",
            "must be an integer >= 0 (0: no fracture is refined)",
            self.refine_every,
        )
        # The refinement interpolates the map's walls by their Fourier series, exact for periodic walls only: a
        # window of larger walls would ring at its ends, and the change measured would be the ringing's.
        check_setting(
            self.refine_every == 0 or self.recipe.periodic,
            "refine_every",
            f"must be 0 with the {self.recipe.name} recipe: its maps are windows of larger walls, not periodic, and "
            "refining them by Fourier interpolation would ring at their ends",
            self.refine_every,
        )
        check_setting(
            is_integer(self.count) and 1 <= self.count <= MAX_COUNT,
            "count",
            f"must be an integer in [1, {MAX_COUNT}]",
            self.count,
        )
        check_voxel_size(self.voxel_size)
        check_setting(is_integer(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0", self.seed)
        shape = check_map_shape(self.shape)
        check_setting(
            shape[1] >= MIN_FLOW_LENGTH,
            "shape",
            f"must have W >= {MIN_FLOW_LENGTH} columns along the flow (the inlet, the outlet and one between)",
            self.shape,
        )
        # Walls a mean aperture of 0 apart touch wherever they are not rough, and nothing flows.
        check_setting(
            is_number(self.mean_aperture) and self.mean_aperture > 0,
            "mean_aperture",
            "must be > 0",
            self.mean_aperture,
        )
        if self.reference == "lbm":
            self._check_box_memory(shape)
        else:
            coarser = self.stokes.cells_per_voxel[0]
            check_setting(
                self.mean_aperture * coarser >= MIN_GAP_CELLS,
                "mean_aperture",
                f"must be at least {MIN_GAP_CELLS / coarser:g} voxels with the stokes reference at {coarser} cell(s) "
                f"per voxel on its coarser mesh: below {MIN_GAP_CELLS} cells across the mean gap its extrapolated "
                "flow was up to 5 % off (raise it, or the coarser mesh's cells per voxel)",
                self.mean_aperture,
            )
        # Both ends of every range must make valid fractures; checked before any simulation runs.
        self.recipe.check(shape, self.mean_aperture)

    def _check_box_memory(self, shape: tuple[int, int]) -> None:
        """Raise :class:`SettingError` where the LBM box of a fracture would not fit in the memory this machine
        has available, for the setting at fault (the map's shape, the mean aperture or the reservoirs, whichever
        alone makes it too large), naming all three with their values and the largest value of it that fits."""
        memory, reservoir, aperture = available_memory(), self.lbm.reservoir, self.mean_aperture
        needed = least_box_bytes(shape, aperture, reservoir)
        if needed <= memory:
            return
        # Bytes of one quantum of depth of the whole box.
        quantum = least_box_bytes(shape, DEPTH_QUANTUM, reservoir)
        if least_box_bytes(shape, aperture, 0) <= memory:
            field, value = "reservoir", reservoir
            advice = f"use a reservoir of at most {largest_reservoir(shape, aperture, memory)} columns"
        elif least_box_bytes(shape, 0, reservoir) <= memory:
            field, value = "mean_aperture", aperture
            fitting = DEPTH_QUANTUM * (memory // quantum)
            advice = f"the mean aperture must stay below about {fitting} voxels on this map"
        elif least_box_bytes(shape, 0, 0) <= memory:
            field, value = "mean_aperture", aperture
            advice = (
                "lower the mean aperture and the reservoirs, each of which alone is too large for this map"
            )
        else:
            field, value = "shape", self.shape
            fitting = shape[0] * shape[1] * memory / needed  # pixels of a map whose box fills the memory
            advice = f"H x W must stay below about {fitting:.3g} pixels at this mean aperture"
        raise SettingError(
            field,
            f"needs at least {needed / 2**30:.3g} GiB for each fracture's LBM, more than the "
            f"{memory / 2**30:.3g} GiB this process has available (a box of the {shape[0]}x{shape[1]} map, its "
            f"mean aperture of {aperture:g} voxels and reservoirs of {reservoir} columns at each end): {advice}, "
            f"got {value!r}",
        )

    def draws(self, index: int) -> dict[str, float]:
        """The roughness settings fracture ``index`` draws from the recipe's ranges."""
        return self.recipe.draws(self.seed, index)

    def walls(self, index: int) -> RoughFracture:
        """The walls of fracture ``index`` (pixels)."""
        return self.recipe.walls(tuple(self.shape), self.mean_aperture, self.seed, index)

    def to_dict(self) -> dict:
        """JSON-ready recipe: every setting, the recipe's and the LBM's included."""
        recipe = asdict(self)
        recipe["shape"] = list(self.shape)
        recipe["recipe"] = self.recipe.to_dict()
        recipe["stokes"] = self.stokes.to_dict()
        return json.loads(json.dumps(recipe))


def drawn_fracture(walls: RoughFracture, voxel_size: float, name: str) -> Fracture:
    """The walls as a :class:`Fracture` without a reference: aperture and walls in metres, the provenance recording
    the walls' draws (``roughness``) and the geometry's statistics."""
    return Fracture(
        name=name,
        aperture=walls.aperture * voxel_size,
        pressure=None,
        voxel_size=voxel_size,
        bottom=walls.bottom * voxel_size,
        top=walls.top * voxel_size,
        provenance={
            "generator": "flowlearn.reference.generate",
            "roughness": walls.params.to_dict(),
            "geometry": geometry_stats(walls.bottom, walls.top).to_dict(),
        },
    )


def generate_fracture(
    walls: RoughFracture, settings: LBMSettings, voxel_size: float, name: str, progress: bool = True
) -> Fracture:
    """One rough fracture with its LBM pressure and flow rate, as a :class:`Fracture` with full provenance.

    The walls are voxelised (:func:`~flowlearn.reference.voxels.voxelize`) and stored as :func:`lbm_fracture`
    stores a reference; the provenance also records the walls' draws (``roughness``) and the geometry's statistics.
    """
    drawn = drawn_fracture(walls, voxel_size, name)
    return lbm_fracture(drawn, voxelize(walls.bottom, walls.top), settings, progress)


def stokes_generated(
    walls: RoughFracture, settings: WallReferenceSettings, voxel_size: float, name: str, progress: bool = True
) -> Fracture:
    """One rough fracture with the extrapolated Stokes flow of its smooth walls as its reference
    (:func:`~flowlearn.reference.wall_reference.wall_reference`), the provenance recording its departure from the
    LCL as :func:`lbm_fracture`'s does."""
    window = None if walls.larger is None else Window(walls.larger, walls.origin)
    referenced = wall_reference(drawn_fracture(walls, voxel_size, name), settings, window, progress)
    q_lcl = lcl_flow_rate(referenced)
    referenced.provenance["departure"] = {"flow_rate_lcl": q_lcl, "ratio": referenced.flow_rate / q_lcl}
    return referenced


def lbm_fracture(
    fracture: Fracture, fluid: np.ndarray, settings: LBMSettings, progress: bool = True
) -> Fracture:
    """``fracture`` with the LBM reference of its fluid voxels ``fluid`` (bool (H, W, D), cubic voxels of its
    ``voxel_size``), as every reference of a dataset is stored.

    The stored aperture is the voxelised one (fluid voxels per column times ``voxel_size``, metres), so the
    Darcy model sees exactly the gap the LBM saw; the pressure is normalised to inlet 2 and outlet 1 along x; the
    mask marks cells that no 4-connected path joins to the inlet or outlet column; the flow rate is in m³ (per unit
    of head over viscosity). Name, walls and provenance are kept; the provenance adds the box's shape
    (``voxel_box``), the flow rate of the local cubic law on the same map (``departure``) and the run (``lbm``).
    """
    result = simulate(fluid, settings, progress=progress)
    referenced = replace(fracture, **result.fracture_fields(fracture.voxel_size))
    q_lcl = lcl_flow_rate(referenced)
    provenance = {
        **fracture.provenance,
        "voxel_box": list(fluid.shape),
        "departure": {"flow_rate_lcl": q_lcl, "ratio": referenced.flow_rate / q_lcl},
        **result.provenance(settings),
    }
    return replace(referenced, provenance=provenance)


def _make(config: DatasetConfig, index: int, lbm: LBMSettings) -> Fracture:
    """Fracture ``index`` of ``config`` (run in a worker process)."""
    walls = config.walls(index)
    try:
        if config.reference == "stokes":
            fracture = stokes_generated(walls, config.stokes, config.voxel_size, fracture_name(index), False)
        else:
            fracture = generate_fracture(walls, lbm, config.voxel_size, fracture_name(index), progress=False)
    except ProblemError as err:
        # Walls that touch all across the map leave nothing to simulate: name the fracture and its draws.
        raise ProblemError(
            f"{fracture_name(index)} (drawn {config.draws(index)}): {err}; raise the mean aperture, or lower the "
            "roughness or the contact fraction"
        ) from err
    except ReferenceConvergenceError as err:
        raise ReferenceConvergenceError(f"{fracture_name(index)}: {err}") from err
    fracture.provenance["dataset"] = {
        "index": index,
        "drawn": config.recipe.shaping(index, config.draws(index)),
    }
    if config.refine_every and index % config.refine_every == 0:
        change = refinement_change(walls.bottom, walls.top, fracture.flow_rate / config.voxel_size**3, lbm)
        fracture.provenance["convergence"] = measured_convergence(change)
    return fracture


def fracture_name(index: int) -> str:
    return f"fracture_{index:03d}"


def _check_continuable(parts: Path, config: DatasetConfig) -> None:
    """Refuse a folder of finished fractures that a generation with other settings left."""
    recipe_file = parts / "recipe.json"
    if recipe_file.exists():
        started = json.loads(recipe_file.read_text())
        if {**started, "count": 0} != {**config.to_dict(), "count": 0}:
            raise SettingError(
                "settings",
                f"{parts} holds fractures of a generation with other settings; rerun with those settings "
                f"(see {recipe_file}) to continue it, or delete the folder to start over",
            )


def parts_folder(path: str | os.PathLike) -> Path:
    """Where the finished fractures of a generation writing ``path`` wait, one file each, until all are done."""
    return Path(f"{os.fspath(path)}.parts")


def part_path(parts: Path, index: int) -> Path:
    """The file of finished fracture ``index`` in the folder ``parts``."""
    return parts / f"{fracture_name(index)}.h5"


def prepare_parts(config: DatasetConfig, path: str | os.PathLike) -> list[int]:
    """Start (or continue) the generation of ``config`` into ``path``: the indices of the fractures still to make.

    Refuses a parts folder of other settings, and a target (GPU, compiler) that is not there, before any file is
    made; then creates the parts folder with the recipe that a continuation must match.
    """
    parts = parts_folder(path)
    _check_continuable(parts, config)
    # A GPU or a compiler that is not there fails here, before any file is made, not in the first simulation.
    pick_target(config.lbm.target)
    recipe_file = parts / "recipe.json"
    if not recipe_file.exists():
        parts.mkdir(parents=True, exist_ok=True)
        with atomic_path(recipe_file) as tmp:
            tmp.write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
    return [i for i in range(config.count) if not part_path(parts, i).exists()]


def make_parts(
    config: DatasetConfig,
    path: str | os.PathLike,
    indices: list[int],
    processes: int = 1,
    progress: bool = True,
) -> None:
    """Make fractures ``indices`` of ``config`` with ``processes`` worker processes, each written to its part file
    (atomically) as soon as it is done, so that a killed run loses at most the fractures in flight. No more
    processes are started than there are fractures to make."""
    check_setting(is_integer(processes) and processes >= 1, "processes", "must be an integer >= 1", processes)
    processes = max(1, min(processes, len(indices)))
    parts = parts_folder(path)
    from flowlearn.threads import usable_cores  # numba: only where fractures are made

    # The cores are shared between processes, unless the user gave each a thread count.
    threads = config.lbm.threads or max(1, usable_cores() // processes)
    lbm = replace(config.lbm, threads=threads)
    bar = tqdm(total=len(indices), desc="fractures", disable=not progress)
    failed: list[Exception] = []  # why each fracture that could not be made failed, in one line
    with bar:
        if processes == 1:
            for i in indices:
                _keep_part(parts, i, lambda i=i: _make(config, i, lbm), failed)
                bar.update()
        else:
            with ProcessPoolExecutor(processes) as pool:
                running = {pool.submit(_make, config, i, lbm): i for i in indices}
                try:
                    while running:
                        done, _ = wait(running, return_when=FIRST_COMPLETED)
                        for future in done:
                            _keep_part(parts, running.pop(future), future.result, failed)
                            bar.update()
                except BaseException:
                    # A bug or an interrupt: stop now, not after every queued fracture has run for nothing (the
                    # pool's exit would wait for them, and their results would be thrown away).
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    if failed:
        # Where every failure is a reference that did not converge, the error says so, so that the command line can
        # name the settings that help.
        unsteady = all(isinstance(err, ReferenceConvergenceError) for err in failed)
        raise (ReferenceConvergenceError if unsteady else ProblemError)(
            f"{len(failed)} of {len(indices)} fractures could not be made (the others are in {parts}): "
            + "; ".join(map(str, failed))
        )


def _keep_part(parts: Path, index: int, made: Callable[[], Fracture], failed: list[Exception]) -> None:
    """Write fracture ``index`` as ``made()`` returns it to its part file; where its walls or its reference fail, or
    the file would not be valid (:class:`ProblemError`, :class:`ReferenceConvergenceError`,
    :class:`DataValidationError`, each naming the fracture), add the error to ``failed`` instead, so that the other
    fractures go on."""
    try:
        # write_fractures validates the fracture before it writes anything.
        write_fractures(part_path(parts, index), [made()])
    except (ProblemError, ReferenceConvergenceError, DataValidationError) as err:
        failed.append(err)


def merge_parts(config: DatasetConfig, path: str | os.PathLike) -> list[Fracture]:
    """Write the finished fractures of ``config`` into ``path`` (atomically), remove the parts folder, and return
    the fractures.

    Raises:
        ProblemError: naming the fractures that have no part yet.
    """
    parts = parts_folder(path)
    missing = [fracture_name(i) for i in range(config.count) if not part_path(parts, i).exists()]
    if missing:
        raise ProblemError(
            f"{parts}: {len(missing)} of {config.count} fractures are not finished ({', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}); rerun the same command to make them"
        )
    fractures = [read_fracture(part_path(parts, i), fracture_name(i)) for i in range(config.count)]
    write_fractures(path, fractures, attrs={"recipe": json.dumps(_recipe(config), sort_keys=True)})
    shutil.rmtree(parts)
    return fractures


def summarize_generation(
    path: str | os.PathLike, fractures: list[Fracture], computed: int, seconds: float
) -> dict:
    """A generation's summary: fractures, seconds, fractures per hour, the solver's work (LBM steps and MLUPS, or
    the Stokes solves' iterations and finer meshes' change) and the departure from the LCL."""
    ratios = [fr.provenance["departure"]["ratio"] for fr in fractures]
    if all("stokes_reference" in fr.provenance for fr in fractures):
        records = [fr.provenance["stokes_reference"] for fr in fractures]
        work = {
            "iterations": [rec["iterations"] for rec in records],
            "finer_change": {
                "median": float(np.median([rec["finer_change"] for rec in records])),
                "max": float(np.max(np.abs([rec["finer_change"] for rec in records]))),
            },
        }
    else:
        lbm_records = [fr.provenance["lbm"] for fr in fractures]
        work = {
            "steps": [rec["convergence"]["steps"] for rec in lbm_records],
            "mlups": float(np.mean([rec["mlups"] for rec in lbm_records])),
        }
    return {
        "path": os.fspath(path),
        "fractures": len(fractures),
        "computed_now": computed,
        "seconds": seconds,
        "fractures_per_hour": computed / seconds * 3600 if computed else None,
        **work,
        "contact_fraction": float(np.mean([(fr.aperture == 0).mean() for fr in fractures])),
        "flow_rate_over_lcl": {"min": min(ratios), "median": float(np.median(ratios)), "max": max(ratios)},
    }


def generate_dataset(
    config: DatasetConfig, path: str | os.PathLike, processes: int = 1, progress: bool = True
) -> dict:
    """Generate ``config.count`` fractures with ``processes`` worker processes and write them to ``path``.

    Finished fractures already in ``<path>.parts/`` (from a killed run with the same settings) are kept and not
    recomputed. Returns :func:`summarize_generation`'s summary.
    """
    check_setting(is_integer(processes) and processes >= 1, "processes", "must be an integer >= 1", processes)
    # Here, before the parts folder is made: each simulation would refuse them too, in its worker.
    check_cores("threads", config.lbm.threads)
    start = time.perf_counter()
    todo = prepare_parts(config, path)
    make_parts(config, path, todo, processes, progress)
    fractures = merge_parts(config, path)
    return summarize_generation(path, fractures, len(todo), time.perf_counter() - start)


def _recipe(config: DatasetConfig) -> dict:
    """What made the file: the settings, the seeds and the library versions."""
    return {
        "config": config.to_dict(),
        "seeds": {
            "walls": f"seed + index = {config.seed} + i",
            "draws": f"numpy default_rng([{config.seed}, i])",
        },
        "versions": library_versions(),
    }
