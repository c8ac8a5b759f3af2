"""A user's mistake gets one line that names the option, file, field or folder, and exit status 2; no traceback.

One table per entry point: the training config (`python train.py`'s checks, run in this process on a composed
config up to the point where they stop the run), the data files, the `flowlearn` command's arguments (its `main`
in this process) and the file system (full and read-only file systems, mounted as tmpfs when this process may
mount). A few end-to-end runs of `python train.py` and `python -m flowlearn.cli` check the same in a real process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_configs import _compose
from test_train import EMBEDDED, ROOT

from flowlearn.cli import main
from flowlearn.cli.train import run
from flowlearn.data.files import write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.errors import ConfigError
from flowlearn.threads import usable_cores
from flowlearn.training import build
from flowlearn.training.config import hydra_errors_as_one_line


def _fracture(name: str, shape: tuple[int, int] = (6, 8), aperture: float = 1e-4, **fields) -> Fracture:
    """Parallel plates ``aperture`` (m) apart with the linear pressure from inlet 2 to outlet 1."""
    pressure = np.tile(2 - np.arange(shape[1]) / (shape[1] - 1), (shape[0], 1))
    return Fracture(name, np.full(shape, aperture), pressure, voxel_size=1e-5, **fields)


def _plates(count: int, **fields) -> list[Fracture]:
    """``count`` fractures f0, f1, ... of :func:`_fracture`, each its own map (a dataset holds each map once):
    apertures 0.8e-4, 0.9e-4, 1e-4 (f2, which the bad files of the tables edit), ..."""
    return [_fracture(f"f{i}", aperture=(8 + i) * 1e-5, **fields) for i in range(count)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A good small dataset and the bad files of the tables, by name."""
    base = tmp_path_factory.mktemp("files")
    good = base / "good.h5"
    write_fractures(good, _plates(4))
    made = {name: base / f"{name}.h5" for name in ("folder", "empty", "text", "truncated", "corrupt")}
    made["good"] = good
    made["good_copy"] = shutil.copy(good, base / "good_copy.h5")
    # What flowlearn convert --layout original writes: (1, 1, H, W) float32 maps.
    write_fractures(
        made.setdefault("good_original", base / "good_original.h5"), _plates(4), layout="original"
    )
    made["folder"].mkdir()
    made["cases"] = base / "cases"
    # The same plates with their walls (flat, the aperture apart), which the inclination tensor reads.
    made["plates_walls"] = base / "plates_walls.h5"
    write_fractures(
        made["plates_walls"],
        [replace(f, bottom=np.zeros(f.shape), top=f.aperture.copy()) for f in _plates(4)],
    )
    (made["cases"] / "f0").mkdir(parents=True)  # a case folder left by an earlier `flowlearn stokes`
    made["empty"].write_bytes(b"")
    made["text"].write_text("aperture,pressure\n1,2\n")
    data = good.read_bytes()
    made["truncated"].write_bytes(data[: len(data) // 3])
    # An HDF5 signature and superblock, then zeros where the objects are.
    made["corrupt"].write_bytes(data[:512] + bytes(len(data) - 512))
    made["random_ckpt"] = base / "random.ckpt"
    made["random_ckpt"].write_bytes(np.random.default_rng(0).bytes(5000))
    checkpoint = base / "whole.ckpt"
    torch.save({"epoch": 0, "global_step": 1, "state_dict": {"w": torch.zeros(1000)}}, checkpoint)
    made["truncated_ckpt"] = base / "truncated.ckpt"
    made["truncated_ckpt"].write_bytes(checkpoint.read_bytes()[:3000])
    # 1x2 maps: an inlet and an outlet pixel, nothing between them to solve for (written past the schema's check).
    made["narrow"] = base / "narrow.h5"
    shutil.copy(good, made["narrow"])
    with h5py.File(made["narrow"], "r+") as f:
        for group in f.values():
            for name, values in (("aperture", [[1e-4, 1e-4]]), ("pressure", [[2.0, 1.0]])):
                del group[name]
                group[name] = np.array(values)
    with h5py.File(made.setdefault("original", base / "original.h5"), "w") as f:
        f.create_dataset("fracture_1/aperture_field", data=np.full((1, 1, 6, 8), 0.5))
    # A field declaring 7.3 TiB in a file of kilobytes (chunked, no chunk written): more than any machine has.
    with h5py.File(made.setdefault("original_huge", base / "original_huge.h5"), "w") as f:
        f.create_dataset(
            "fracture_1/aperture_field", shape=(1, 1, 10**6, 10**6), dtype="f8", chunks=(1, 1, 100, 100)
        )
    with h5py.File(made.setdefault("no_groups", base / "no_groups.h5"), "w") as f:
        f.attrs["schema"], f.attrs["schema_version"] = "flowlearn-fractures", 1
    with h5py.File(made.setdefault("version", base / "version.h5"), "w") as f:
        f.attrs["schema"], f.attrs["schema_version"] = "flowlearn-fractures", 7
    with h5py.File(made.setdefault("foreign", base / "foreign.h5"), "w") as f:
        f.create_group("g").create_dataset("temperature", data=np.zeros((3, 3)))
    # Stokes solves of the good fractures as flowlearn stokes -o writes them: on the voxels, on the walls at 1 and
    # 2 cells per voxel, at 2 for f0 alone, and of fractures the good file lacks.
    for name, mesh, cells, names in (
        ("stokes_voxels", "voxels", 1, "f0 f1 f2 f3"),
        ("stokes1", "walls", 1, "f0 f1 f2 f3"),
        ("stokes2", "walls", 2, "f0 f1 f2 f3"),
        ("stokes2_f0", "walls", 2, "f0"),
        ("stokes_others1", "walls", 1, "g0"),
        ("stokes_others2", "walls", 2, "g0"),
    ):
        made[name] = base / f"{name}.h5"
        record = {"stokes": {"mesh": mesh, "settings": {"cells_per_voxel": cells}}}
        write_fractures(made[name], [_fracture(n, flow_rate=1e-15, provenance=record) for n in names.split()])
    for name, edit in {
        "nan": lambda g: g["pressure"].__setitem__((2, 3), np.nan),
        "negative": lambda g: g["aperture"].__setitem__((1, 1), -1.0),
        "no_pressure": lambda g: g.__delitem__("pressure"),
        "extra_field": lambda g: g.create_dataset("velocity", data=np.zeros((6, 8))),
        "no_attr": lambda g: g.attrs.__delitem__("inlet_pressure"),
        "inlet": lambda g: g.attrs.__setitem__("inlet_pressure", 5.0),
        "axis": lambda g: g.attrs.__setitem__("flow_axis", "q"),
        # Walls the wrong way round; walls 0.8e-4 apart about an aperture of 1e-4 (two voxels off).
        "swapped_walls": lambda g: _add_walls(g, 5e-5, -5e-5),
        "wall_gap": lambda g: _add_walls(g, -5e-5, 3e-5),
        "walled": lambda g: _add_walls(g, -5e-5, 5e-5),
        # Walls that touch all across column 4: no path from the inlet to the outlet.
        "blocked": lambda g: g["aperture"].__setitem__((slice(None), 4), 0.0),
        # Attributes of the wrong kind or out of range.
        "voxel_text": lambda g: g.attrs.__setitem__("voxel_size", "ten microns"),
        "voxel_array": lambda g: g.attrs.__setitem__("voxel_size", [1e-5, 2e-5]),
        "voxel_zero": lambda g: g.attrs.__setitem__("voxel_size", 0.0),
        "voxel_negative": lambda g: g.attrs.__setitem__("voxel_size", -1e-5),
        "voxel_inf": lambda g: g.attrs.__setitem__("voxel_size", np.inf),
        # Apertures in voxels (10 each) under a voxel size in metres: 10 m gaps on a map 8e-5 m long.
        "aperture_in_voxels": lambda g: g["aperture"].__setitem__(Ellipsis, 10.0),
        "inlet_text": lambda g: g.attrs.__setitem__("inlet_pressure", "two"),
        "inlet_nan": lambda g: g.attrs.__setitem__("inlet_pressure", np.nan),
        "flow_rate_text": lambda g: g.attrs.__setitem__("flow_rate", "big"),
        # An interior pressure in another unit than the inlet and outlet's.
        "wild_pressure": lambda g: g["pressure"].__setitem__((3, 4), 1e6),
        "provenance_text": lambda g: g.attrs.__setitem__("provenance", "{not json"),
        "provenance_list": lambda g: g.attrs.__setitem__("provenance", "[1, 2]"),
        # One pixel across the flow: no slope between pixels.
        "one_row": _keep_first_row,
        # A version that is no integer; a mask of another dtype than the schema's bool.
        "version_text": lambda g: g.file.attrs.__setitem__("schema_version", "one"),
        "version_half": lambda g: g.file.attrs.__setitem__("schema_version", 1.5),
        "float_mask": lambda g: g.create_dataset("mask", data=np.ones((6, 8))),
        "int_mask": lambda g: g.create_dataset("mask", data=np.ones((6, 8), dtype=np.int8)),
        "huge": _declare_huge_aperture,
        # f1's map again under f2's name.
        "twins": lambda g: g["aperture"].__setitem__(Ellipsis, 9e-5),
    }.items():
        made[name] = base / f"{name}.h5"
        shutil.copy(good, made[name])
        with h5py.File(made[name], "r+") as f:
            edit(f["f2"])
    return made


def _keep_first_row(group: h5py.Group) -> None:
    for name in ("aperture", "pressure"):
        row = group[name][:1]
        del group[name]
        group[name] = row


def _declare_huge_aperture(group: h5py.Group) -> None:
    """An aperture of 10^6 x 10^6 float64 (7.3 TiB) that takes no room in the file: chunked, no chunk written."""
    del group["aperture"]
    group.create_dataset("aperture", shape=(10**6, 10**6), dtype="f8", chunks=(100, 100))


def _add_walls(group: h5py.Group, bottom: float, top: float) -> None:
    for name, height in (("bottom", bottom), ("top", top)):
        group.create_dataset(name, data=np.full(group["aperture"].shape, height))


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory) -> Path:
    """A directory with every output a finished run has, none of them real: for checks that come first."""
    run_dir = tmp_path_factory.mktemp("fake_run")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run_dir / "predictions.h5").write_bytes(b"")
    (run_dir / "metrics.csv").write_text("this is,not\na metrics,file\n")
    return run_dir


def _one_line(status: int, err: str, *names: str) -> None:
    """The common assertion: exit status 2, one line on stderr naming every one of ``names``."""
    assert status == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for name in names:
        assert name in err, (name, err)


# ------------------------------------------------------------------------------------------------- the config

