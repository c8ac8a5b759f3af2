"""DataModule: deterministic disjoint splits, same-shape batches, head normalisation, fork-safe workers."""

import os

import h5py
import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from flowlearn.data import datamodule
from flowlearn.data.datamodule import (
    FractureDataModule,
    FractureDataset,
    FractureRef,
    SameShapeBatchSampler,
    find_fractures,
    split_fractures,
)
from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.inputs import input_channels
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError


def linear_fracture(name: str, shape: tuple[int, int], inlet: float, outlet: float, seed: int) -> Fracture:
    """Random aperture (0.5-1.5 voxels, in metres), with the pressure a uniform-permeability Darcy solve gives: a
    straight line in x."""
    h, w = shape
    aperture = np.random.default_rng(seed).uniform(0.5, 1.5, shape) * 1e-5
    aperture[0, 1] = 0.0
    pressure = np.tile(inlet + (outlet - inlet) * np.arange(w) / (w - 1), (h, 1))
    return Fracture(name, aperture, pressure, inlet_pressure=inlet, outlet_pressure=outlet, voxel_size=1e-5)


@pytest.fixture
def files(tmp_path):
    """Two files: seven 6 x 9 fractures with heads 10 -> 4, and five 8 x 10 fractures with heads 2 -> 1."""
    a = tmp_path / "a.h5"
    b = tmp_path / "b.h5"
    write_fractures(a, [linear_fracture(f"s{i}", (6, 9), 10.0, 4.0, i) for i in range(7)])
    write_fractures(b, [linear_fracture(f"t{i}", (8, 10), 2.0, 1.0, 10 + i) for i in range(5)])
    return [a, b]


def refs_named(n: int) -> list[FractureRef]:
    return [FractureRef("f.h5", f"g{i:02d}", (4, 4)) for i in range(n)]


def test_split_is_stable_disjoint_and_complete():
    refs = refs_named(20)
    first = split_fractures(refs, (0.6, 0.2, 0.2), seed=3)
    again = split_fractures(list(reversed(refs)), (0.6, 0.2, 0.2), seed=3)
    assert first == again
    keys = [{r.key for r in part} for part in first]
    assert [len(k) for k in keys] == [12, 4, 4]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    assert keys[0] | keys[1] | keys[2] == {r.key for r in refs}
    other = split_fractures(refs, (0.6, 0.2, 0.2), seed=4)
    assert [{r.key for r in p} for p in other] != keys


def test_split_of_eight_gives_each_part_a_fracture():
    assert [len(p) for p in split_fractures(refs_named(8), (0.75, 0.125, 0.125), seed=0)] == [6, 1, 1]
    with pytest.raises(ValueError, match="summing to 1"):
        split_fractures(refs_named(8), (0.5, 0.2, 0.2), seed=0)


def test_batches_hold_one_shape_and_cover_every_fracture_once():
    shapes = [(6, 9)] * 7 + [(8, 10)] * 5
    sampler = SameShapeBatchSampler(range(12), shapes, batch_size=3, shuffle=True, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(12))
    assert all(len({shapes[i] for i in b}) == 1 for b in batches)
    assert len(batches) == len(sampler) == 3 + 2
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_batches_under_a_distributed_sampler_split_the_data_between_ranks():
    """What DDP does: each rank batches only its DistributedSampler share, and the shares make up the data."""
    shapes = [(6, 9)] * 8 + [(8, 10)] * 4
    per_rank = [
        list(
            SameShapeBatchSampler(DistributedSampler(range(12), 2, r, shuffle=False), shapes, 2, shuffle=True)
        )
        for r in range(2)
    ]
    flat = [sorted(i for b in batches for i in b) for batches in per_rank]
    assert not set(flat[0]) & set(flat[1]) and sorted(flat[0] + flat[1]) == list(range(12))
    assert all(len({shapes[i] for i in b}) == 1 for batches in per_rank for b in batches)
    assert len(per_rank[0]) == len(per_rank[1]) == 3  # two batches of 6 x 9 and one of 8 x 10 per rank


def test_datamodule_batches_are_dicts_with_normalised_heads(files):
    dm = FractureDataModule(files, batch_size=4, fractions=(1.0, 0.0, 0.0), seed=0)
    dm.setup("fit")
    seen = 0
    for batch in dm.train_dataloader():
        b, h, w = batch["aperture"].shape
        assert batch["pressure"].shape == batch["active"].shape == (b, h, w)
        assert batch["aperture"].dtype == batch["pressure"].dtype == torch.float64
        assert batch["active"].dtype == torch.bool and not batch["active"][:, 0, 1].any()
        # The default input: the relative log-aperture and the active mask.
        assert batch["inputs"].shape == (b, 2, h, w) and batch["inputs"].dtype == torch.float64
        torch.testing.assert_close(batch["inputs"][:, 1], batch["active"].to(torch.float64))
        # Heads 10 -> 4 and 2 -> 1 both map onto 2 -> 1: the straight line 2 - c/(W-1).
        line = 2 - torch.arange(w, dtype=torch.float64) / (w - 1)
        torch.testing.assert_close(batch["pressure"], line.expand(b, h, w))
        assert len(batch["name"]) == b
        seen += b
    assert seen == 12


