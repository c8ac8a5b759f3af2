"""`python train.py` overrides that a run cannot honour as asked: one `error:` line naming the option, its value and
what is expected, exit status 2, raised with the config checks before anything is trained or written. One test per
case of the fourth bad-input audit (trainer, checkpoints, optimizer, solver), and the one warning of a law that
reads walls on data that has none."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_configs import _compose
from test_user_errors import _fracture, _one_line, _plates, _train_checks

from flowlearn.data.files import write_fractures
from flowlearn.errors import ConfigError
from flowlearn.models import ClosedFormLaw, InclinedCubicLaw
from flowlearn.training.config import validate_config
from flowlearn.training.train import geometry_warnings


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Four uniform fractures without walls, of voxel size 1e-5 m."""
    path = tmp_path_factory.mktemp("data") / "plain.h5"
    write_fractures(path, _plates(4))
    return path


CHECKPOINT = "callbacks.model_checkpoint"

CONFIG_ROWS = [
    # Lightning's smoke test trained one step and wrote predictions, but no metrics.csv and no checkpoint.
    (
        "+trainer.fast_dev_run=true",
        "trainer.fast_dev_run=True is Lightning's smoke test: it logs nothing and checkpoints nothing, so the run "
        "could be neither reported nor predicted; use trainer.max_epochs=1 +trainer.limit_train_batches=1",
    ),
    ("+trainer.fast_dev_run=3", "trainer.fast_dev_run=3 is Lightning's smoke test"),
    # A run that ended without any checkpoint.
    (
        f"{CHECKPOINT}.save_top_k=0 {CHECKPOINT}.save_last=false",
        f"{CHECKPOINT}.save_top_k=0 with save_last=False keeps no checkpoint: the run could be neither predicted "
        f"nor resumed; set {CHECKPOINT}.save_top_k=1 or {CHECKPOINT}.save_last=true",
    ),
    (f"{CHECKPOINT}.save_top_k=0 ~{CHECKPOINT}.save_last", f"{CHECKPOINT}.save_top_k=0 with save_last=None"),
    # Trained the one epoch of max_epochs without a word.
    (
        "+trainer.min_epochs=5",
        "trainer.min_epochs=5 is more than trainer.max_epochs=1: the run would stop at trainer.max_epochs; raise "
        "it, or lower trainer.min_epochs",
    ),
    # "maybe" and "no" switched the option on; a dampening of -5 multiplied the gradient in the buffer by 6.
    ("optimizer=sgd +optimizer.nesterov=maybe", "optimizer.nesterov must be true or false, got 'maybe'"),
    ("+optimizer.maximize=no", "optimizer.maximize must be true or false, got 'no'"),
    ("+optimizer.foreach=1", "optimizer.foreach must be true or false, got 1"),
    ("optimizer=sgd +optimizer.dampening=-5", "optimizer.dampening must be a number in [0, 1), got -5"),
    ("optimizer=sgd +optimizer.dampening=1", "optimizer.dampening must be a number in [0, 1), got 1"),
    ("optimizer=sgd +optimizer.dampening=abc", "optimizer.dampening must be a number in [0, 1), got 'abc'"),
    # The best checkpoint was written outside the run folder.
    (
        f"{CHECKPOINT}.filename='../../escape-{{epoch}}'",
        f"{CHECKPOINT}.filename must be a file name without '/' or '..' (the checkpoints stay in "
        f"{CHECKPOINT}.dirpath; a metric field such as {{val/mse:.3g}} needs "
        f"{CHECKPOINT}.auto_insert_metric_name=false), got '../../escape-{{epoch}}'",
    ),
    (f"{CHECKPOINT}.filename='best/{{epoch}}'", "got 'best/{epoch}'"),
    # Lightning writes the metric's name in, and its '/' makes a folder.
    (f"{CHECKPOINT}.filename='best-{{val/mse:.3f}}'", "got 'best-{val/mse:.3f}'"),
    (f"{CHECKPOINT}.filename=''", f"{CHECKPOINT}.filename must be a file name"),
]