CONFIG_ROWS = [
    ("seed=abc", "seed must be an integer in [0, 4294967295], got 'abc'"),
    ("seed=-1", "seed must be an integer in [0, 4294967295], got -1"),
    ("seed=1.5", "seed must be an integer"),
    # null for a key whose default is a value: a traceback from numpy, torch or Lightning, or a silent default.
    ("seed=null", "seed is null: give it a value (configs/ has its default)"),
    ("trainer.max_epochs=null", "trainer.max_epochs is null: give it a value"),
    ("loss.pressure=null", "loss.pressure is null: give it a value"),
    ("model.inputs=null", "model.inputs is null: give it a value"),
    ("solver.reuse=null", "solver.reuse is null: give it a value"),
    ("data.seed=-1", "data.seed must be an integer in [0, 4294967295], got -1"),
    ("data.seed=abc", "data.seed must be an integer in [0, 4294967295], got 'abc'"),
    # A group removed: the run cannot be built without it.
    ("~logger", "logger: a run needs one (it was removed or set to null); choose one of configs/logger/"),
    ("~callbacks", "callbacks: a run needs one (it was removed or set to null)"),
    # A misspelt loss key was ignored.
    (
        "+loss.flow_rate_weigth=0.1",
        "loss.flow_rate_weigth is not a loss setting: use flow_rate_weight, pressure",
    ),
    # 1,000 workers hung the machine.
    (
        f"data.num_workers={usable_cores() + 1}",
        f"data.num_workers must be an integer in [0, {usable_cores()}], got {usable_cores() + 1}",
    ),
    # Lightning's own checks of these were tracebacks (a division by zero for 0) or several lines.
    (
        "+trainer.val_check_interval=0",
        "trainer.val_check_interval must be a positive integer (batches) or a fraction in (0, 1], got 0",
    ),
    ("+trainer.val_check_interval=2.0", "trainer.val_check_interval must be a positive integer"),
    (
        "+trainer.max_time=-1",
        "trainer.max_time must be a time longer than 0, as DD:HH:MM:SS (e.g. 00:12:00:00)",
    ),
    ("+trainer.max_time=00:00:00:00", "trainer.max_time must be a time longer than 0, as DD:HH:MM:SS"),
    ("+trainer.max_time={minutes:0}", "trainer.max_time must be a time longer than 0"),
    ("+trainer.max_time={fortnights:1}", "trainer.max_time must be a time longer than 0"),
    (
        "+trainer.limit_val_batches=-1",
        "trainer.limit_val_batches must be an integer >= 0 (batches) or a fraction",
    ),
    ("trainer.accelerator=tpu", "trainer.accelerator must be cpu or auto"),
    (
        "+callbacks.extra=5",
        "callbacks.extra must be a callback's settings with a _target_, or null to leave it out",
    ),
    ("+callbacks.extra.every_n_epochs=1", "callbacks.extra must be a callback's settings with a _target_"),
    (
        "callbacks.model_checkpoint.save_last=maybe",
        "callbacks.model_checkpoint.save_last must be true or false",
    ),
    ("+optimizer.amsgrad=maybe", "optimizer.amsgrad must be true or false, got 'maybe'"),
    # Empty paths: the current directory, where the checkpoints were written.
    ("callbacks.model_checkpoint.dirpath=''", "callbacks.model_checkpoint.dirpath is empty: give a folder"),
    ("data.path=''", "data.path is empty: give a file"),
    ("ckpt_path=''", "ckpt_path is empty: give a checkpoint"),
    # Refused after two processes had started, the error printed twice.
    (
        "trainer=ddp optimizer=gauss_newton",
        "optimizer=gauss_newton runs in one process: its steps need the residuals of the whole batch, which "
        "trainer.devices=2 processes would split; use trainer=default",
    ),
    # Without Julia (or juliacall): one line saying how to get it, before juliacall could warn or download anything.
    ("solver=julia", "solver=julia needs Julia"),
    ("seed=4294967296", "seed must be an integer in [0, 4294967295], got 4294967296"),
    ("data.batch_size=2.5", "data.batch_size must be a positive integer, got 2.5"),
    ("data.batch_size=0", "data.batch_size must be a positive integer, got 0"),
    ("data.batch_size=abc", "data.batch_size must be a positive integer, got 'abc'"),
    ("data.max_fractures=0", "data.max_fractures must be a positive integer, got 0"),
    ("data.num_workers=-1", "data.num_workers must be an integer in [0, "),
    ("data.slope_smoothing=-1", "data.slope_smoothing must be a number in [0, 100), got -1"),
    ("data.slope_smoothing=1000", "data.slope_smoothing must be a number in [0, 100), got 1000"),
    ("data.slope_smoothing=abc", "data.slope_smoothing must be a number in [0, 100), got 'abc'"),
    ("data.slope_smoothing=nan", "data.slope_smoothing must be a number in [0, 100), got nan"),
    ("data.fractions=[0.5,0.5]", "data.fractions must be three non-negative numbers"),
    ("data.fractions=[0.5,0.3,0.3]", "data.fractions must sum to 1"),
    ("data.fractions=[0,0.5,0.5]", "with train > 0"),
    ("data.fractions=[a,b,c]", "data.fractions must be three non-negative numbers"),
    # A 43-line traceback of the split's ValueError.
    (
        "data.fractions=[0.01,0.01,0.98]",
        "data.fractions: 4 fractures are too few for the split fractions (0.01, 0.01, 0.98): validation takes 1 "
        "and test 4 (each part with a fraction > 0 at least one), which leaves 0 for training; raise the training "
        "fraction, e.g. data.fractions=[0.75,0.125,0.125]",
    ),
    (
        "data.heads=[1,1]",
        "data.heads must be two different numbers (inlet, outlet) in [-1e+12, 1e+12] or null, got [1, 1]",
    ),
    (
        "data.heads=[1e300,-1e300]",
        "data.heads must be two different numbers (inlet, outlet) in [-1e+12, 1e+12]",
    ),
    ("data.heads=[2]", "data.heads must be two different numbers"),
    ("data.heads=[x,1]", "data.heads must be two different numbers"),
    ("data.path=[]", "data.path is an empty list"),
    ("model.depth=0", "model.depth must be a positive integer, got 0"),
    ("model.depth=-3", "model.depth must be a positive integer, got -3"),
    ("model.channels=0", "model.channels must be a positive integer, got 0"),
    ("model.channels=1.5", "model.channels must be a positive integer, got 1.5"),
    ("model.exact_on_plates=maybe", "model.exact_on_plates must be true or false, got 'maybe'"),
    ("model.exact_on_plates=1", "model.exact_on_plates must be true or false, got 1"),
    ("model.kernel_size=4", "model.kernel_size must be a positive odd integer, got 4"),
    ("model.kernel_size=abc", "model.kernel_size must be a positive odd integer"),
    ("model.inputs=[aperture,curvature]", "model.inputs must be a list of distinct inputs from ['aperture',"),
    ("model.inputs=[]", "model.inputs must be a list of distinct inputs from"),
    ("model.inputs=aperture", "model.inputs must be a list of distinct inputs from ['aperture',"),
    ("model.inputs=[walls,walls]", "model.inputs must be a list of distinct inputs from"),
    ("model=unet model.levels=0", "model.levels must be a positive integer, got 0"),
    # Refused before the network is built (the good file's maps are 6x8): a 201-wide kernel had taken 13 GB, ten
    # levels of doubled channels 82 GB of weights.
    (
        "model.kernel_size=201",
        "model.kernel_size must be at most 15 on these maps (beyond 2 x 8 - 1 a kernel",
    ),
    ("model=unet model.levels=10", "model.levels must be at most 3 on these maps (halving the shortest side"),
    # Built layer by layer for its memory estimate, 100,000 layers had hung there.
    ("model.depth=100000", "model.depth must be at most"),
    ("model.depth=100000", "(beyond it the stack of 5-pixel kernels sees past the longest training map"),
    (
        "model.channels=100000",
        "the model (model.channels=100000, model.depth=3, model.kernel_size=5) needs about",
    ),
    ("model=unet model.kernel_size=2", "model.kernel_size must be a positive odd integer, got 2"),
    ("model=pixel model.inputs=[aperture]", "Could not override 'model.inputs'"),
    ("law=exponent law.initial_exponent=abc", "law.initial_exponent must be a number"),
    *(
        (
            f"law=exponent law.initial_exponent={value}",
            f"law.initial_exponent must be a number in (0, 10] (the law's exponent is 2·relu(w), which has no gradient at w <= 0: training could never move it), got {value}",
        )
        for value in (0, -1, 1e300)
    ),
    ("law=exponent law.initial_exponent=null", "law.initial_exponent is null: give it a value"),
    ("logger.name=123", "logger.name must be text (a folder name), got 123"),
    ("+optimizer.betas=abc", "optimizer.betas must be two numbers in [0, 1), got 'abc'"),
    (
        "+callbacks.progress_bar.refresh_rate=abc",
        "callbacks.progress_bar.refresh_rate must be an integer >= 0",
    ),
    ("solver.rtol=-1", "solver.rtol must be a finite number > 0, got -1"),
    ("solver.rtol=abc", "solver.rtol must be a finite number > 0, got 'abc'"),
    ("+solver.max_iter=0", "solver.max_iter must be a positive integer, got 0"),
    ("+solver.max_change=1.5", "solver.max_change must be a number in (0, 1), got 1.5"),
    ("+solver.reuse_budget=-5", "solver.reuse_budget must be an integer >= 0, got -5"),
    ("+solver.multigrid_unknowns=-1", "solver.multigrid_unknowns must be an integer >= 0, got -1"),
    ("+solver.memory_fraction=0", "solver.memory_fraction must be a number in (0, 1], got 0"),
    ("optimizer.lr=-0.001", "optimizer.lr must be a finite number > 0, got -0.001"),
    ("optimizer.lr=0", "optimizer.lr must be a finite number > 0, got 0"),
    ("optimizer.lr=abc", "optimizer.lr must be a finite number > 0, got 'abc'"),
    ("optimizer.lr=inf", "optimizer.lr must be a finite number > 0, got inf"),
    ("solver.rtol=inf", "solver.rtol must be a finite number > 0, got inf"),
    ("optimizer=sgd optimizer.momentum=1.5", "optimizer.momentum must be a number in [0, 1), got 1.5"),
    ("optimizer=sgd optimizer.momentum=-0.1", "optimizer.momentum must be a number in [0, 1)"),
    ("loss.pressure=rmse", "loss.pressure must be one of ['mse', 'departure'], got 'rmse'"),
    ("loss.flow_rate_weight=-1", "loss.flow_rate_weight must be a number in [0, 1e+06), got -1"),
    ("loss.flow_rate_weight=1e300", "loss.flow_rate_weight must be a number in [0, 1e+06), got 1e+300"),
    ("solver.reuse=maybe", "solver.reuse must be true or false, got 'maybe'"),
    (
        "optimizer=gauss_newton optimizer.damping=1e300",
        "optimizer.damping must be a number in (0, 1e+10), got 1e+300",
    ),
    (
        "optimizer=gauss_newton optimizer.cg_iterations=100000000",
        "optimizer.cg_iterations must be an integer in [1, 1000], got 100000000",
    ),
    (
        "optimizer=gauss_newton optimizer.cg_tolerance=1e-300",
        "optimizer.cg_tolerance must be a number in [1e-15, 1), got 1e-300",
    ),
    ("+optimizer.betas=[1.5,0.999]", "optimizer.betas must be two numbers in [0, 1), got [1.5, 0.999]"),
    ("+optimizer.eps=-1", "optimizer: Invalid epsilon value: -1"),
    ("+optimizer.foo=1", "optimizer: Adam.__init__() got an unexpected keyword argument 'foo'"),
    (
        "callbacks.model_checkpoint.monitor=val/loss",
        "callbacks.model_checkpoint.monitor must be one of ['train/loss', 'train/mse',",
    ),
    ("callbacks.model_checkpoint.mode=avg", "callbacks.model_checkpoint.mode must be min or max, got 'avg'"),
    # The good file's fractures carry no flow rate; 2 of its 4 fall in the training split.
    (
        "loss.flow_rate_weight=0.01",
        "loss.flow_rate_weight=0.01 trains on flow rates, but 2 of the 2 training",
    ),
    ("trainer.max_epochs=abc", "trainer.max_epochs must be a positive integer, got 'abc'"),
    ("trainer.max_epochs=0", "trainer.max_epochs must be a positive integer, got 0"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs must be a positive integer, got 2.5"),
    ("trainer.devices=0", "trainer.devices must be a positive integer or auto, got 0"),
    (
        "trainer=ddp trainer.devices=4096",
        "trainer.devices=4096 starts 4096 training processes on the CPU, more than the",
    ),
    # Lightning's auto runs on the CPU where there is no GPU: 8 processes shared 2 cores.
    pytest.param(
        "trainer.accelerator=auto trainer.devices=4096",
        "trainer.devices=4096 starts 4096 training processes on the CPU, more than the",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present"),
    ),
    # Lightning's mixed and 16-bit precisions would silently leave the float64 model as it is.
    (
        "trainer.precision=bf16-mixed",
        "trainer.precision must be one of ['64-true', '32-true'] (the correction",
    ),
    ("trainer.precision=16", "trainer.precision must be one of ['64-true', '32-true']"),
    ("trainer.precision=64-false", "trainer.precision must be one of ['64-true', '32-true']"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps must be a positive integer"),
    ("trainer.check_val_every_n_epoch=-1", "trainer.check_val_every_n_epoch must be a positive integer"),
    (
        "+trainer.accumulate_grad_batches=0",
        "trainer.accumulate_grad_batches must be a positive integer, got 0",
    ),
    ("+trainer.min_epochs=-3", "trainer.min_epochs must be an integer >= 0, got -3"),
    ("+trainer.num_sanity_val_steps=-5", "trainer.num_sanity_val_steps must be an integer >= -1, got -5"),
    ("+trainer.gradient_clip_val=-1", "trainer.gradient_clip_val must be a finite number >= 0, got -1"),
    ("trainer.deterministic=maybe", "trainer.deterministic must be true or false or warn, got 'maybe'"),
    (
        "+trainer.max_steps=0",
        "trainer.max_steps must be -1 (no limit) or a positive integer (0 would train nothing)",
    ),
    (
        "+trainer.limit_train_batches=0",
        "trainer.limit_train_batches must be a positive integer (batches) or a fraction",
    ),
    (
        "+trainer.limit_train_batches=1.5",
        "trainer.limit_train_batches must be a positive integer (batches) or a fraction",
    ),
    ("+trainer.strategy=foo", "trainer: You selected an invalid strategy name: `strategy='foo'`"),
    (
        "+trainer.max_time=abc",
        "trainer.max_time must be a time longer than 0, as DD:HH:MM:SS (e.g. 00:12:00:00) or a",
    ),
    ("solver.name=foo", "solver: unknown solver 'foo'; choose one of"),
    (
        "model._target_=flowlearn.models.Foo",
        "model._target_: flowlearn.models.Foo names no class of this flowlearn",
    ),
    ("+logger.flush_logs_every_n_steps=0", "logger.flush_logs_every_n_steps must be a positive integer"),
    (
        "callbacks.model_checkpoint.save_top_k=-2",
        "callbacks.model_checkpoint.save_top_k must be an integer >= -1",
    ),
    (
        "callbacks.model_checkpoint.every_n_epochs=0",
        "callbacks.model_checkpoint.every_n_epochs must be a positive",
    ),
    ("callbacks.figures.every_n_epochs=abc", "callbacks.figures.every_n_epochs must be an integer >= 0"),
    ("callbacks.figures.max_overhead=-1", "callbacks.figures.max_overhead must be a finite number >= 0"),
    # Hydra's own errors: misspelt keys, unknown options, malformed overrides.
    ("optimizer.lrr=0.1", "Could not override 'optimizer.lrr'"),
    ("solver=nonexistent", "Could not find 'solver/nonexistent'"),
    ("model=resnet", "Could not find 'model/resnet'"),
    ("seed=[1", "override 'seed=[1'"),
    ("data.batch_size=", "data.batch_size"),
    ("optimizer.lr=nan", "optimizer.lr"),
    ("seed=${nope}", "Interpolation key 'nope' not found full_key: seed"),
    ("solver.rtol=0.5", "solver.rtol"),
    pytest.param(
        "solver=gpu",
        "solver=gpu needs a CUDA GPU",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present"),
    ),
    pytest.param(
        "trainer.accelerator=gpu trainer.devices=4096",
        "trainer.devices=4096 asks for 4096 GPUs; this machine has",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    ),
    pytest.param(
        "trainer.accelerator=auto trainer.devices=4096",
        "trainer.devices=4096 asks for 4096 GPUs; this machine has",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    ),
]

# Overrides that point at a file: {name} is a file of the `files` fixture, {tmp} a fresh folder.
FILE_ROWS = [
    ("data.path={tmp}/missing.h5", "data.path: file not found: {tmp}/missing.h5"),
    ("data.path={folder}", "data.path: {folder} is a directory, not a file"),
    ("data.path=[{good},{tmp}/missing.h5]", "data.path: file not found: {tmp}/missing.h5"),
    ("data.path=[{good},{good}]", "data.path: {good} and {good} share the file name 'good'"),
    (
        "data.path=[{good},{good_copy}]",
        "{good_copy}: group 'f0' holds the same map as {good}: group 'f0' (4 fracture(s) in all repeat an earlier one)",
    ),
    # A copy in float32, as the original layout keeps it, had passed.
    (
        "data.path=[{good},{good_original}]",
        "{good_original}: group 'f0' holds the same map as {good}: group 'f0' (4 fracture(s) in all repeat an",
    ),
    (
        "data.path={twins}",
        "{twins}: group 'f2' holds the same map as {twins}: group 'f1' (1 fracture(s) in all",
    ),
    ("data.path={empty}", "{empty}: empty file (0 bytes)"),
    ("data.path={text}", "{text}: not an HDF5 file"),
    ("data.path={truncated}", "{truncated}"),
    ("data.path={corrupt}", "{corrupt}"),
    ("data.path={no_groups}", "{no_groups}: contains no fracture groups"),
    ("data.path={version}", "{version}: schema_version 7 is not supported"),
    ("data.path={foreign}", "{foreign}: neither the flowlearn layout"),
    ("data.path={nan}", "{nan}: group 'f2': field 'pressure': 1 non-finite"),
    ("data.path={negative}", "{negative}: group 'f2': field 'aperture': 1 negative apertures"),
    (
        "data.path={no_pressure}",
        "{no_pressure}: group 'f2': field 'pressure': missing; training needs the reference pressure",
    ),
    ("data.path={extra_field}", "{extra_field}: group 'f2': field 'velocity': unexpected field"),
    ("data.path={no_attr}", "{no_attr}: group 'f2': missing attribute 'inlet_pressure'"),
    ("data.path={inlet}", "{inlet}: group 'f2': field 'pressure': inlet face"),
    ("data.path={axis}", "{axis}: group 'f2': attribute 'flow_axis' is 'q'"),
    (
        "data.path={swapped_walls}",
        "{swapped_walls}: group 'f2': field 'top': the top wall lies below the bottom wall",
    ),
    (
        "data.path={wall_gap}",
        "{wall_gap}: group 'f2': field 'aperture': 48 pixel(s) differ from the walls' separation max(top - bottom, "
        "0) by more than 1 voxel (1e-05 m); the first is (0, 0): aperture 0.0001 m, walls 8e-05 m apart",
    ),
    (
        "data.path={narrow}",
        "{narrow}: group 'f0': field 'aperture': shape (1, 2) has 2 pixel(s) along the flow axis 'x'; at least 3",
    ),
    (
        "data.path={voxel_text}",
        "{voxel_text}: group 'f2': attribute 'voxel_size' is 'ten microns'; expected one number",
    ),
    (
        "data.path={voxel_array}",
        "{voxel_array}: group 'f2': attribute 'voxel_size' is array([1.e-05, 2.e-05])",
    ),
    *(
        (
            f"data.path={{{name}}}",
            f"{{{name}}}: group 'f2': attribute 'voxel_size' is {value}; expected a number in [1e-09, 1] (metres "
            "per voxel), or NaN where it is unknown",
        )
        for name, value in (("voxel_zero", "0.0"), ("voxel_negative", "-1e-05"), ("voxel_inf", "inf"))
    ),
    (
        "data.path={aperture_in_voxels}",
        "{aperture_in_voxels}: group 'f2': field 'aperture': 48 aperture(s) of at least 10 times the map's longest "
        "side, 8e-05 m (8 pixels of voxel_size 1e-05 m); the first is 10 at (0, 0). Apertures are in metres: "
        "apertures in voxels need multiplying by voxel_size",
    ),
    (
        "data.path={inlet_text}",
        "{inlet_text}: group 'f2': attribute 'inlet_pressure' is 'two'; expected one number",
    ),
    (
        "data.path={inlet_nan}",
        "{inlet_nan}: group 'f2': attribute 'inlet_pressure' is nan; expected a finite number",
    ),
    (
        "data.path={flow_rate_text}",
        "{flow_rate_text}: group 'f2': attribute 'flow_rate' is 'big'; expected one",
    ),
    (
        "data.path={wild_pressure}",
        "{wild_pressure}: group 'f2': field 'pressure': 1 active pixel(s) lie outside the range [1, 2] of the outlet "
        "and inlet pressures by more than 0.5 x |inlet - outlet|; the first is (3, 4): 1e+06",
    ),
    (
        "data.path={provenance_text}",
        "{provenance_text}: group 'f2': attribute 'provenance' is not a JSON text",
    ),
    (
        "data.path={provenance_list}",
        "{provenance_list}: group 'f2': attribute 'provenance' is JSON list; expected an object",
    ),
    (
        "data.path={one_row}",
        "{one_row}: group 'f2': field 'aperture': shape (1, 8) has 1 pixel along axis 0; a map needs at least 2",
    ),
    ("ckpt_path={tmp}/missing.ckpt", "ckpt_path: checkpoint not found: {tmp}/missing.ckpt"),
    ("ckpt_path={folder}", "ckpt_path: {folder} is a directory, not a checkpoint"),
    (
        "data.path={good} model.inputs=[aperture,mid_surface]",
        "{good}: group 'f0': model.inputs asks for ['mid_surface'], which need the walls (fields 'bottom' and 'top')",
    ),
    (
        "data.path={good} model=unet model.inputs=[walls]",
        "{good}: group 'f0': model.inputs asks for ['walls'], which need the walls",
    ),
    # 2 mean apertures of 8 voxels on 6x8 maps: a Gaussian 16 pixels wide, wider than the map.
    (
        "data.path={plates_walls} data.slope_smoothing=2",
        "data.slope_smoothing: 2 mean apertures is a Gaussian 16 pixels wide on {plates_walls}: group 'f0' (a 6x8 map): "
        "wider than the map; give at most 0.75 there, or 0",
    ),
]


def _train_checks(tmp_path: Path, capsys, monkeypatch, overrides: list[str]) -> tuple[int, str]:
    """What `python train.py <overrides>` does up to its checks, in this process: (exit status, stderr)."""
    # hydra_errors_as_one_line sets this for its process; keep it out of the other tests.
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    run_dir = tmp_path / "run"
    try:
        with hydra_errors_as_one_line():
            # Short, should a row's check be missing: the run then trains one epoch and the row fails.
            run(_compose(run_dir, "trainer.max_epochs=1", *overrides))
    except SystemExit as exit:
        return exit.code, capsys.readouterr().err
    return 0, capsys.readouterr().err


@pytest.mark.parametrize("overrides, message", CONFIG_ROWS)
def test_config_mistakes(files, tmp_path, capsys, monkeypatch, overrides, message):
    status, err = _train_checks(
        tmp_path, capsys, monkeypatch, [f"data.path={files['good']}", *overrides.split()]
    )
    _one_line(status, err, message)
    assert not (tmp_path / "run" / "checkpoints").exists()


ENGINE_ROWS = [
    ("superlu", {"max_iter": 0}, "max_iter must be a positive integer, got 0"),
    ("superlu", {"max_change": 0}, "max_change must lie in (0, 1), got 0"),
    ("superlu", {"reuse_budget": -1}, "reuse_budget must be None or an integer >= 0, got -1"),
    (
        "superlu",
        {"multigrid_unknowns": 2.5},
        "multigrid_unknowns must be None or an integer >= 0, got 2.5",
    ),
]


@pytest.mark.parametrize("name, options, message", ENGINE_ROWS)
def test_engine_options_out_of_range(name, options, message):
    # The Python API's check of what the config rows above check for train.py.
    from flowlearn.engines import make_engine

    with pytest.raises(ValueError, match=re.escape(message)):
        make_engine(name, **options)


@pytest.mark.parametrize("one_off", ["yes", 1, None])
def test_a_one_off_flag_that_is_not_a_bool(one_off):
    from flowlearn import DarcyProblem, SolveInputError, solve_pressure

    with pytest.raises(SolveInputError, match=re.escape(f"one_off must be True or False, got {one_off!r}")):
        solve_pressure(torch.zeros(6, 8, dtype=torch.float64), DarcyProblem.fracture((6, 8)), one_off=one_off)


@pytest.mark.parametrize("pixels", [0, -5, 2.5, "many"])
def test_the_problem_cache_refuses_a_pixel_budget_out_of_range(pixels):
    from flowlearn.training.batches import FractureProblems

    with pytest.raises(
        ValueError, match=re.escape(f"cache_pixels must be a positive integer, got {pixels!r}")
    ):
        FractureProblems(pixels)


@pytest.mark.parametrize("override, message", FILE_ROWS)
def test_data_and_checkpoint_file_mistakes(files, tmp_path, capsys, monkeypatch, override, message):
    names = {name: str(path) for name, path in files.items()} | {"tmp": str(tmp_path)}
    status, err = _train_checks(tmp_path, capsys, monkeypatch, override.format(**names).split())
    _one_line(status, err, message.format(**names))


def _barrier(tmp_path: Path) -> Path:
    """A fracture with a zero-aperture barrier across its width: no path from the inlet to the outlet."""
    fractures = [_fracture(f"f{i}") for i in range(4)]
    fractures[0].aperture[:, 4] = 0.0
    path = tmp_path / "barrier.h5"
    write_fractures(path, fractures)
    return path


def test_an_inlet_cut_off_from_the_outlet(tmp_path, capsys, monkeypatch):
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={_barrier(tmp_path)}"])
    _one_line(status, err, "inlet")


@pytest.mark.parametrize("lr", ["0.3", "1e3"])
def test_a_diverging_run_on_the_embedded_dataset(tmp_path, capsys, monkeypatch, lr):
    # The model's conductivities leave float64 within the first steps; they had crashed multigrid's coarsest level
    # (64x64 maps: one-off solves go through multigrid) with an IndexError.
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"optimizer.lr={lr}", "~callbacks.figures"])
    _one_line(status, err, "training diverged at epoch 0", f"lower optimizer.lr (now {float(lr):g})")


