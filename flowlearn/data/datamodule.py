"""Fracture datasets for training: a torch Dataset over HDF5 groups and a LightningDataModule around it.

A batch is a dict:

- ``aperture``: float (B, H, W), the aperture map in the file's unit (metres for the flowlearn layout);
- ``pressure``: float (B, H, W), the reference pressure, mapped to ``heads`` when set (default inlet 2, outlet 1);
  absent for aperture maps without one, which a dataset reads only with ``require_pressure=False`` (prediction);
- ``active``: bool (B, H, W), cells that carry flow (aperture > 0 and inside the file's mask);
- ``inputs``: float (B, C, H, W), the dimensionless input channels a correction model sees, those of the
  dataset's ``inputs`` names (see :mod:`flowlearn.data.inputs`; the default, ``aperture``, gives C = 2);
- ``inlet_pressure``, ``outlet_pressure``: float (B,), the pressures at the inlet and outlet faces of ``pressure``;
- ``flow_rate``: float (B,), the reference flow rate through the outlet for these heads (the file's value times
  the ratio of the head drops when ``heads`` maps them), NaN where the file stores none;
- ``voxel_size``: float (B,), metres per pixel, NaN where unknown;
- ``inclination``: float (B, 3, H, W), the mid-surface's inclination tensor in the solve's tensor form
  (log I_xx, log I_yy, ρ), its slope smoothed over ``slope_smoothing`` mean apertures (see
  :mod:`flowlearn.fractures.inclination`), NaN for a fracture without walls;
- ``aperture_slope``: float (B, 2, H, W), (∂Ap/∂x, ∂Ap/∂y) of the aperture map
  (:func:`~flowlearn.fractures.inclination.aperture_slope`), NaN where the voxel size is unknown;
- ``reference_error``: float (B, 3), the reference's own error against the Stokes flow of its smooth walls as the
  provenance records it, :data:`~flowlearn.data.provenance.ERRORS` (:mod:`flowlearn.reference.reference_error`),
  NaN where it records none;
- ``name``: list of B strings, ``"<file stem>/<group>"``.

Float tensors have the DataModule's ``dtype`` (float64 by default, the precision of the pressure solve). One batch
holds fractures of one shape only.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from flowlearn.data.files import list_fractures, missing_pressure, open_file, read_open
from flowlearn.data.inputs import DEFAULT_INPUTS, check_input_names, input_channels
from flowlearn.data.provenance import recorded_error
from flowlearn.data.schema import Fracture, where
from flowlearn.errors import ConfigError
from flowlearn.fractures.inclination import SMOOTHING, aperture_slope, inclination_tensor, mean_aperture
from flowlearn.runtime import collection_paused

# Where a library user's import reaches Lightning first (the readers of flowlearn's files never do): one full
# collection of the garbage at its end, not the four that its many new objects would start (0.3-0.4 s).
with collection_paused():
    import lightning as L

# Bytes of items a dataset keeps in memory, per process, once it has read them: a dataset that fits is read and
# prepared once instead of at every epoch (2.3 ms per 64x64 fracture of the embedded dataset, its inclination
# tensor and input channels included: 6 % of the default run's 99 s on 2 cores). The embedded dataset's 96
# fractures take 27 MiB, the real 256x260 fracture 4.6 MiB.
CACHED_BYTES = 512 * 2**20


@dataclass(frozen=True)
class FractureRef:
    """Where one fracture lives: file, group, and its array shape."""

    path: str
    name: str
    shape: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{Path(self.path).stem}/{self.name}"


def find_fractures(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[FractureRef]:
    """Every fracture of the given files, in file order and then group-name order."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    return [FractureRef(os.fspath(p), info.name, info.shape) for p in paths for info in list_fractures(p)]