@pytest.mark.parametrize("overrides, message", CONFIG_ROWS)
def test_config_mistakes(data, tmp_path, capsys, monkeypatch, overrides, message):
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={data}", *overrides.split()])
    _one_line(status, err, message)
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not list(tmp_path.glob("escape-*"))


@pytest.mark.parametrize("solver, rtol", [("amg", "1e-300"), ("cpu", "1e-16")])
def test_a_solver_tolerance_below_float64s_resolution_names_the_bound(
    data, tmp_path, capsys, monkeypatch, solver, rtol
):
    # AMG ran to its iteration limit, only after the model was built and the first batch solved. The engine's own
    # check, when train.py builds it: before any training, with nothing heavy before it.
    overrides = [f"data.path={data}", f"solver={solver}", f"solver.rtol={rtol}"]
    status, err = _train_checks(tmp_path, capsys, monkeypatch, overrides)
    _one_line(status, err, "solver", "rtol", "1e-15", rtol)
    assert not (tmp_path / "run" / "checkpoints").exists()


# (refused, accepted beside it, the refusal's message): each check refuses only what cannot work.
NEIGHBOURS = [
    # A metric field with auto_insert_metric_name=false: its name is not written, so its '/' makes no folder.
    (
        f"{CHECKPOINT}.filename='best-{{val/mse:.3f}}'",
        f"{CHECKPOINT}.filename='best-{{val/mse:.3f}}' +{CHECKPOINT}.auto_insert_metric_name=false",
        f"{CHECKPOINT}.filename must be a file name",
    ),
    # save_last keeps last.ckpt, save_top_k=-1 every epoch's.
    (
        f"{CHECKPOINT}.save_top_k=0 {CHECKPOINT}.save_last=false",
        f"{CHECKPOINT}.save_top_k=0",
        "keeps no checkpoint",
    ),
    (
        f"{CHECKPOINT}.save_top_k=0 {CHECKPOINT}.save_last=false",
        f"{CHECKPOINT}.save_top_k=-1 {CHECKPOINT}.save_last=false",
        "keeps no checkpoint",
    ),
    ("+trainer.fast_dev_run=true", "+trainer.fast_dev_run=false", "trainer.fast_dev_run=True"),
    ("+trainer.min_epochs=31", "+trainer.min_epochs=30", "trainer.min_epochs=31 is more than"),
    (
        "optimizer=sgd +optimizer.dampening=-0.1",
        "optimizer=sgd +optimizer.dampening=0.5 +optimizer.nesterov=false",
        "optimizer.dampening",
    ),
    ("+optimizer.foreach=maybe", "+optimizer.foreach=null", "optimizer.foreach must be true or false"),
]


@pytest.mark.parametrize("refused, accepted, message", NEIGHBOURS)
def test_a_check_refuses_only_what_cannot_work(data, tmp_path, refused, accepted, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(_compose(tmp_path, f"data.path={data}", *refused.split()))
    validate_config(_compose(tmp_path, f"data.path={data}", *accepted.split()))


def test_a_law_of_walls_on_data_without_any_says_it_is_the_lcl_in_one_line(data):
    # law=inclined trained the LCL under its own name, with a warning that counted fractures.
    (line,) = geometry_warnings([str(data)], InclinedCubicLaw())
    assert line == (
        f"law=inclined: no fracture of {data} has walls ('bottom', 'top' of a 2D map), so the law reduces to the "
        "local cubic law (law=lcl) everywhere"
    )
    # mlcl keeps its wedge factor, from the aperture's slope, where the voxel size is known.
    (line,) = geometry_warnings([str(data)], ClosedFormLaw())
    assert line.endswith("so the law reduces to the local cubic law times the wedge factor everywhere")


def test_a_law_of_walls_on_data_where_some_have_walls_names_the_others(data, tmp_path):
    walled = tmp_path / "walled.h5"
    write_fractures(walled, [_fracture("g0", bottom=np.full((6, 8), -5e-5), top=np.full((6, 8), 5e-5))])
    lines = geometry_warnings([str(data), str(walled)], InclinedCubicLaw())
    assert lines == [
        "law=inclined: 4 fracture(s) have no walls, so the mid-surface is taken as flat (cos θ = 1): the "
        f"inclination tensor is the identity there; the first: {data}: group 'f0'"
    ]