def test_a_diverging_pixel_model_names_the_learning_rate(tmp_path):
    # One fracture of the embedded dataset: its loss rose 465 times above the first epoch's and stayed below the
    # thousandfold jump checked before; the run had written predictions.h5 and ended with status 0 (or, with a
    # flow rate of -5e-25, with an error about that file).
    from flowlearn.data.files import list_fractures, read_fracture

    one = tmp_path / "one.h5"
    write_fractures(one, [read_fracture(EMBEDDED, list_fractures(EMBEDDED)[1].name)])
    run_dir = tmp_path / "run"
    result = _process(
        "train.py", f"hydra.run.dir={run_dir}", f"data.path={one}", "data.fractions=[1,0,0]", "model=pixel",
        "optimizer.lr=30", "trainer.max_epochs=2", "~callbacks.figures",
    )  # fmt: skip
    _one_line(
        result.returncode,
        result.stderr,
        "training diverged at epoch 1",
        "times the first epoch's",
        "lower optimizer.lr (now 30)",
    )
    assert not (run_dir / "predictions.h5").exists()
    # The progress bar's line is ended: on a terminal the error had been printed after the bar's last numbers.
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert "Epoch 1" in lines[-1] and result.stdout.endswith("\n")


def test_a_flow_rate_against_the_head_drop_is_no_solution(tmp_path):
    # A band of W = e^-80 across the map: the solve keeps its heads within [1, 2], but the outlet flux is round-off
    # of the wrong sign (-4.5e-28), which predictions.h5 could not hold.
    from flowlearn.data.datamodule import FractureDataset, find_fractures
    from flowlearn.errors import SolutionError
    from flowlearn.models import PixelCorrection
    from flowlearn.models.laws import LocalCubicLaw
    from flowlearn.training.module import FractureFlowModule
    from flowlearn.training.predictions import as_batch

    path = tmp_path / "plates.h5"
    write_fractures(path, [_fracture("f0", flow_rate=1e-12)])
    correction = PixelCorrection((6, 8))
    with torch.no_grad():
        correction.raw[:, 3] = -80.0
    module = FractureFlowModule(correction, LocalCubicLaw())
    batch = as_batch(FractureDataset(find_fractures(path), (2.0, 1.0))[0], torch.device("cpu"))
    with pytest.raises(
        SolutionError, match=r"fracture plates/f0: the outlet flow rate is -[\d.]+e-\d+, against a head"
    ):
        module(batch)


def test_a_fit_at_round_off_is_not_taken_for_divergence(tmp_path, capsys, monkeypatch):
    # Uniform gaps, which the LCL and the pixel model fit exactly: the loss wanders between 1e-30 and 1e-24, which
    # stopped the run as "diverged" (a million times its lowest).
    plates = tmp_path / "plates.h5"
    write_fractures(plates, [_fracture("plates")])
    overrides = [
        f"data.path={plates}",
        "model=pixel",
        "law=lcl",
        "data.fractions=[1,0,0]",
        "~callbacks.figures",
    ]
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [*overrides, "trainer.max_epochs=5"])
    assert status == 0 and "diverged" not in err, err