def test_batches_carry_the_inputs_asked_for_and_refuse_fractures_without_walls(files, tmp_path):
    from test_inputs import make_walled_dataset

    walled = make_walled_dataset(tmp_path / "walled.h5", count=3, shape=(6, 9))
    names = ["aperture", "walls", "mid_surface"]
    dm = FractureDataModule(walled, batch_size=3, fractions=(1.0, 0.0, 0.0), inputs=names)
    (batch,) = dm.train_dataloader()
    assert batch["inputs"].shape == (3, 5, 6, 9)
    for item, name in zip(batch["inputs"], batch["name"]):
        expected = input_channels(read_fracture(walled, name.split("/")[1]), names)
        np.testing.assert_array_equal(item.numpy(), expected)
    bare = FractureDataModule(files[0], batch_size=3, fractions=(1.0, 0.0, 0.0), inputs=names)
    with pytest.raises(
        DataValidationError, match=rf"{files[0]}: group 's\d': inputs \['walls', 'mid_surface'\]"
    ):
        next(iter(bare.train_dataloader()))


def test_heads_none_keeps_file_pressure(files):
    refs = find_fractures(files[0])
    item = FractureDataset(refs, heads=None, dtype=torch.float32)[0]
    assert item["pressure"].dtype == torch.float32
    assert item["pressure"][0, 0].item() == 10.0 and item["pressure"][0, -1].item() == 4.0
    assert item["inlet_pressure"].item() == 10.0


class WhoRead(Dataset):
    """Reports, per item, the reading process and the process that opened the dataset's HDF5 handle."""

    def __init__(self, dataset: FractureDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[int, int]:
        self.dataset[i]
        return os.getpid(), self.dataset._pid


def open_hdf5_files() -> int:
    return len(h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE))


def test_forked_workers_open_their_own_handles(files, monkeypatch):
    # Every item read from the file, none kept: else the workers would inherit the parent's item 0.
    monkeypatch.setattr(datamodule, "CACHED_BYTES", 0)
    dataset = FractureDataset(find_fractures(files))
    dataset[0]  # the parent now holds a handle that fork copies into the workers
    assert open_hdf5_files() >= 1
    ctx = torch.multiprocessing.get_context("fork")
    loader = DataLoader(WhoRead(dataset), batch_size=None, num_workers=2, multiprocessing_context=ctx)
    readers = list(loader)
    assert len(readers) == 12
    assert all(pid == opener and pid != os.getpid() for pid, opener in readers)
    assert len({pid for pid, _ in readers}) == 2
    dataset.close()
    assert open_hdf5_files() == 0


def test_workers_give_the_same_batches_and_leave_no_handle_open(files):
    def collect(num_workers):
        dm = FractureDataModule(files, batch_size=2, seed=5, num_workers=num_workers)
        dm.setup()
        out = [(tuple(b["name"]), b["pressure"]) for b in dm.train_dataloader()]
        out += [(tuple(b["name"]), b["pressure"]) for b in dm.val_dataloader()]
        dm.teardown()
        return out

    serial, parallel = collect(0), collect(2)
    assert [n for n, _ in serial] == [n for n, _ in parallel]
    for (_, p0), (_, p1) in zip(serial, parallel, strict=True):
        torch.testing.assert_close(p0, p1)
    assert open_hdf5_files() == 0


def test_items_are_read_once_and_kept_up_to_the_byte_budget(files, monkeypatch):
    dataset = FractureDataset(find_fractures(files))
    reads = []
    read = dataset._read
    monkeypatch.setattr(dataset, "_read", lambda index: reads.append(index) or read(index))
    first = dataset[0]
    first["pressure"] = None  # a reader's changes to its item are its own
    first["aperture"].fill_(-1.0)
    again = dataset[0]
    assert reads == [0]
    dataset.close()
    other = FractureDataset(find_fractures(files))
    fresh = other[0]
    other.close()
    assert again.keys() == fresh.keys()
    for key, value in fresh.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(again[key], value, equal_nan=True)
    # A budget of one item's bytes keeps the first item read, and reads the others every time.
    item_bytes = sum(v.nbytes for v in fresh.values() if isinstance(v, torch.Tensor))
    monkeypatch.setattr(datamodule, "CACHED_BYTES", item_bytes)
    dataset = FractureDataset(find_fractures(files))
    reads = []
    read = dataset._read
    monkeypatch.setattr(dataset, "_read", lambda index: reads.append(index) or read(index))
    for _ in range(2):
        for index in (0, 1):
            dataset[index]
    assert reads == [0, 1, 1]
    dataset.close()


class MeanPressure(L.LightningModule):
    """Smallest model that trains on the batch contract: one scalar fitted to the active pressures."""

    def __init__(self) -> None:
        super().__init__()
        self.level = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))

    def _loss(self, batch: dict) -> torch.Tensor:
        return ((batch["pressure"] - self.level)[batch["active"]] ** 2).mean()

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), batch_size=len(batch["name"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_lightning_trainer_fits_with_two_workers(files, tmp_path):
    dm = FractureDataModule(files, batch_size=3, seed=0, num_workers=2)
    model = MeanPressure()
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    # Every normalised pressure lies in [1, 2], so the fitted level must approach their mean of 1.5.
    assert abs(model.level.item() - 1.5) < 0.1
    assert trainer.callback_metrics["val_loss"] < 0.2