def split_fractures(
    refs: Sequence[FractureRef],
    fractions: tuple[float, float, float],
    seed: int,
    limit: int | None = None,
) -> tuple[list[FractureRef], list[FractureRef], list[FractureRef]]:
    """Deterministic train/val/test split by fracture.

    The fractures are sorted by key and permuted with ``numpy.random.default_rng(seed)``, so the split depends only
    on the set of keys and the seed, not on file order. Each part with a positive fraction gets at least one
    fracture when there are enough; the three parts are disjoint and together hold every fracture, or the first
    ``limit`` of the permutation where ``limit`` is given (a quick run on a few of them, drawn at random).
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    ordered = sorted(refs, key=lambda r: r.key)
    if len({r.key for r in ordered}) != len(ordered):
        raise ValueError("fracture keys (file stem/group) must be unique across files")
    n = len(ordered) if limit is None else min(limit, len(ordered))
    # Val and test get at least one fracture each when asked for and there are enough; train takes the rest.
    n_val, n_test = (max(round(f * n), 1 if f > 0 and n >= 3 else 0) for f in fractions[1:])
    counts = [n - n_val - n_test, n_val, n_test]
    if counts[0] < 0 or (fractions[0] > 0 and counts[0] == 0):
        raise ValueError(
            f"{n} fractures are too few for the split fractions {fractions}: validation takes {n_val} and test "
            f"{n_test} (each part with a fraction > 0 at least one), which leaves {max(counts[0], 0)} for training"
        )
    order = np.random.default_rng(seed).permutation(len(ordered))[:n]
    parts = np.split(order, np.cumsum(counts)[:2])
    train, val, test = ([ordered[i] for i in sorted(part)] for part in parts)
    return train, val, test


class FractureDataset(Dataset):
    """One item per fracture: the dict described in the module docstring, without the batch dimension.

    ``inputs`` names the input channels of ``item["inputs"]``; a fracture that lacks what they need (the walls)
    raises :class:`~flowlearn.errors.DataValidationError` naming file, group and ``needed_by``. ``slope_smoothing``
    (mean apertures) smooths the mid-surface before its slope makes the inclination tensor.

    HDF5 files are opened on first access in each process and the handles are keyed by process id, so a
    DataLoader worker started by fork never reads through a handle its parent opened; pickling drops them.
    Items read are kept, up to :data:`CACHED_BYTES` in all; every read returns copies of their tensors, which the
    reader may change.
    """

    def __init__(
        self,
        refs: Sequence[FractureRef],
        heads: tuple[float, float] | None = (2.0, 1.0),
        dtype: torch.dtype = torch.float64,
        require_pressure: bool = True,
        inputs: Sequence[str] = DEFAULT_INPUTS,
        needed_by: str = "inputs",
        slope_smoothing: float = SMOOTHING,
    ) -> None:
        self.refs = list(refs)
        self.slope_smoothing = slope_smoothing
        self.heads = heads
        self.dtype = dtype
        self.require_pressure = require_pressure
        self.inputs = check_input_names(inputs)
        self.needed_by = needed_by
        self._files: dict[str, h5py.File] = {}
        self._pid: int | None = None
        self._items: dict[int, dict] = {}
        self._item_bytes = 0

    def __len__(self) -> int:
        return len(self.refs)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_files"], state["_pid"] = {}, None
        state["_items"], state["_item_bytes"] = {}, 0
        return state

    def _file(self, path: str) -> h5py.File:
        if self._pid != os.getpid():
            # Inherited handles belong to the parent process; forget them without closing the parent's files.
            self._files, self._pid = {}, os.getpid()
        if path not in self._files:
            self._files[path] = open_file(path)
        return self._files[path]

    def close(self) -> None:
        """Close the handles this process opened."""
        if self._pid == os.getpid():
            for f in self._files.values():
                f.close()
        self._files, self._pid = {}, None

    def __getitem__(self, index: int) -> dict:
        item = self._items.get(index)
        if item is None:
            item = self._read(index)
            size = sum(value.nbytes for value in item.values() if isinstance(value, torch.Tensor))
            if self._item_bytes + size <= CACHED_BYTES:
                self._items[index] = item
                self._item_bytes += size
        return {
            key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in item.items()
        }

    def _read(self, index: int) -> dict:
        ref = self.refs[index]
        fr = read_open(self._file(ref.path), ref.name)
        inlet, outlet = fr.inlet_pressure, fr.outlet_pressure
        item = {}
        if fr.pressure is not None:
            pressure = fr.pressure.astype(np.float64)
            if self.heads is not None:
                pressure = self.heads[1] + (pressure - outlet) * (self.heads[0] - self.heads[1]) / (
                    inlet - outlet
                )
            item["pressure"] = torch.as_tensor(pressure, dtype=self.dtype)
        elif self.require_pressure:
            raise missing_pressure(ref.path, ref.name)
        flow_rate = math.nan if fr.flow_rate is None else fr.flow_rate
        if self.heads is not None:
            if fr.flow_rate is not None:
                # The stored flow rate is proportional to the stored head drop.
                flow_rate *= (self.heads[0] - self.heads[1]) / (inlet - outlet)
            inlet, outlet = self.heads
        return {
            **item,
            "aperture": torch.as_tensor(fr.aperture.astype(np.float64), dtype=self.dtype),
            "active": torch.as_tensor(fr.active),
            "inputs": torch.as_tensor(
                input_channels(fr, self.inputs, ref.path, self.needed_by), dtype=self.dtype
            ),
            "inlet_pressure": torch.tensor(inlet, dtype=self.dtype),
            "outlet_pressure": torch.tensor(outlet, dtype=self.dtype),
            "flow_rate": torch.tensor(flow_rate, dtype=self.dtype),
            "voxel_size": torch.tensor(fr.voxel_size, dtype=self.dtype),
            "inclination": torch.as_tensor(self._inclination(fr, ref.path), dtype=self.dtype),
            "aperture_slope": torch.as_tensor(aperture_slope(fr), dtype=self.dtype),
            "reference_error": torch.tensor(recorded_error(fr, ref.path), dtype=self.dtype),
            "name": ref.key,
        }

    def _inclination(self, fracture: Fracture, path: str) -> np.ndarray:
        """The fracture's inclination tensor, float64 (3, H, W), its slope smoothed as ``slope_smoothing`` asks.

        Raises:
            ConfigError: naming ``data.slope_smoothing``, where its Gaussian is wider than the fracture's map (the
                slope of a map smoothed beyond its own size says nothing of its walls).
        """
        if self.slope_smoothing > 0 and fracture.bottom is not None and math.isfinite(fracture.voxel_size):
            pixels = self.slope_smoothing * mean_aperture(fracture) / fracture.voxel_size
            side = min(fracture.shape)
            if pixels > side:
                widest = self.slope_smoothing * side / pixels
                raise ConfigError(
                    f"data.slope_smoothing: {self.slope_smoothing:g} mean apertures is a Gaussian {pixels:.3g} "
                    f"pixels wide on {where(path, fracture.name)} (a {'x'.join(map(str, fracture.shape))} map): "
                    f"wider than the map; give at most {widest:.3g} there, or 0 (pixel by pixel, for walls "
                    "resolved on the grid)"
                )
        return inclination_tensor(fracture, self.slope_smoothing)


class SameShapeBatchSampler(BatchSampler):
    """Batches of indices, drawn from ``sampler``, whose fractures share one shape.

    ``sampler`` yields the dataset indices to batch (all of them, or one rank's share when Lightning swaps in a
    ``DistributedSampler`` under DDP; it re-creates this sampler with the new ``sampler`` argument). With
    ``shuffle`` the batches are re-drawn every epoch from ``seed`` and the epoch number (set by
    :meth:`set_epoch`), so runs are reproducible; without it the order is fixed. Under DDP with several shapes the
    ranks may get different numbers of batches; keep one shape per dataset there.
    """

    def __init__(
        self,
        sampler: Sampler[int] | Iterable[int],
        shapes: Sequence[tuple[int, ...]],
        batch_size: int,
        drop_last: bool = False,
        shuffle: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.shapes = [tuple(s) for s in shapes]
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng((self.seed, self.epoch))
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i in self.sampler:
            groups[self.shapes[i]].append(int(i))
        batches = []
        for shape in sorted(groups):
            idx = groups[shape]
            if self.shuffle:
                idx = [idx[i] for i in rng.permutation(len(idx))]
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                if len(chunk) == self.batch_size or not self.drop_last:
                    batches.append(chunk)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class FractureDataModule(L.LightningDataModule):
    """Train/val/test loaders over one or more fracture files (either layout; see :mod:`flowlearn.data.schema`).

    Args:
        path: one HDF5 file or a list of them.
        batch_size: fractures per batch; every batch holds one shape.
        fractions: train, val and test fractions of the fractures.
        seed: seed of the split and of the training shuffle.
        heads: map each fracture's declared (inlet, outlet) pressures onto these; None keeps the file's values.
        dtype: dtype of the float tensors.
        num_workers: DataLoader worker processes; HDF5 handles are opened inside each worker.
        inputs: names of the input channels each batch carries (see :mod:`flowlearn.data.inputs`).
        slope_smoothing: the width (full width at half maximum), in mean apertures, of the Gaussian that smooths
            the mid-surface before its slope makes the inclination tensor (:mod:`flowlearn.fractures.inclination`); 0 for
            none.
        max_fractures: split only this many of the fractures, drawn at random with ``seed`` (None: all of them).
    """

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        batch_size: int = 4,
        fractions: tuple[float, float, float] = (0.75, 0.125, 0.125),
        seed: int = 0,
        heads: tuple[float, float] | None = (2.0, 1.0),
        dtype: torch.dtype = torch.float64,
        num_workers: int = 0,
        inputs: Sequence[str] = DEFAULT_INPUTS,
        slope_smoothing: float = SMOOTHING,
        max_fractures: int | None = None,
    ) -> None:
        super().__init__()
        self.paths = [path] if isinstance(path, str | os.PathLike) else list(path)
        self.batch_size = batch_size
        self.fractions = tuple(fractions)
        self.seed = seed
        self.heads = None if heads is None else (float(heads[0]), float(heads[1]))
        self.dtype = dtype
        self.num_workers = num_workers
        self.inputs = check_input_names(inputs)
        self.slope_smoothing = slope_smoothing
        self.max_fractures = max_fractures
        self.splits: dict[str, FractureDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        train, val, test = split_fractures(
            find_fractures(self.paths), self.fractions, self.seed, limit=self.max_fractures
        )
        self.splits = {
            name: FractureDataset(
                refs, self.heads, self.dtype, inputs=self.inputs, slope_smoothing=self.slope_smoothing
            )
            for name, refs in (("train", train), ("val", val), ("test", test))
        }

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        dataset = self.splits[split]
        sampler = SameShapeBatchSampler(
            SequentialSampler(dataset),
            [r.shape for r in dataset.refs],
            self.batch_size,
            shuffle=shuffle,
            seed=self.seed,
        )
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def teardown(self, stage: str | None = None) -> None:
        for dataset in self.splits.values():
            dataset.close()