def test_a_network_beyond_the_memory_names_the_largest_kernel_that_fits(tmp_path, capsys, monkeypatch):
    # 1 GiB available, whatever this machine has: a kernel of 31 on 64x64 maps in batches of 4 needs about 7 GiB.
    monkeypatch.setattr(build, "available_memory", lambda: 2**30)
    path = _big_dataset(tmp_path / "big.h5")
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={path}", "model.kernel_size=31"])
    _one_line(status, err, "more than fits within the 1 GiB this process has available, in batches of 4")
    largest = int(re.search(r"model.kernel_size up to (\d+) would fit", err)[1])
    model = OmegaConf.load(ROOT / "configs" / "model" / "cnn.yaml")
    fits = [
        build.training_bytes(model, 2, [(64, 64)], 4, kernel_size=k) <= 2**30 for k in (largest, largest + 2)
    ]
    assert fits == [True, False]


def test_the_memory_check_counts_the_fractures_a_batch_can_hold(tmp_path, monkeypatch):
    # data.batch_size=100000 on 6 training fractures had been refused as needing 4.57e3 GiB: a batch holds 6.
    from flowlearn.data.datamodule import find_fractures
    from flowlearn.models.laws import LocalCubicLaw

    refs = find_fractures(_big_dataset(tmp_path / "big.h5"))[:6]
    model = OmegaConf.load(ROOT / "configs" / "model" / "cnn.yaml")
    assert build.build_correction(model, LocalCubicLaw(), refs, batch_size=100000) is not None
    # Memory for 5 of them, not 6: still refused, naming the batch it can hold.
    monkeypatch.setattr(build, "available_memory", lambda: build.training_bytes(model, 2, [(64, 64)], 5))
    with pytest.raises(
        ConfigError, match=r"more than fits within the .* GiB this process has available, in batches of 6;"
    ):
        build.build_correction(model, LocalCubicLaw(), refs, batch_size=100000)


# f3 is a training fracture of _big_dataset, f1 a test fracture, solved only after training: the data's fault all
# the same, not the training's.
# The cubic law's conductivity Ap^3/12 of an aperture of 1e-300 m is e^-2074.81, of 1e300 m e^2069.84. A numpy
# warning (an overflow on the way) would print lines of its own before the error's.
@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize(
    "fracture, aperture, log_k",
    [("f3", 1e-300, "-2074.81"), ("f1", 1e-300, "-2074.81"), ("f3", 1e300, "2069.84")],
)
def test_apertures_whose_conductivities_are_beyond_float64(
    tmp_path, capsys, monkeypatch, fracture, aperture, log_k
):
    path = _big_dataset(tmp_path / "big.h5")
    with h5py.File(path, "r+") as f:
        f[fracture]["aperture"][...] = aperture
        if aperture > 1:  # with its voxel size known, the file is refused first: apertures in another unit
            f[fracture].attrs["voxel_size"] = np.nan
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={path}", "~callbacks.figures"])
    _one_line(
        status,
        err,
        # The law's tensor (log K along x) or a baseline's scalar (log K), whichever meets it first.
        f"error: fracture big/{fracture}: log K",
        f"is {log_k} at pixel (0, 0) of batch item 0, outside [",
    )


# ---------------------------------------------------------------------------------------- the flowlearn command


def _flowlearn(capsys, *argv: str) -> tuple[int, str]:
    """`flowlearn <argv>` in this process: (exit status, stderr)."""
    try:
        status = main(list(argv))
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    return status, capsys.readouterr().err


# Thread and process counts are bounded by the cores; one more is refused, before anything runs.
CORES = usable_cores()
TOO_MANY = str(CORES + 1)

GENERATE_ROWS = [
    (["--count", "-1"], "--count must be an integer in [1, 1000000], got -1"),
    (["--count", "0"], "--count must be an integer in [1, 1000000], got 0"),
    (["--count", "abc"], "argument --count: invalid int value: 'abc'"),
    # The rows of a bound refused before --threads, which is refused next: where the bound were missing, the row
    # would fail at once, not generate (10^12 fractures had filled the memory with their indices).
    (
        ["--count", "1000000000000", "--threads", TOO_MANY],
        "--count must be an integer in [1, 1000000], got 1000000000000",
    ),
    (
        ["--count", "1000001", "--threads", TOO_MANY],
        "--count must be an integer in [1, 1000000], got 1000001",
    ),
    (
        ["--voxel-size", "1e-300", "--threads", TOO_MANY],
        "--voxel-size must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre), got 1e-300",
    ),
    (
        ["--voxel-size", "1e10", "--threads", TOO_MANY],
        "--voxel-size must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre), got 10000000000.0",
    ),
    # At 1.9 the LBM went unstable (a NaN flow rate) and ran its 200,000 steps before failing.
    (["--density-drop", "1.9", "--threads", TOO_MANY], "--density-drop must be in (0, 0.1], got 1.9"),
    (["--density-drop", "0.11", "--threads", TOO_MANY], "--density-drop must be in (0, 0.1], got 0.11"),
    (["--shape", "0", "8"], "--shape must be two integers >= 2 (H W), got (0, 8)"),
    (["--shape", "8"], "argument --shape: expected 2 arguments"),
    (["--shape", "8", "-4"], "--shape must be two integers >= 2"),
    (["--hurst", "0"], "--hurst must be in (0, 1], got 0.0"),
    (["--hurst", "1.5"], "--hurst must be in (0, 1], got 1.5"),
    (["--hurst", "nan"], "--hurst must be a number or a pair low <= high, got nan"),
    (["--recipe", "winding", "--rms-ratio", "-1"], "--rms-ratio must be >= 0, got -1.0"),
    # Walls 1e6 mean apertures high had made a box of millions of voxels across the gap.
    (
        ["--recipe", "winding", "--rms-ratio", "0.1", "1e6"],
        "--rms-ratio must keep the walls' rms height within the map's longest side (64 pixels): at most 8 for a "
        "mean aperture of 8 pixels, got (0.1, 1000000.0)",
    ),
    (["--recipe", "marble"], "argument --recipe: invalid choice: 'marble'"),
    (["--rms-ratio", "0.2"], "--rms-ratio is not a setting of --recipe published"),
    (
        ["--recipe", "winding", "--contact-fraction", "0.1"],
        "--contact-fraction is not a setting of --recipe winding",
    ),
    (["--hurst", "0.5", "0.6", "0.7"], "--hurst takes one value or two (LOW HIGH), got 3"),
    # An impossible closure: beyond half of the map in contact, no open path is left to cross it.
    (["--contact-fraction", "0.6"], "--contact-fraction must be in [0, 0.5]"),
    (["--contact-fraction", "-0.1"], "--contact-fraction must be in [0, 0.5]"),
    (["--aperture-std", "-1"], "--aperture-std must be in [0, 3]"),
    (["--mid-slope", "2"], "--mid-slope must be in [0, 1]"),
    (["--mismatch-ratio", "0", "2"], "--mismatch-ratio must be > 0"),
    (
        ["--wavelength-ratio", "0.1"],
        "--wavelength-ratio times the mean aperture (8 pixels) must be >= 2 pixels",
    ),
    (["--wavelength-ratio", "3"], "--wavelength-ratio must stay below mismatch_ratio (2-4)"),
    (["--special-every", "3"], "--special-every must be 0 (no exact cases) or an integer > 5"),
    # The rock recipe's maps are windows of larger walls: extent times the map, 1 (no window) and beyond memory refused.
    (
        ["--recipe", "rock", "--extent", "1"],
        "--extent must be an integer in [2, 16]: the map is a window of walls",
    ),
    (["--recipe", "rock", "--extent", "17"], "--extent must be an integer in [2, 16]"),
    (["--extent", "4"], "--extent is not a setting of --recipe published"),
    (
        ["--recipe", "rock", "--extent", "2"],
        "--shape is too small for mismatch_ratio up to 40 mean apertures of 8 pixels: the mismatch length must fit "
        "twice in the larger walls' longest side (2 times the map's), which needs >= 320 pixels (or lower "
        "mismatch_ratio, or raise extent)",
    ),
    # Fourier refinement of a window that is not periodic rings at its ends (by up to a mean aperture).
    (
        ["--recipe", "rock", "--refine-every", "4"],
        "--refine-every must be 0 with the rock recipe: its maps are windows",
    ),
    (["--special-every", "0.5"], "argument --special-every: invalid int value: '0.5'"),
    # A map too small for the roughness asked for names the map first, and what it needs.
    (["--shape", "48", "48"], "--shape is too small for mismatch_ratio up to 4 mean apertures of 8 pixels"),
    (["--shape", "48", "48"], "needs >= 64 pixels (or lower mismatch_ratio)"),
    (
        ["--recipe", "winding", "--shape", "40", "40"],
        "--shape is too small for wavelength_ratio up to 6 mean apertures of 8 pixels",
    ),
    (
        ["--recipe", "winding", "--shear", "40"],
        "--shear must stay below half the map's length along the flow (32",
    ),
    (["--recipe", "winding", "--shear", "-64", "0"], "--shear must stay below half the map's length"),
    (["--mean-aperture", "-2"], "--mean-aperture must be > 0, got -2.0"),
    (["--mean-aperture", "0"], "--mean-aperture must be > 0, got 0.0"),
    (["--shape", "8", "2"], "--shape must have W >= 3 columns along the flow"),
    # Refused before any allocation (the walls alone would take 75 GiB), with the largest map that fits.
    (
        ["--shape", "100000", "100000"],
        "--shape needs at least 5.01e+04 GiB for each fracture's LBM, more than",
    ),
    (["--shape", "100000", "100000"], "H x W must stay below about"),
    (["--recipe", "winding", "--mismatch-length", "0"], "--mismatch-length must be > 0"),
    (["--seed", "-5"], "--seed must be an integer >= 0, got -5"),
    (["--refine-every", "-1"], "--refine-every must be an integer >= 0 (0: no fracture is refined), got -1"),
    (
        ["--voxel-size", "0"],
        "--voxel-size must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre), got 0.0",
    ),
    # argparse takes "-1e-5" for an option, not a negative number: the error says how to write it.
    (
        ["--voxel-size", "-1e-5"],
        "argument --voxel-size: expected one argument; a value that starts with '-' is written attached: "
        "--voxel-size=-1e-5",
    ),
    (
        ["--voxel-size=-1e-5"],
        "--voxel-size must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre), got -1e-05",
    ),
    (["--omega", "3"], "--omega must be in (0, 2), got 3.0"),
    (["--omega", "0"], "--omega must be in (0, 2), got 0.0"),
    (["--omega", "2"], "--omega must be in (0, 2), got 2.0"),
    (["--density-drop", "0"], "--density-drop must be in (0, 0.1], got 0.0"),
    (["--tolerance", "0"], "--tolerance must be > 0, got 0.0"),
    (["--tolerance=-1e-6"], "--tolerance must be > 0"),
    (["--check-interval", "0"], "--check-interval must be an integer >= 1, got 0"),
    (["--max-steps", "50"], "--max-steps must be an integer >= check_interval (100), got 50"),
    (["--threads", "0"], "--threads must be an integer >= 1"),
    (
        ["--count", "1", "--threads", TOO_MANY],
        f"--threads must be an integer in [1, {CORES}] (the cores this process may use), got {TOO_MANY}",
    ),
    (
        ["--count", "1", "--processes", TOO_MANY],
        f"--processes must be an integer in [1, {CORES}] (the cores this process may use), got {TOO_MANY}",
    ),
    (["--mean-aperture=-inf"], "--mean-aperture must be > 0, got -inf"),
    (["--reservoir", "-1"], "--reservoir must be an integer >= 0, got -1"),
    (["--target", "tpu"], "argument --target: invalid choice: 'tpu'"),
    pytest.param(
        ["--target", "gpu"],
        "the LBM's target gpu needs cupy and a CUDA device, and cupy is not installed",
        marks=pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed"),
    ),
    (["--unknown"], "unrecognized arguments: --unknown"),
    # The Stokes reference: its meshes, its tolerance, and what it cannot be combined with.
    (["--reference", "fem"], "argument --reference: invalid choice: 'fem' (choose from 'lbm', 'stokes')"),
    (
        ["--reference", "stokes", "--stokes-cells-per-voxel", "2", "1"],
        "--stokes-cells-per-voxel must be two integers r1 < r2, r1 >= 1 (the coarser and the finer mesh), got (2, 1)",
    ),
    (
        ["--reference", "stokes", "--stokes-cells-per-voxel", "0", "2"],
        "--stokes-cells-per-voxel must be two integers r1 < r2, r1 >= 1",
    ),
    (["--stokes-cells-per-voxel", "1"], "argument --stokes-cells-per-voxel: expected 2 arguments"),
    (
        ["--reference", "stokes", "--stokes-tolerance", "1e-5"],
        "--stokes-tolerance must be at most 1e-6: above, the flow rate may stop short of steady by more than the "
        "extrapolation's accuracy (1 % at 1e-6 and relaxation 0.7), got 1e-05",
    ),
    (["--reference", "stokes", "--stokes-tolerance", "0"], "--stokes-tolerance must be in (0, 1), got 0.0"),
    (["--reference", "stokes", "--stokes-tolerance", "nan"], "--stokes-tolerance must be in (0, 1), got nan"),
    (["--reference", "stokes", "--stokes-relaxation", "0"], "--stokes-relaxation must be in (0, 1], got 0.0"),
    (
        ["--reference", "stokes", "--stokes-relaxation", "1.5"],
        "--stokes-relaxation must be in (0, 1], got 1.5",
    ),
    (
        ["--reference", "stokes", "--mean-aperture", "4"],
        "--mean-aperture must be at least 6 voxels with the stokes reference at 1 cell(s) per voxel on its coarser mesh",
    ),
    (
        ["--reference", "stokes", "--stokes-cells-per-voxel", "2", "3", "--mean-aperture", "2.5"],
        "--mean-aperture must be at least 3 voxels with the stokes reference at 2 cell(s) per voxel",
    ),
    (
        ["--reference", "stokes", "--refine-every", "4"],
        "--refine-every must be 0 with the stokes reference, which extrapolates from two meshes of its own",
    ),
]


