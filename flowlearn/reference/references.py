"""The LBM reference of every fracture of a file: ``flowlearn reference IN.h5 -o OUT.h5``.

For a file whose fractures have no reference (an imported scan, :mod:`flowlearn.data.scans`), or whose reference is
to be computed again: each fracture's gap is voxelised as the generator voxelises its own
(:func:`~flowlearn.reference.voxels.fracture_voxels`: between its walls where it stores them, else its aperture
symmetric about a flat mid-plane), the LBM runs with the generator's settings (:class:`~flowlearn.reference.lbm.LBMSettings`)
and the result is stored as the generator stores its own (:func:`~flowlearn.reference.generate.lbm_fracture`): the
voxelised aperture, the pressure normalised to inlet 2 and outlet 1, the mask, the flow rate in m³, the departure
from the local cubic law and the run's record. ``flowlearn check``, ``departure``, ``predict`` and ``evaluate`` then
read the output as a generated file.

Resumable: the output is rewritten (atomically) after each fracture, holding those done so far in the input's order,
so that a killed run loses only the fracture it was on. A run into an existing output keeps each of its fractures
whose reference was computed from the same geometry (a checksum of the input fracture's aperture, mask, walls and
voxel size, recorded in its provenance ``reference``) with the same LBM settings (the threads aside), and computes
the others. As a SLURM job array (``--slurm``), the fractures are computed as ``flowlearn generate --slurm`` makes its
own, one part file each (:class:`~flowlearn.reference.cluster.References`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from flowlearn.checks import check_not_input
from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.provenance import fracture_where
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError, ProblemError, ReferenceConvergenceError
from flowlearn.fractures.roughness import geometry_stats
from flowlearn.reference.generate import lbm_fracture
from flowlearn.reference.lbm import LBMSettings, check_box_memory, library_versions, pick_target
from flowlearn.reference.voxels import active_cells, fracture_voxels

# The provenance record of a reference this module computed.
RECORD = "reference"
# Records that describe how far an earlier reference lay from the converged flow (flowlearn refine, smooth-walls):
# they do not describe the reference computed here, and are left out of its provenance.
STALE_RECORDS = ("convergence", "reference_error")


@dataclass(frozen=True)
class FileReferences:
    """What :func:`reference_file` did.

    Attributes:
        computed: fractures whose reference was computed by this call.
        kept: fractures of an earlier output kept (the same geometry and settings).
    """

    computed: int
    kept: int


def geometry_digest(fracture: Fracture) -> str:
    """The SHA-256 (hex) of what the reference of ``fracture`` is computed from: its shape, aperture, mask, walls
    and voxel size (float64 bytes, in that order; a field it lacks counts as such)."""
    digest = hashlib.sha256(repr(fracture.shape).encode())
    for array in (fracture.aperture, fracture.mask, fracture.bottom, fracture.top):
        digest.update(b"none" if array is None else np.ascontiguousarray(array, dtype=np.float64).tobytes())
    digest.update(np.float64(fracture.voxel_size).tobytes())
    return digest.hexdigest()


def walled(fracture: Fracture) -> bool:
    """Whether ``fracture`` stores its walls, which its reference is then computed between."""
    return fracture.bottom is not None and fracture.top is not None


def reference_fracture(fracture: Fracture, settings: LBMSettings, progress: bool = True) -> Fracture:
    """``fracture`` with its LBM reference (:func:`~flowlearn.reference.generate.lbm_fracture`) between its walls
    where it stores them, else of its aperture symmetric about a flat mid-plane, on voxels of its voxel size.

    Its provenance keeps what it held, less :data:`STALE_RECORDS`, and adds the walls' statistics (``geometry``,
    where it stores walls, as the generator records them) and :data:`RECORD`: where the gap came from and the
    :func:`geometry_digest` of the fracture it was computed from.
    """
    provenance = {key: value for key, value in fracture.provenance.items() if key not in STALE_RECORDS}
    if walled(fracture):
        size = fracture.voxel_size
        provenance["geometry"] = geometry_stats(fracture.bottom / size, fracture.top / size).to_dict()
    provenance[RECORD] = {
        "gap": "between its stored walls" if walled(fracture) else "its aperture about a flat mid-plane",
        "geometry_sha256": geometry_digest(fracture),
    }
    source = replace(fracture, provenance=provenance)
    return lbm_fracture(source, fracture_voxels(fracture), settings, progress)


def check_referenceable(fracture: Fracture, path: str | os.PathLike, settings: LBMSettings) -> None:
    """Raise naming ``path`` and the fracture, before any run, where its reference cannot be computed.

    Raises:
        DataValidationError: a voxel size that is unknown, a map that is not 2D with flow along x, or voxels so
            coarse that none is fluid.
        ProblemError: no fluid path from the inlet column to the outlet column, or a box larger than the memory.
    """
    where = fracture_where(fracture, path)
    if not math.isfinite(fracture.voxel_size):
        raise DataValidationError(
            f"{where}: its voxel size is unknown, so its aperture cannot be voxelised: store the map with its "
            "voxel size (flowlearn import aperture MAP --pixel-size M --units U -o FILE)"
        )
    try:
        fluid = fracture_voxels(fracture)
        active_cells(fluid)
        check_box_memory(fluid.shape, settings.reservoir)
    except (DataValidationError, ProblemError) as err:
        # fracture_voxels names the fracture alone ("fracture 'f0': ..."); here the file and group name it.
        raise type(err)(f"{where}: {str(err).removeprefix(f'fracture {fracture.name!r}: ')}") from err


def reference_file(
    source: str | os.PathLike,
    output: str | os.PathLike,
    settings: LBMSettings | None = None,
    progress: bool = True,
    report: Callable[[Fracture, float], None] | None = None,
) -> FileReferences:
    """Compute the LBM reference of every fracture of ``source`` (either layout) into ``output`` (flowlearn layout),
    as the module describes: rewritten atomically after each fracture, keeping those an earlier run computed.

    ``report(fracture, seconds)`` follows each fracture computed. ``settings.threads`` are this machine's; the
    settings default to the generator's. The root attribute ``reference`` of ``output`` records the source, the
    settings and the library versions (JSON).

    Raises:
        SettingError: ``output`` is ``source``.
        DataValidationError: a file without fractures, or a fracture that cannot be referenced
            (:func:`check_referenceable`), checked for every fracture before the first run.
        UnavailableError: the target (a GPU, a C++ compiler) is not there.
        ReferenceConvergenceError: naming the fracture, a run not steady by ``settings.max_steps``; the fractures
            done are kept in ``output``.
    """
    settings = settings or LBMSettings()
    check_not_input(output, [source], "the input", "output")
    fractures = checked_fractures(source, settings)
    done = done_before(output, fractures, settings)
    kept = len(done)
    attrs = file_attributes(source, settings)

    def write() -> None:
        write_fractures(output, [done[fr.name] for fr in fractures if fr.name in done], attrs=attrs)

    todo = [fracture for fracture in fractures if fracture.name not in done]
    if not todo:
        write()  # the output may hold fractures of another input, or lack the root attribute
    with tqdm(total=len(todo), desc="fractures", unit="fracture", disable=not progress) as bar:
        for fracture in todo:
            start = time.perf_counter()
            try:
                done[fracture.name] = reference_fracture(fracture, settings, progress)
            except ReferenceConvergenceError as err:
                raise ReferenceConvergenceError(f"{fracture_where(fracture, source)}: {err}") from err
            write()
            bar.update()
            if report is not None:
                with bar.external_write_mode():
                    report(done[fracture.name], time.perf_counter() - start)
    return FileReferences(computed=len(todo), kept=kept)


def checked_fractures(source: str | os.PathLike, settings: LBMSettings) -> list[Fracture]:
    """The fractures of ``source``, each checked (:func:`check_referenceable`), and the target there: what a run
    checks before the first fracture's LBM.

    Raises:
        DataValidationError: a file without fractures, or a fracture that cannot be referenced.
        ProblemError: a fracture without a fluid path, or too large a box.
        UnavailableError: the target (a GPU, a C++ compiler) is not there.
    """
    fractures = read_fractures(source)  # a file without fractures is refused here
    for fracture in fractures:
        check_referenceable(fracture, source, settings)
    pick_target(settings.target)  # a missing compiler or GPU: one line before the first run
    return fractures


def file_attributes(source: str | os.PathLike, settings: LBMSettings) -> dict[str, str]:
    """The root attributes of an output of ``source``'s references: :data:`RECORD`, the source's path, the settings
    and the library versions (JSON)."""
    record = {"source": os.path.abspath(source), "lbm": asdict(settings), "versions": library_versions()}
    return {RECORD: json.dumps(record, sort_keys=True)}


def _comparable(settings: object) -> object:
    """LBM settings (an :class:`LBMSettings`' dict, or what a provenance records) as two runs that give one
    reference share them: every setting but the threads."""
    if not isinstance(settings, dict):
        return None
    return {key: value for key, value in settings.items() if key != "threads"}


def done_before(
    output: str | os.PathLike, fractures: Sequence[Fracture], settings: LBMSettings
) -> dict[str, Fracture]:
    """The fractures of an existing ``output`` (or of a part file of a job array) whose reference this module
    computed from the geometry of the fracture of ``fractures`` of their name, with ``settings``: by name."""
    if not Path(output).is_file() or Path(output).stat().st_size == 0:
        return {}
    digests = {fracture.name: geometry_digest(fracture) for fracture in fractures}
    wanted = _comparable(asdict(settings))
    kept = {}
    for fracture in read_fractures(output):
        record = fracture.provenance.get(RECORD)
        run = fracture.provenance.get("lbm")
        if (
            isinstance(record, dict)
            and isinstance(run, dict)
            and record.get("geometry_sha256") == digests.get(fracture.name)
            and _comparable(run.get("settings")) == wanted
        ):
            kept[fracture.name] = fracture
    return kept