@pytest.mark.parametrize("options, message", GENERATE_ROWS)
def test_generate_mistakes_stop_before_any_simulation(tmp_path, capsys, options, message):
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", *options)
    _one_line(status, err, message)
    assert os.listdir(tmp_path) == []  # no output, no parts folder


@pytest.mark.parametrize(
    "options",
    [
        ["--hurst", "0.5", "0.7", "{out}"],
        ["--hurst", "0.5", "{out}", "--rms-ratio", "0.1", "0.2", "--recipe", "winding"],
        ["--shape", "64", "64", "--mismatch-ratio", "2", "3", "{out}", "--quiet"],
    ],
)
def test_generate_reads_the_output_written_after_an_option_of_two_values(tmp_path, capsys, options):
    # argparse gave --hurst every word up to the next option: "argument --hurst: invalid float value: 'out.h5'".
    out = str(tmp_path / "out.h5")
    argv = [word.format(out=out) for word in options]
    status, err = _flowlearn(capsys, "generate", *argv, "--quiet", "--count", "-1")
    _one_line(status, err, "--count must be an integer in [1, 1000000], got -1")


def test_generate_starts_no_more_processes_than_fractures(tmp_path, monkeypatch):
    # --processes 2 for one fracture: one process makes it, and no pool of idle workers is started.
    from flowlearn.reference import generate

    monkeypatch.setattr(
        generate, "_make", lambda config, index, lbm: _fracture(generate.fracture_name(index))
    )
    monkeypatch.setattr(generate, "ProcessPoolExecutor", None)  # a pool would fail
    output = tmp_path / "out.h5"
    generate.make_parts(generate.DatasetConfig(count=1), output, [0], processes=2, progress=False)
    assert generate.part_path(generate.parts_folder(output), 0).is_file()


def _make_all_but_fractures_1_and_2(config, index, lbm):
    """Plates for every fracture but 1, whose reference fails, and 2, whose pressure is in another unit (module
    level: the pool's workers unpickle it)."""
    from flowlearn.errors import ReferenceConvergenceError

    if index == 1:
        raise ReferenceConvergenceError("fracture_001: the residual reached 3e-05 after 20000 iterations")
    plates = _fracture(f"fracture_{index:03d}", aperture=(8 + index) * 1e-5)
    return replace(plates, pressure=plates.pressure * 1e5) if index == 2 else plates


@pytest.mark.parametrize("processes", [1, 2])
def test_a_fracture_that_fails_is_named_and_the_others_are_kept(tmp_path, monkeypatch, processes):
    # One fracture's reference fails: the others are made and kept, and the error names it at the end (it used to
    # stop the loop, and the pool then ran every queued fracture for nothing before the error showed).
    from flowlearn.errors import ProblemError
    from flowlearn.reference import generate

    monkeypatch.setattr(generate, "_make", _make_all_but_fractures_1_and_2)  # forked workers inherit it
    output = tmp_path / "out.h5"
    with pytest.raises(ProblemError) as error:
        generate.make_parts(generate.DatasetConfig(count=4), output, [0, 1, 2, 3], processes, progress=False)
    parts = generate.parts_folder(output)
    message = str(error.value)
    assert message.startswith(f"2 of 4 fractures could not be made (the others are in {parts}): ")
    assert "fracture_001: the residual reached 3e-05 after 20000 iterations" in message
    assert "group 'fracture_002': field 'pressure': inlet face" in message
    assert "\n" not in message
    assert [generate.part_path(parts, i).is_file() for i in range(4)] == [True, False, False, True]


def test_generate_without_a_compiler_says_which_to_install(tmp_path, capsys, monkeypatch):
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed: auto may choose the GPU, which needs no C++ compiler")
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH on which no compiler lives
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", "--count", "1")
    _one_line(status, err, "neither g++ nor clang++ is on PATH: install one (e.g. apt-get install g++)")
    assert not (tmp_path / "out.h5").exists()


def test_generate_not_steady_by_max_steps_names_the_option(tmp_path, capsys):
    # Where it had ended in a 27-line traceback of the LBM's.
    pytest.importorskip("lbmpy")
    output = tmp_path / "out.h5"
    argv = ["generate", str(output), "--quiet", "--count", "1", "--max-steps", "100", "--threads", "1"]
    status, err = _flowlearn(
        capsys, *argv, "--shape", "32", "32", "--recipe", "winding", "--mean-aperture", "4"
    )
    _one_line(status, err, "fracture_000: LBM not steady after 101 steps", "raise --max-steps (now 100)")
    assert not output.exists()


# `flowlearn generate --slurm`: settings checked before the cluster is asked (tests/test_generate_slurm.py has what a
# running cluster refuses).
GENERATE_SLURM_ROWS = [
    (["--slurm", "--tasks", "0"], "--tasks must be an integer >= 1, got 0"),
    (["--slurm", "--tasks", "-2"], "--tasks must be an integer >= 1, got -2"),
    (["--slurm", "--tasks", "two"], "argument --tasks: invalid int value: 'two'"),
    (["--slurm", "--timeout-min", "0"], "--timeout-min must be an integer >= 1, got 0"),
    (["--slurm", "--timeout-min", "1.5"], "argument --timeout-min: invalid int value: '1.5'"),
    (["--slurm", "--cpus-per-task", "0"], "--cpus-per-task must be an integer >= 1, got 0"),
    (["--slurm", "--mem-gb", "0"], "--mem-gb must be > 0, got 0.0"),
    (["--slurm", "--mem-gb", "-4"], "--mem-gb must be > 0, got -4.0"),
    (["--slurm", "--mem-gb", "inf"], "--mem-gb must be a finite number > 0, got inf"),
    (["--slurm", "--array-parallelism", "0"], "--array-parallelism must be an integer >= 1, got 0"),
    (["--slurm", "--partition", ""], "--partition must be a name, got ''"),
    (["--slurm", "--account", " "], "--account must be a name, got ' '"),
    (["--slurm", "--processes", "2"], "--processes applies only to a local generation: with --slurm each"),
    (["--tasks", "4"], "--tasks applies only with --slurm"),
    (["--partition", "cpu"], "--partition applies only with --slurm"),
    (["--slurm-setup", "module load gcc"], "--slurm-setup applies only with --slurm"),
    (["--no-wait"], "--no-wait applies only with --slurm"),
]


@pytest.mark.parametrize("options, message", GENERATE_SLURM_ROWS)
def test_generate_slurm_mistakes_write_nothing(tmp_path, capsys, options, message):
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", *options)
    _one_line(status, err, message)
    assert os.listdir(tmp_path) == []  # no output, no parts folder


def test_generate_slurm_without_sbatch_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # a PATH on which no SLURM command lives
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", "--slurm")
    _one_line(status, err, "SLURM's client commands on PATH, and sbatch", "apt-get install slurm-client")
    assert os.listdir(tmp_path) == []


@pytest.fixture
def no_controller(tmp_path, monkeypatch):
    """SLURM_CONF set to a slurm.conf (in tmp_path) whose controller port nobody listens on."""
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        pytest.skip("SLURM's client commands are not installed (apt-get install slurm-client)")
    import socket

    with socket.socket() as s:  # a port on which nothing listens once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


def test_generate_slurm_without_a_controller_names_slurm_conf(tmp_path, capsys, monkeypatch, no_controller):
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", "--slurm")
    _one_line(status, err, "--slurm: no SLURM controller answers `scontrol ping`", "SLURM_CONF", "slurmctld")
    assert sorted(os.listdir(tmp_path)) == ["slurm.conf"]
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", "--slurm")
    _one_line(status, err, f"--slurm: SLURM_CONF={tmp_path / 'missing.conf'} is no file")
    assert sorted(os.listdir(tmp_path)) == ["slurm.conf"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--factors", "2", "1"],
            "error: --factors must be distinct integers >= 1 in ascending order, got [2, 1]",
        ),
        (
            ["--factors", "0", "1"],
            "error: --factors must be distinct integers >= 1 in ascending order, got [0, 1]",
        ),
        (
            ["--stokes", "--stokes-mesh", "cells"],
            "error: argument --stokes-mesh: invalid choice: 'cells' (choose from 'voxels', 'walls')",
        ),
        (["--stokes-mesh", "walls"], "error: --stokes-mesh applies with --stokes only"),
        (
            ["--recipe", "published", "--as-generated"],
            "error: --as-generated applies to --recipe winding only",
        ),
        (
            ["--recipe", "published"],
            "error: shape is too small for mismatch_ratio up to 4 mean apertures of 8 pixels: the mismatch length must "
            "fit twice in the longest side, which needs >= 64 pixels (or lower mismatch_ratio), got (24, 24)",
        ),
    ],
)
def test_convergence_study_options(capsys, argv, message):
    from flowlearn.reference.convergence import main as convergence

    with pytest.raises(SystemExit) as stop:
        convergence(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(message), err


def test_convergence_study_with_stokes_but_without_openfoam(capsys, monkeypatch, tmp_path):
    from flowlearn.reference.convergence import main as convergence

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        convergence(["--stokes"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert "blockMesh, subsetMesh, simpleFoam is not on PATH" in err.strip().splitlines()[-1]


def test_convergence_study_of_walls_too_long_for_the_map(capsys):
    from flowlearn.reference.convergence import main as convergence

    with pytest.raises(SystemExit) as stop:
        convergence(["--as-generated", "--shape", "24", "24"])
    err = capsys.readouterr().err
    # argparse's usage, then the one line of the error
    assert stop.value.code == 2 and "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "error: shape is too small for wavelength_ratio up to 6 mean apertures of 8 pixels: the longest side must "
            "exceed 48 pixels (or lower wavelength_ratio), got (24, 24)"
        )
    )


# {name}: a file of the `files` fixture, {run}: a fake run directory, {tmp}: a fresh folder.
COMMAND_ROWS = [
    (["convert", "{tmp}/missing.h5", "{tmp}/out.h5"], "{tmp}/missing.h5: no such file"),
    (["convert", "{text}", "{tmp}/out.h5"], "{text}: not an HDF5 file"),
    (["convert", "{corrupt}", "{tmp}/out.h5"], "{corrupt}"),
    (["convert", "{nan}", "{tmp}/out.h5"], "field 'pressure'"),
    (["convert", "{good}", "{folder}"], "{folder}: is a directory"),
    # An empty path (an unset shell variable) had been read as the current directory, or as no value.
    (["convert", "", "{tmp}/out.h5"], "argument src: must be a path, got ''"),
    (["convert", "{good}", ""], "argument dst: must be a path, got ''"),
    (["report", "{run}", "-o", ""], "argument -o/--output: must be a path, got ''"),
    (
        ["predict", "{run}", "{good}", "-o", "{tmp}/p.h5", "--checkpoint", ""],
        "argument --checkpoint: must be a path, got ''",
    ),
    (["predict", "{run}", "{good}", "-o", ""], "argument -o/--output: must be a path, got ''"),
    (["departure", "{good}", "--figure", ""], "argument --figure: must be a path, got ''"),
    (["stokes", "{good}", "--case-dir", ""], "argument --case-dir: must be a path, got ''"),
    (["stokes", "{good}", "-o", ""], "argument -o/--output: must be a path, got ''"),
    (["check", "{good}", ""], "argument data: must be a path, got ''"),
    (["evaluate", ""], "argument predictions: must be a path, got ''"),
    (["ensemble", "{good}", "{nan}", "-o", ""], "argument -o/--output: must be a path, got ''"),
    (["refine", ""], "argument data: must be a path, got ''"),
    (["smooth-walls", "{good}", ""], "argument FILE: must be a path, got ''"),
    (["generate", ""], "argument output: must be a path, got ''"),
    (["convert", "{folder}", "{tmp}/out.h5"], "{folder}: a directory, not an HDF5 fracture file"),
    (["convert", "{good}", "{good}/out.h5"], "{good}/out.h5: cannot write here"),
    (["convert", "{good}", "{tmp}/out.h5", "--layout", "matlab"], "argument --layout: invalid choice"),
    (["convert", "{good}"], "the following arguments are required: dst"),
    (["report", "{run}", "--dpi", "0"], "argument --dpi: must be an integer in [10, 1200], got 0"),
    (["report", "{run}", "--dpi", "-10"], "argument --dpi: must be an integer in [10, 1200], got -10"),
    # Refused before the run is read: at 100000 dpi matplotlib's renderer ran out of memory, after figures/ was made.
    (["report", "{run}", "--dpi", "1201"], "argument --dpi: must be an integer in [10, 1200], got 1201"),
    (["report", "{run}", "--dpi", "100000"], "argument --dpi: must be an integer in [10, 1200], got 100000"),
    (["report", "{run}", "--dpi", "abc"], "argument --dpi: invalid int value: 'abc'"),
    (
        ["report", "{run}", "-o", "-5e0"],
        "argument -o/--output: expected one argument; a value that starts with '-' is written attached: -o=-5e0",
    ),
    (["report", "{tmp}/nowhere"], "{tmp}/nowhere: no such directory"),
    (["report", "{run}"], "{run}/metrics.csv: no logged epochs"),
    (["predict", "{tmp}/nowhere", "{good}", "-o", "{tmp}/p.h5"], "{tmp}/nowhere: no such run directory"),
    (["predict", "{run}", "{tmp}/missing.h5", "-o", "{tmp}/p.h5"], "{tmp}/missing.h5: no such file"),
    (["predict", "{run}", "{empty}", "-o", "{tmp}/p.h5"], "{empty}: empty file"),
    (
        ["predict", "{run}", "{narrow}", "-o", "{tmp}/p.h5"],
        "{narrow}: group 'f0': field 'aperture': shape (1, 2)",
    ),
    (["predict", "{run}", "{good}", "-o", "{folder}"], "{folder}: is a directory"),
    (
        ["predict", "{run}", "{nan}", "{good}", "-o", "{good}"],
        "--output {good} is one of the inputs: give a new file",
    ),
    (
        ["predict", "{run}", "{good}", "-o", "{run}/predictions.h5"],
        "--output {run}/predictions.h5 is the run's own predictions.h5: give a new file",
    ),
    # A fracture is named by its file's name and group: one file twice gives every fracture of it twice.
    (
        ["predict", "{run}", "{good}", "{nan}", "{good}", "-o", "{tmp}/p.h5"],
        "INPUTS: {good} and {good} share the file name 'good', which names their fractures (good/<group>): give "
        "each file once, and rename one of two files of one name",
    ),
    (
        ["predict", "{run}", "{good}", "-o", "{tmp}/p.h5", "--checkpoint", "{folder}"],
        "{folder}: is a directory",
    ),
    (
        ["predict", "{run}", "{good}", "-o", "{tmp}/p.h5", "--checkpoint", "{tmp}/none.ckpt"],
        "a checkpoint is missing ({tmp}/none.ckpt does not exist)",
    ),
    (
        ["predict", "{run}", "{good}", "-o", "{tmp}/p.h5", "--checkpoint", "{random_ckpt}"],
        "{random_ckpt} (5000 bytes) is not a checkpoint: no complete torch archive",
    ),
    (
        ["predict", "{run}", "{good}", "-o", "{tmp}/p.h5", "--checkpoint", "{truncated_ckpt}"],
        "{truncated_ckpt} (3000 bytes) is not a checkpoint: no complete torch archive",
    ),
    (["predict", "{run}", "{good}", "-o", "{tmp}/p.h5"], "{run}/checkpoints/last.ckpt is empty (0 bytes)"),
    (["predict", "{run}", "{good}"], "the following arguments are required: -o/--output"),
    (["evaluate", "{good}"], "{good}: group 'f0' has no predictions (attributes split, law, correction_name"),
    (["evaluate", "{text}"], "{text}: not an HDF5 file"),
    (
        ["evaluate", "{good}", "--split", "foo"],
        "argument --split: invalid choice: 'foo' (choose from 'train', 'val', 'test', 'predict')",
    ),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    (["check"], "the following arguments are required: data"),
    (["check", "{tmp}/missing.h5"], "{tmp}/missing.h5: no such file"),
    (["check", "{text}"], "{text}: not an HDF5 file"),
    (["check", "{folder}"], "{folder}: a directory, not an HDF5 fracture file"),
    (["check", "{nan}"], "{nan}: group 'f2': field 'pressure': 1 non-finite"),
    (["check", "{narrow}"], "{narrow}: group 'f0': field 'aperture': shape (1, 2)"),
    # Every reader detects the layout first: a version that is no integer had been a traceback, or read as 1.
    (
        ["check", "{version_text}"],
        "{version_text}: root attribute 'schema_version' is 'one'; expected an integer (this flowlearn reads "
        "version 1)",
    ),
    (
        ["convert", "{version_half}", "{tmp}/out.h5"],
        "{version_half}: root attribute 'schema_version' is 1.5; expected an integer (this flowlearn reads "
        "version 1)",
    ),
    # Refused before numpy tries to allocate the declared array.
    (
        ["check", "{huge}"],
        "{huge}: group 'f2': field 'aperture': shape (1000000, 1000000) of float64 needs 7.45e+03 GiB, more than "
        "the ",
    ),
    (
        ["check", "{original_huge}"],
        "{original_huge}: group 'fracture_1': field 'aperture_field': shape (1, 1, 1000000, 1000000) of float64 "
        "needs 7.45e+03 GiB, more than the ",
    ),
    # The schema's mask is bool; a cast had made every non-zero value an active cell.
    (["check", "{float_mask}"], "{float_mask}: group 'f2': field 'mask': expected a bool dtype, got float64"),
    (["check", "{int_mask}"], "{int_mask}: group 'f2': field 'mask': expected a bool dtype, got int8"),
    (["check", "{good}", "--margin", "-1"], "argument --margin: must be an integer >= 0, got -1"),
    (["check", "{good}", "--margin", "two"], "argument --margin: invalid int value: 'two'"),
    # The good file's maps are 8 columns wide: a margin of 3 leaves one column pair, nothing to check.
    (
        ["check", "{good}", "--margin", "3"],
        "--margin must be at most 2 on these maps (the widest has 8 columns, and 2 column pairs must remain "
        "between the margins), got 3",
    ),
    (
        ["check", "{good}", "--tolerance", "0"],
        "argument --tolerance: must be a number in (0, 1] (a fraction: 0.01 is 1 %), got 0.0",
    ),
    (
        ["check", "{good}", "--tolerance", "nan"],
        "argument --tolerance: must be a number in (0, 1] (a fraction: 0.01 is 1 %), got nan",
    ),
    (["ensemble", "{good}", "-o", "{tmp}/e.h5"], "PREDICTIONS must be at least 2 files (the members), got 1"),
    (
        ["ensemble", "{good}", "{good}", "-o", "{good}"],
        "--output {good} is one of the members: give a new file",
    ),
    (["ensemble", "{tmp}/missing.h5", "{good}", "-o", "{tmp}/e.h5"], "no predictions file {tmp}/missing.h5"),
    (["ensemble", "{good}", "{nan}", "-o", "{tmp}/e.h5"], "{good}: group 'f0' has no predictions"),
    (
        ["ensemble", "{good}", "{good}", "-o", "{tmp}/e.h5"],
        "PREDICTIONS gives {good} twice: the members must be different runs",
    ),
    (
        ["ensemble", "{good}", "{nan}", "{folder}/../good.h5", "-o", "{tmp}/e.h5"],
        "PREDICTIONS gives {folder}/../good.h5 twice (also as {good}): the members must be different runs",
    ),
    (
        ["ensemble", "{good}", "{good}", "-o", "{tmp}/e.h5", "--level", "1"],
        "--level: must be a number in (0, 1)",
    ),
    (
        ["ensemble", "{good}", "{good}", "-o", "{tmp}/e.h5", "--level", "x"],
        "--level: invalid float value: 'x'",
    ),
    (["ensemble", "{good}", "{good}"], "the following arguments are required: -o/--output"),
    (
        ["ensemble", "{good}", "{good}", "-o", "{tmp}/e.h5", "--calibrate", "x"],
        "--calibrate: invalid choice: 'x'",
    ),
    # Checked before the LCL solves (the good file stores no flow rate, which they would find next).
    (
        ["departure", "{good}", "--figure", "{good}/x.png"],
        "{good}/x.png: cannot write here: {good} is not a directory",
    ),
    (["stokes"], "the following arguments are required: data"),
    (["stokes", "{tmp}/missing.h5"], "{tmp}/missing.h5: no such file"),
    (
        ["stokes", "{good}", "--fracture", "f9"],
        "--fracture names no fracture of {good}: 'f9' (it has f0, f1, f2, f3)",
    ),
    (["stokes", "{good}", "--cells-per-voxel", "0"], "--cells-per-voxel must be an integer >= 1, got 0"),
    (["stokes", "{good}", "--reservoir", "-1"], "--reservoir must be an integer >= 0, got -1"),
    (["stokes", "{good}", "--tolerance", "1"], "--tolerance must be in (0, 1), got 1"),
    (
        ["stokes", "{good}", "--max-iterations", "0"],
        "--max-iterations must be an integer in [1, 2147483647], got 0",
    ),
    # OpenFOAM reads the count as a 32-bit label: blockMesh had failed with a 39-line stack dump.
    (
        ["stokes", "{good}", "--max-iterations", "2147483648"],
        "--max-iterations must be an integer in [1, 2147483647], got 2147483648",
    ),
    (
        ["stokes", "{good}", "--max-iterations", "1000000000000000000000"],
        "--max-iterations must be an integer in [1, 2147483647], got 1000000000000000000000",
    ),
    (["stokes", "{good}", "--processes", "0"], "--processes must be an integer >= 1, got 0"),
    (
        ["stokes", "{good}", "--processes", TOO_MANY],
        f"--processes must be an integer in [1, {CORES}] (the cores this process may use), got {TOO_MANY}",
    ),
    (["stokes", "{good}", "--relaxation", "0"], "--relaxation must be in (0, 1], got 0.0"),
    (["stokes", "{good}", "--relaxation", "1.5"], "--relaxation must be in (0, 1], got 1.5"),
    *(
        (
            ["stokes", "{good}", "--voxel-size", size],
            "argument --voxel-size: must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre), "
            f"got {shown}",
        )
        # 1e10 had been told "no fluid path joins the inlet column to the outlet column".
        for size, shown in (("0", "0.0"), ("1e10", "10000000000.0"), ("1e-10", "1e-10"), ("nan", "nan"))
    ),
    (["stokes", "{blocked}"], "{blocked}, f2: no fluid path joins the inlet column to the outlet column"),
    # Apertures of 0.8e-4 m fill no voxel of a metre: "no fluid path" hid why.
    (
        ["stokes", "{good}", "--voxel-size", "1"],
        "{good}, f0: fracture 'f0': no voxel is fluid at 1 m per voxel: its widest aperture, 8e-05 m, fills none",
    ),
    (
        ["stokes", "{good}", "--voxel-size", "1e-9", "--cells-per-voxel", "8"],
        "{good}, f0: the Stokes mesh of this 6x8x80000-voxel box at 8 cells per voxel needs about",
    ),
    (
        ["stokes", "{original}"],
        "{original}, fracture_1: fracture 'fracture_1': its voxel size is unknown (or not > 0: nan)",
    ),
    (["stokes", "{good}", "--mesh", "cells"], "argument --mesh: invalid choice: 'cells'"),
    (
        ["stokes", "{good}", "--mesh", "walls"],
        "{good}, f0: fracture 'f0': stores no walls (bottom, top), and the wall-fitted mesh follows them",
    ),
    (
        ["stokes", "{walled}", "--fracture=f2", "--mesh=walls", "--voxel-size=1e-9", "--cells-per-voxel=8"],
        "{walled}, f2: the wall-fitted Stokes mesh of this 6x8-voxel map at 8 cells per voxel may need",
    ),
    (["stokes", "{good}", "--case-dir", "{cases}"], "{cases}/f0: exists already; give a new folder"),
    # Checked with the rest, before the first solve (the case folder had failed to be made after it began).
    (
        ["stokes", "{good}", "--case-dir", "{good}/cases"],
        "{good}/cases/f0: cannot write here: {good} is not a directory",
    ),
    (["stokes", "{good}", "--output", "{folder}"], "{folder}: is a directory; give a file name to write"),
    (["refine"], "the following arguments are required: data"),
    (["refine", "{tmp}/missing.h5"], "{tmp}/missing.h5: no such file"),
    (["refine", "{folder}"], "{folder}: is a directory; give a file name to write"),
    (
        ["refine", "{good}", "--fracture", "f9"],
        "--fracture names no fracture of {good}: 'f9' (it has f0, f1, f2, f3)",
    ),
    (["refine", "{good}", "--every", "0"], "argument --every: must be a positive integer, got 0"),
    (["refine", "{good}", "--threads", "0"], "argument --threads: must be a positive integer, got 0"),
    (
        ["refine", "{good}", "--threads", TOO_MANY],
        f"--threads must be an integer in [1, {CORES}] (the cores this process may use), got {TOO_MANY}",
    ),
    (["refine", "{good}"], "{good}, f0: stores no walls, so its geometry on a finer grid is unknown"),
    (["refine", "{original}"], "{original}: is in the original layout, which keeps no provenance"),
    (
        ["refine", "{good}", "--infer-only"],
        "a rule needs at least 3 measured fractures, this file has 0: measure more first",
    ),
    (["smooth-walls"], "the following arguments are required: data"),
    (
        ["smooth-walls", "{good}"],
        "FILE missing: give the wall-fitted Stokes solves (FILE...), --infer, or both",
    ),
    (["smooth-walls", "{folder}", "--infer"], "{folder}: is a directory; give a file name to write"),
    (
        ["smooth-walls", "{original}", "--infer"],
        "{original}: is in the original layout, which keeps no provenance",
    ),
    (
        ["smooth-walls", "{good}", "--infer"],
        "{good}: 0 fracture(s) record a measured reference error, at least 3 are needed to infer the others'",
    ),
    (
        ["smooth-walls", "{good}", "{stokes_voxels}", "{stokes2}"],
        "{stokes_voxels}, f0: not a wall-fitted Stokes solve (flowlearn stokes --mesh walls -o FILE)",
    ),
    (
        ["smooth-walls", "{good}", "{stokes1}"],
        "{stokes1}: give wall-fitted solves at two resolutions, got [1] cells per voxel",
    ),
    (
        ["smooth-walls", "{good}", "{stokes1}", "{stokes2_f0}"],
        "{stokes1}: f1, f2, f3 solved at 1 cells per voxel but not at 2",
    ),
    (
        ["smooth-walls", "{good}", "{stokes_others1}", "{stokes_others2}"],
        "{good}: has no fracture g0, which the Stokes solves hold",
    ),
    (
        ["smooth-walls", "{good}", "{stokes1}", "{stokes2}"],
        "{good}, f0: stores no reference flow rate and pressure to judge",
    ),
]


@pytest.mark.parametrize("argv, message", COMMAND_ROWS)
def test_command_mistakes(files, fake_run, tmp_path, capsys, argv, message):
    names = {name: str(path) for name, path in files.items()} | {"tmp": str(tmp_path), "run": str(fake_run)}
    status, err = _flowlearn(capsys, *(a.format(**names) for a in argv))
    _one_line(status, err, message.format(**names))


def test_predicting_two_inputs_of_one_file_name(files, fake_run, tmp_path, capsys):
    # Both files' fractures would be named x/<group>: the second had failed with a 60-line traceback of h5py's.
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(files["good"], tmp_path / folder / "x.h5")
    first, second = tmp_path / "a" / "x.h5", tmp_path / "b" / "x.h5"
    status, err = _flowlearn(
        capsys, "predict", str(fake_run), str(first), str(second), "-o", str(tmp_path / "p.h5")
    )
    _one_line(
        status, err, f"INPUTS: {first} and {second} share the file name 'x', which names their fractures"
    )
    assert not (tmp_path / "p.h5").exists()


def test_stokes_does_not_write_over_its_input(files, tmp_path, capsys):
    # The Stokes solution had replaced the file's own reference, with status 0.
    data = tmp_path / "data.h5"
    shutil.copy(files["good"], data)
    before = data.read_bytes()
    output = f"{tmp_path}/./data.h5"  # the same file, named otherwise
    status, err = _flowlearn(capsys, "stokes", str(data), "--quiet", "-o", output)
    _one_line(status, err, f"--output {output} is the input DATA: give a new file")
    assert data.read_bytes() == before


def test_a_figure_dpi_out_of_range_in_the_config(files, tmp_path, capsys, monkeypatch):
    # The figure callback takes the same range as flowlearn report --dpi, refused before training.
    overrides = [f"data.path={files['good']}", "+callbacks.figures.dpi=100000"]
    status, err = _train_checks(tmp_path, capsys, monkeypatch, overrides)
    _one_line(status, err, "callbacks.figures: dpi must be an integer in [10, 1200], got 100000")
    assert not (tmp_path / "run" / "figures").exists()


@pytest.fixture(scope="module")
def trained_runs(files, tmp_path_factory) -> dict[str, Path]:
    """Two short real runs on the good dataset: the CNN under law=lcl, and a U-Net."""
    base = tmp_path_factory.mktemp("trained")
    runs = {}
    for name, overrides in (
        ("cnn", ["law=lcl"]),
        ("unet", ["model=unet", "model.channels=2", "model.levels=1"]),
    ):
        runs[name] = base / name
        command = [
            sys.executable,
            str(ROOT / "train.py"),
            f"hydra.run.dir={runs[name]}",
            f"data.path={files['good']}",
        ]
        command += ["trainer.max_epochs=1", "~callbacks.figures", *overrides]
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT, timeout=600)
    return runs


CNN_LCL = "model=cnn (channels=16, depth=3, kernel_size=5, inputs=[aperture], exact_on_plates=true)"


@pytest.mark.parametrize(
    "overrides, theirs, ours",
    [
        (["law=inclined"], "law=lcl", "law=inclined"),
        (["law=lcl", "model=unet"], CNN_LCL, "model=unet (channels=16, levels=2, kernel_size=3"),
        (
            ["law=lcl", "model.inputs=[aperture,aperture_gradient]"],
            CNN_LCL,
            "inputs=[aperture,aperture_gradient]",
        ),
        (["law=lcl", "model.exact_on_plates=false"], CNN_LCL, "exact_on_plates=false"),
    ],
)
def test_resuming_a_checkpoint_of_another_law_or_model(
    files, trained_runs, tmp_path, capsys, monkeypatch, overrides, theirs, ours
):
    checkpoint = trained_runs["cnn"] / "checkpoints" / "last.ckpt"
    status, err = _train_checks(
        tmp_path, capsys, monkeypatch, [f"data.path={files['good']}", f"ckpt_path={checkpoint}", *overrides]
    )
    _one_line(status, err, f"ckpt_path: {checkpoint} was trained with {theirs}, and this run has", ours)


def test_resuming_a_checkpoint_of_another_optimizer(files, trained_runs, tmp_path, capsys, monkeypatch):
    # Torch loaded Adam's settings into Gauss-Newton, whose first step failed with KeyError: 'damping'.
    checkpoint = trained_runs["cnn"] / "checkpoints" / "last.ckpt"
    overrides = [f"data.path={files['good']}", f"ckpt_path={checkpoint}", "law=lcl", "optimizer=gauss_newton"]
    status, err = _train_checks(tmp_path, capsys, monkeypatch, overrides)
    _one_line(
        status,
        err,
        f"ckpt_path: {checkpoint} holds the state of another optimizer (with amsgrad, betas, capturable, ...) than "
        "this run's GaussNewton (with cg_iterations, cg_tolerance, damping, ...): resume with the optimizer that "
        "run had (optimizer= in its .hydra/config.yaml)",
    )
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_predicting_with_a_checkpoint_of_another_model(files, trained_runs, tmp_path, capsys):
    checkpoint = trained_runs["cnn"] / "checkpoints" / "last.ckpt"
    argv = ["predict", str(trained_runs["unet"]), str(files["good"]), "-o", str(tmp_path / "p.h5")]
    status, err = _flowlearn(capsys, *argv, "--checkpoint", str(checkpoint))
    trained, asked = f"law=lcl and {CNN_LCL}", "law=mlcl and model=unet (channels=2, levels=1"
    _one_line(status, err, f"{checkpoint} was trained with {trained}, and this run has {asked}")
    assert not (tmp_path / "p.h5").exists()


def test_predicting_with_a_checkpoint_of_another_kind_of_model(files, trained_runs, tmp_path, capsys):
    # A pixel model's weights in a CNN's run: KeyError: 'correction.head.weight', before the record was compared.
    checkpoint = tmp_path / "pixel.ckpt"
    record = {"law": "law=lcl", "model": "model=pixel (shape [6, 8])"}
    weights = {"correction.raw": torch.zeros(6, 8)}
    torch.save({"epoch": 0, "global_step": 1, "state_dict": weights, "training_data": record}, checkpoint)
    argv = ["predict", str(trained_runs["cnn"]), str(files["good"]), "-o", str(tmp_path / "p.h5")]
    status, err = _flowlearn(capsys, *argv, "--checkpoint", str(checkpoint))
    config = trained_runs["cnn"] / ".hydra" / "config.yaml"
    _one_line(
        status,
        err,
        f"{checkpoint} was trained with model=pixel (shape [6, 8]), and {config} has model=cnn: use a checkpoint "
        "of a run with model=cnn, or the run of this checkpoint",
    )
    assert not (tmp_path / "p.h5").exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: "model: [unclosed\n", "not a readable run config (while parsing a flow sequence"),
        (lambda text: "seed: 0\n", "not a run's config: it names no law or model"),
        (
            lambda text: text.replace("flowlearn.models.CNNCorrection", "flowlearn.models.ResNetCorrection"),
            "the run's model (flowlearn.models.ResNetCorrection) does not exist in this flowlearn",
        ),
    ],
)
def test_predicting_with_a_damaged_run_config(files, trained_runs, tmp_path, capsys, edit, message):
    run = tmp_path / "run"
    shutil.copytree(trained_runs["cnn"], run)
    config = run / ".hydra" / "config.yaml"
    config.write_text(edit(config.read_text()))
    status, err = _flowlearn(capsys, "predict", str(run), str(files["good"]), "-o", str(tmp_path / "p.h5"))
    _one_line(status, err, f"{config}: {message}")
    assert not (tmp_path / "p.h5").exists()


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("config.yaml", "model: [unclosed\n", "not a readable run config (while parsing a flow sequence"),
        ("config.yaml", "seed: 0\n", "not a run's config: it names no law or model"),
        ("config.yaml", "- a list\n", "not a run's config: it names no law or model"),
        ("overrides.yaml", "[unclosed\n", "not a readable run config"),
        ("hydra.yaml", "hydra: {\n", "not a readable run config"),
    ],
)
def test_reporting_a_run_with_a_damaged_record(trained_runs, tmp_path, capsys, name, text, message):
    run = tmp_path / "run"
    shutil.copytree(trained_runs["cnn"], run)
    damaged = run / ".hydra" / name
    damaged.write_text(text)
    status, err = _flowlearn(capsys, "report", str(run))
    _one_line(status, err, f"{damaged}: {message}")
    assert not (run / "report.md").exists() and not (run / "figures").exists()


def test_a_sweep_lists_a_run_whose_config_is_damaged(trained_runs, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for name in ("0", "1"):
        shutil.copytree(trained_runs["cnn"], sweep / name)
    (sweep / "1" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    status, err = _flowlearn(capsys, "report", str(sweep))
    assert status == 1 and "Traceback" not in err
    assert "is unreadable" in err and "it names no law or model" in err
    table = (sweep / "report.md").read_text()
    assert "| unreadable: " in table and "[0](0/report.md)" in table


@pytest.mark.parametrize(
    "contents, message",
    [
        (b"", "predictions.h5: empty file (0 bytes)"),
        (b"not HDF5", "predictions.h5: not an HDF5 file"),
    ],
)
def test_a_sweep_lists_a_run_whose_predictions_are_damaged(trained_runs, tmp_path, capsys, contents, message):
    # The runs before and after it are reported, and so is the table; the sweep had stopped at it with status 2.
    sweep = tmp_path / "sweep"
    for name in ("0", "1", "2"):
        shutil.copytree(trained_runs["cnn"], sweep / name)
    (sweep / "1" / "predictions.h5").write_bytes(contents)
    status, err = _flowlearn(capsys, "report", str(sweep))
    assert status == 1 and "Traceback" not in err, err
    assert f"{sweep / '1'} is unreadable: {sweep / '1' / message}" in err
    table = (sweep / "report.md").read_text()
    assert "| 1 | " in table and "| unreadable: " in table
    assert "[0](0/report.md)" in table and "[2](2/report.md)" in table


def test_a_sweep_names_what_is_wrong_with_a_garbled_metrics_file(trained_runs, tmp_path, capsys):
    # It was listed as "missing logged epochs (metrics.csv has none)".
    sweep = tmp_path / "sweep"
    for name in ("0", "1"):
        shutil.copytree(trained_runs["cnn"], sweep / name)
    (sweep / "1" / "metrics.csv").write_bytes(b"epoch,step\n\xff\xfe\n")
    status, err = _flowlearn(capsys, "report", str(sweep))
    assert status == 1 and "Traceback" not in err
    assert f"{sweep / '1'} is missing a readable {sweep / '1' / 'metrics.csv'}: not a metrics file" in err


def test_reporting_a_run_whose_metrics_are_not_text(trained_runs, tmp_path, capsys):
    # Bytes that are no UTF-8 had ended in a UnicodeDecodeError's traceback.
    run = tmp_path / "run"
    shutil.copytree(trained_runs["cnn"], run)
    (run / "metrics.csv").write_bytes(b"epoch,step\n\xff\xfe\n")
    status, err = _flowlearn(capsys, "report", str(run))
    _one_line(status, err, f"{run / 'metrics.csv'}: not a metrics file of Lightning's CSV logger (")
    assert not (run / "report.md").exists() and not (run / "figures").exists()


def test_predicting_on_volumes_with_a_run_of_maps(files, trained_runs, tmp_path, capsys):
    volumes = tmp_path / "volumes.h5"
    shape = (3, 6, 8)
    pressure = np.broadcast_to(2 - np.arange(shape[2]) / (shape[2] - 1), shape)
    write_fractures(volumes, [Fracture("v0", np.full(shape, 1e-4), pressure.copy(), voxel_size=1e-5)])
    argv = ["predict", str(trained_runs["cnn"]), str(volumes), "-o", str(tmp_path / "p.h5")]
    status, err = _flowlearn(capsys, *argv)
    _one_line(
        status, err, f"{volumes}: group 'v0': the run's {CNN_LCL} takes maps (H, W), got shape (3, 6, 8)"
    )
    assert not (tmp_path / "p.h5").exists()


@pytest.mark.parametrize(
    "source, option", [("blocked", []), ("good", ["--voxel-size", "1e-9", "--cells-per-voxel", "8"])]
)
def test_a_fracture_the_stokes_solve_cannot_mesh_stops_before_anything_is_written(
    files, tmp_path, capsys, source, option
):
    # No fluid path in one fracture, or meshes too large: refused before the first solve, so that neither the
    # output nor a case folder is begun.
    output, cases = tmp_path / "out.h5", tmp_path / "cases"
    status, err = _flowlearn(
        capsys, "stokes", str(files[source]), "-o", str(output), "--case-dir", str(cases), *option
    )
    _one_line(status, err, str(files[source]))
    assert os.listdir(tmp_path) == []


def test_an_incomplete_sweep_is_a_status_not_an_error(fake_run, tmp_path, capsys):
    # Exit status 1, as documented: the table is written, the incomplete runs are listed.
    sweep = tmp_path / "sweep"
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "1").mkdir()
    (sweep / "1" / "metrics.csv").write_text("")  # a job killed before its first epoch
    status, err = _flowlearn(capsys, "report", str(sweep))
    assert status == 1 and (sweep / "report.md").is_file()
    assert "Traceback" not in err and "metrics.csv has none" in err


# ------------------------------------------------------------------------------------------ the file system


@contextlib.contextmanager
def _mounted(where: Path, options: str):
    """A tmpfs mounted at ``where`` with ``options``; the test is skipped (saying why) where mounting fails."""
    where.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.decode().strip() or 'not permitted'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def _big_dataset(path: Path) -> Path:
    """Fractures with random apertures, so that they do not compress: over 1 MB."""
    rng = np.random.default_rng(0)
    fractures = [_fracture(f"f{i}", (64, 64)) for i in range(32)]
    for fracture in fractures:
        fracture.aperture[:] = 1e-4 * (1 + rng.random((64, 64)))
    write_fractures(path, fractures)
    return path


def test_a_full_disk_leaves_the_previous_file_intact(tmp_path, capsys):
    source = _big_dataset(tmp_path / "big.h5")
    with _mounted(tmp_path / "full", "size=100k") as full:
        target = full / "out.h5"
        write_fractures(target, [_fracture("f0", (8, 8))])  # an earlier output, which convert may replace
        previous = target.read_bytes()
        status, err = _flowlearn(capsys, "convert", str(source), str(target))
        _one_line(status, err, str(target), "No space left on device")
        assert target.read_bytes() == previous
        assert os.listdir(full) == ["out.h5"]  # no temporary file left behind


def test_predictions_on_a_full_disk(tmp_path):
    from flowlearn.data.files import atomic_hdf5
    from flowlearn.errors import OutputError

    with _mounted(tmp_path / "full", "size=100k") as full:
        with pytest.raises(OutputError, match=r"predictions\.h5: cannot write: No space left on device"):
            with atomic_hdf5(full / "predictions.h5") as f:
                f.create_dataset("pressure", data=np.zeros((128, 128)))
        assert os.listdir(full) == []


def test_checkpoints_on_a_full_disk(files, tmp_path, capsys, monkeypatch):
    # A checkpoint of the default CNN takes over 300 kB.
    with _mounted(tmp_path / "full", "size=100k") as full:
        (full / "last.ckpt").write_bytes(b"the previous checkpoint")
        overrides = [
            f"data.path={files['good']}",
            f"callbacks.model_checkpoint.dirpath={full}",
            "~callbacks.figures",
        ]
        status, err = _train_checks(tmp_path, capsys, monkeypatch, overrides)
        _one_line(status, err, f"{full}/best-epoch=000.ckpt: cannot write: No space left on device")
        assert (full / "last.ckpt").read_bytes() == b"the previous checkpoint"
        assert os.listdir(full) == ["last.ckpt"]  # no temporary file left behind


def test_a_run_directory_on_a_full_disk(files, tmp_path, capsys, monkeypatch):
    # The first output that does not fit (a figure, a checkpoint) stops the run.
    with _mounted(tmp_path / "run", "size=100k") as full:
        status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={files['good']}"])
        _one_line(status, err, f"error: {full}/", ": cannot write: No space left on device")


def test_a_read_only_folder(files, fake_run, tmp_path, capsys):
    with _mounted(tmp_path / "ro", "ro,size=10k") as read_only:
        status, err = _flowlearn(capsys, "convert", str(files["good"]), str(read_only / "out.h5"))
        _one_line(status, err, f"{read_only / 'out.h5'}: cannot write here", "not writable")
        status, err = _flowlearn(capsys, "generate", str(read_only / "gen.h5"), "--quiet")
        _one_line(status, err, f"{read_only / 'gen.h5'}: cannot write here")
        # Refused before the run is read or any figure drawn.
        status, err = _flowlearn(capsys, "report", str(fake_run), "--output", str(read_only / "report"))
        _one_line(status, err, f"{read_only / 'report' / 'report.md'}: cannot write here", "not writable")


def test_an_output_that_is_no_regular_file_is_left_alone(files, tmp_path, capsys):
    # The atomic rename of the written file had replaced it (as root, even the device /dev/full). Only a FIFO made
    # here: the test must never point a command at a real device.
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    status, err = _flowlearn(capsys, "convert", str(files["good"]), str(pipe))
    _one_line(status, err, f"{pipe}: is a FIFO (named pipe), not a regular file; give a file name to write")
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert os.listdir(tmp_path) == ["pipe"]  # no temporary file left behind


# ----------------------------------------------------------------------------------- in a real process, a few


def _process(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["seed=abc"], "error: seed must be an integer in [0, 4294967295], got 'abc'"),
        (["optimizer.lrr=0.1"], "error: Could not override 'optimizer.lrr'"),
    ],
)
def test_train_py_exits_2_with_one_line(files, tmp_path, overrides, message):
    result = _process(
        "train.py", f"hydra.run.dir={tmp_path / 'run'}", f"data.path={files['good']}", *overrides
    )
    _one_line(result.returncode, result.stderr, message)


def test_a_refused_run_says_why_in_its_folder(files, tmp_path):
    # Hydra makes the run folder before the run starts; it had held only .hydra/ and an empty train.log.
    run_dir = tmp_path / "run"
    line = "error: seed must be an integer in [0, 4294967295], got 'abc'"
    result = _process("train.py", f"hydra.run.dir={run_dir}", f"data.path={files['good']}", "seed=abc")
    _one_line(result.returncode, result.stderr, line)
    assert (run_dir / "error.txt").read_text() == f"{line}\n"
    report = _process("-m", "flowlearn.cli", "report", str(run_dir))
    _one_line(
        report.returncode,
        report.stderr,
        f"{run_dir}: the run failed: seed must be an integer in [0, 4294967295], got 'abc'",
    )


def test_a_refused_run_leaves_no_folder_that_hydra_named_itself(files, tmp_path):
    # Each refused attempt had left an outputs/<date>/<time>/ of .hydra/, train.log and error.txt behind.
    work = tmp_path / "work"
    (work / "outputs" / "earlier").mkdir(parents=True)
    result = _process(str(ROOT / "train.py"), f"data.path={files['good']}", "seed=abc", cwd=work)
    _one_line(
        result.returncode, result.stderr, "error: seed must be an integer in [0, 4294967295], got 'abc'"
    )
    assert [p.relative_to(work) for p in work.rglob("*")] == [Path("outputs"), Path("outputs/earlier")]


def test_a_run_in_the_folder_of_a_refused_one_removes_its_record(files, tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "error.txt").write_text("error: an earlier refusal\n")
    status, err = _train_checks(
        tmp_path, capsys, monkeypatch, [f"data.path={files['good']}", "~callbacks.figures"]
    )
    assert status == 0, err
    assert (run_dir / "predictions.h5").is_file() and not (run_dir / "error.txt").exists()


def test_a_flow_along_y_is_refused_by_training_and_predict(trained_runs, tmp_path, capsys, monkeypatch):
    # The solves impose the heads on the first and last columns: a map flowing along y had been solved across its
    # flow, silently (its LCL flow rate 6 % off on the audit's map, training's departure error 0.99).
    along_y = tmp_path / "along_y.h5"
    fracture = _fracture("f0", shape=(8, 6))
    write_fractures(
        along_y, [Fracture("f0", fracture.aperture.T, fracture.pressure.T, voxel_size=1e-5, flow_axis="y")]
    )
    message = f"{along_y}: group 'f0': attribute 'flow_axis' is 'y'; training and prediction solve with the flow along x"
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={along_y}"])
    _one_line(status, err, message)
    output = tmp_path / "predictions.h5"
    result = _process(
        "-m", "flowlearn.cli", "predict", str(trained_runs["cnn"]), str(along_y), "-o", str(output)
    )
    _one_line(result.returncode, result.stderr, message)
    assert not output.exists()


def test_a_run_into_a_folder_that_holds_another_run_is_refused_before_hydra_writes(files, fake_run, tmp_path):
    # The new run had overwritten .hydra/ and predictions.h5 and put its checkpoints beside the old ones.
    recorded = (fake_run / ".hydra" / "config.yaml").read_text()
    result = _process("train.py", f"hydra.run.dir={fake_run}", f"data.path={files['good']}")
    _one_line(
        result.returncode,
        result.stderr,
        f"hydra.run.dir: {fake_run} already holds a run's outputs (checkpoints/last.ckpt and 2 more): give a new "
        f"folder, or resume it with ckpt_path={fake_run / 'checkpoints' / 'last.ckpt'}",
    )
    assert (fake_run / ".hydra" / "config.yaml").read_text() == recorded
    sweep = tmp_path / "sweep"
    (sweep / "1").mkdir(parents=True)
    (sweep / "1" / "metrics.csv").write_text("epoch\n")
    result = _process("train.py", "-m", f"hydra.sweep.dir={sweep}", f"data.path={files['good']}", "seed=0,1")
    _one_line(
        result.returncode,
        result.stderr,
        f"hydra.sweep.dir: {sweep} already holds a run's outputs (1/metrics.csv): give a new folder",
    )
    assert sorted(p.name for p in sweep.iterdir()) == ["1"]


@pytest.mark.parametrize("launcher", ["sequential", "local"])
def test_a_local_sweep_records_its_failed_run_and_finishes_the_others(files, tmp_path, launcher):
    # sequential: the default of -m, every run in this process; local: one submitit subprocess per run. Hydra's own
    # launchers had ended the sweep at the failure (or in UncompletedJobError) with nothing to say which run failed.
    sweep = tmp_path / "sweep"
    result = _process(
        "train.py", "-m", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}", f"data.path={files['good']}",
        "trainer.max_epochs=1", "~callbacks.figures", "seed=abc,0",
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "error: seed must be an integer in [0, 4294967295], got 'abc'" in result.stderr.splitlines()
    assert "1 of 2 run(s) failed; the other runs finished" in result.stdout
    # The sweep's last line is the failed run's error, without Hydra's "Error executing job with overrides" first.
    assert "Error executing job" not in result.stderr + result.stdout
    assert result.stderr.splitlines()[-1] == "error: seed must be an integer in [0, 4294967295], got 'abc'"
    error = (sweep / "0" / "error.txt").read_text().splitlines()[0]
    assert error == "error: seed must be an integer in [0, 4294967295], got 'abc'"
    assert (sweep / "1" / "predictions.h5").is_file() and not (sweep / "1" / "error.txt").exists()
    report = _process("-m", "flowlearn.cli", "report", str(sweep))
    assert report.returncode == 1
    assert (
        f"{sweep / '0'} failed: error: seed must be an integer in [0, 4294967295], got 'abc'" in report.stderr
    )


def test_a_slurm_sweep_without_a_controller_submits_and_writes_nothing(files, tmp_path, no_controller):
    # Where the sweep had written multirun.yaml, then printed submitit's 55-line traceback of a failed sbatch.
    sweep = tmp_path / "sweep"
    result = _process(
        "train.py", "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}", f"data.path={files['good']}",
        "optimizer.lr=1e-3,3e-3",
    )  # fmt: skip
    _one_line(
        result.returncode, result.stderr, "hydra/launcher=slurm: no SLURM controller answers `scontrol ping`",
        "SLURM_CONF", "Nothing was submitted",
    )  # fmt: skip
    assert list(sweep.iterdir()) == []  # checked writable up front, then left empty: no multirun.yaml


@pytest.mark.parametrize(
    "override, message",
    [
        # A 41-line submitit traceback; 1,000 CPUs a task accepted on this machine.
        (
            "hydra.launcher.timeout_min=0",
            "error: hydra.launcher.timeout_min must be a positive integer, got 0",
        ),
        (
            "hydra.launcher.cpus_per_task=1000",
            f"error: hydra.launcher.cpus_per_task must be an integer in [1, {usable_cores()}], got 1000",
        ),
    ],
)
def test_a_local_sweep_refuses_impossible_job_sizes(files, tmp_path, override, message):
    sweep = tmp_path / "sweep"
    result = _process(
        "train.py",
        "-m",
        "hydra/launcher=local",
        override,
        f"hydra.sweep.dir={sweep}",
        f"data.path={files['good']}",
    )
    _one_line(result.returncode, result.stderr, message)
    assert not any(sweep.glob("*/checkpoints"))


def test_train_py_with_an_unwritable_run_directory(files, tmp_path):
    with _mounted(tmp_path / "ro", "ro,size=10k") as read_only:
        result = _process("train.py", f"hydra.run.dir={read_only / 'run'}", f"data.path={files['good']}")
        _one_line(result.returncode, result.stderr, f"hydra.run.dir: cannot create {read_only / 'run'}")


def test_train_py_with_an_empty_run_directory(files, tmp_path):
    # hydra.run.dir=$OUT with $OUT unset: Hydra would write the run into the current directory.
    work = tmp_path / "work"
    work.mkdir()
    result = _process(str(ROOT / "train.py"), "hydra.run.dir=", f"data.path={files['good']}", cwd=work)
    _one_line(result.returncode, result.stderr, "hydra.run.dir is empty: give a folder for the outputs")
    assert list(work.iterdir()) == []


def test_flowlearn_command_exits_2_with_one_line(tmp_path):
    result = _process("-m", "flowlearn.cli", "generate", str(tmp_path / "out.h5"), "--omega", "3")
    _one_line(
        result.returncode, result.stderr, "flowlearn generate: error: --omega must be in (0, 2), got 3.0"
    )
