"""Every option of every config group composes with the entry config and instantiates; every solver this machine
can run trains a composed run end to end."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict
from test_train import EMBEDDED, ROOT, make_dataset, run_train

from flowlearn.data.datamodule import find_fractures
from flowlearn.errors import UnavailableError
from flowlearn.runs import metric_series, read_metrics
from flowlearn.training import build
from flowlearn.training.build import build_correction, model_inputs
from flowlearn.training.config import validate_config

CONFIGS = ROOT / "configs"
GROUPS = sorted(
    str(path.parent.relative_to(CONFIGS)) for path in CONFIGS.rglob("*.yaml") if path.parent != CONFIGS
)
OPTIONS = [
    (group, path.stem) for group in dict.fromkeys(GROUPS) for path in sorted((CONFIGS / group).glob("*.yaml"))
]


def _compose(tmp_path: Path, *overrides: str):
    OmegaConf.register_new_resolver("repo_root", lambda: str(ROOT), replace=True)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"hydra.run.dir={tmp_path}"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)  # what a run sets, for ${hydra:runtime.output_dir}
    HydraConfig.instance().set_config(cfg)
    return cfg


def _unavailable(error: BaseException | None) -> UnavailableError | None:
    """The UnavailableError behind ``error`` (Hydra wraps what a constructor raises), or None."""
    while error is not None and not isinstance(error, UnavailableError):
        error = error.__cause__
    return error


def _solver_available(option: str) -> bool:
    cfg = OmegaConf.load(CONFIGS / "solver" / f"{option}.yaml")
    try:
        instantiate(cfg)
    except Exception as error:
        if _unavailable(error) is None:
            raise
        return False
    return True


def test_every_group_of_the_entry_config_has_a_directory():
    defaults = OmegaConf.load(CONFIGS / "train.yaml").defaults
    named = {next(iter(entry)) for entry in defaults if isinstance(entry, dict)}
    assert named <= set(GROUPS) | {"hydra/launcher"}


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_instantiates(tmp_path, group, option):
    # The paper's experiment fits one fracture.
    data = make_dataset(tmp_path / "one.h5", count=1, shape=(12, 16)) if group == "experiment" else EMBEDDED
    cfg = _compose(tmp_path, f"{group}={option}", f"data.path={data}")
    refs = find_fractures(EMBEDDED)
    if group == "solver":
        try:
            engine = instantiate(cfg.solver)
        except Exception as error:
            # A backend this machine lacks (a GPU, Julia) says so at construction, naming what is missing.
            assert "needs" in str(_unavailable(error))
        else:
            assert engine.name == {"cpu": engine.name}.get(option, option)
    elif group == "hydra/launcher":
        launcher = instantiate(cfg.hydra.launcher)
        names = {"local": "LocalLauncher", "slurm": "SlurmLauncher", "sequential": "SequentialLauncher"}
        # flowlearn's own, which record failed runs.
        assert type(launcher).__module__ == "hydra_plugins.flowlearn_launcher"
        assert type(launcher).__name__ == names[option]
    elif group in ("data", "experiment"):
        datamodule = instantiate(cfg.data)
        datamodule.setup()
        law = instantiate(cfg.law)
        model = build_correction(cfg.model, law, datamodule.splits["train"].refs)
        assert sum(p.numel() for p in model.parameters()) > 0
    elif group == "model":
        law = instantiate(cfg.law)
        model = build_correction(cfg.model, law, refs[:1] if option == "pixel" else refs)
        assert sum(p.numel() for p in model.parameters()) > 0
        # The model reads the batches of a DataModule that delivers its inputs, and starts from the law.
        datamodule = instantiate(cfg.data, inputs=list(model_inputs(cfg.model)))
        batch = next(iter(datamodule.train_dataloader()))
        raw = model(batch["inputs"])
        assert raw.shape == batch["aperture"].shape and (raw == law.initial_raw).all()
    elif group == "debug":
        # Overrides of the other groups' keys (the package is global): the run's own checks accept them.
        validate_config(cfg)
        assert cfg.callbacks.figures is None and cfg.data.max_fractures <= 12
    elif group == "optimizer":
        optimizer = instantiate(cfg.optimizer)([torch.zeros(2, requires_grad=True)])
        assert isinstance(optimizer, torch.optim.Optimizer)
    elif group == "callbacks":
        callbacks = [instantiate(c) for c in cfg.callbacks.values()]
        assert {type(c).__name__ for c in callbacks} >= {"EpochCheckpoint", "FigureCallback"}
    else:
        assert instantiate(cfg[group]) is not None


# The default solver=cpu trains in CI; each other engine trains under -m slow (about 10 s each, mostly a run's
# start-up): their solves and gradients are checked directly in test_solve.py and test_derivatives.py, and their
# configs are instantiated by test_every_option_composes_and_instantiates.
@pytest.mark.parametrize(
    "option",
    [
        pytest.param(stem, marks=() if stem == "cpu" else pytest.mark.slow)
        for stem in sorted(p.stem for p in (CONFIGS / "solver").glob("*.yaml"))
    ],
)
def test_a_composed_run_trains_with_every_available_solver(tmp_path, option):
    if not _solver_available(option):
        pytest.skip(f"solver={option} cannot run on this machine")
    dataset = make_dataset(tmp_path / "data.h5", count=3, shape=(12, 16))
    overrides = [f"data.path={dataset}", f"solver={option}", "trainer.max_epochs=2", "model.channels=4"]
    run_train(*overrides, "~callbacks.figures", run_dir=tmp_path / "run")
    _, loss = metric_series(read_metrics(tmp_path / "run"), "train/loss")
    assert len(loss) == 2 and loss[1] < loss[0]


def test_debug_fdr_runs_one_batch_of_each_loop_on_the_embedded_dataset(tmp_path):
    # The whole pipeline in seconds (about 10 s, mostly start-up): one training batch, one validation batch, one
    # test batch, then the predictions of the 12 fractures drawn and the closing line.
    result = run_train("debug=fdr", run_dir=tmp_path)
    epochs, loss = metric_series(read_metrics(tmp_path), "train/loss")
    assert list(epochs) == [0] and len(loss) == 1
    output = result.stdout + result.stderr
    assert "done: test, 2 fractures: beats " in output
    # Before the first progress bar, a line says what start-up is doing (the 96 fractures of the file are checked).
    assert output.index(f"preparing: 96 fractures of {EMBEDDED} checked") < output.index("Epoch 0")
    with h5py.File(tmp_path / "predictions.h5") as f:
        assert len(f) == 12


@pytest.mark.parametrize("compiled", [True, False])
def test_the_preparing_line_announces_the_kernels_compilation_of_a_first_run(monkeypatch, compiled):
    from flowlearn.darcy import kernels
    from flowlearn.training.train import _preparing

    monkeypatch.setattr(kernels, "compiled", lambda: compiled)
    line = _preparing([str(EMBEDDED)])
    assert line.startswith(
        f"preparing: 96 fractures of {EMBEDDED} checked; building the model and the solver"
    )
    assert (
        "the first solves compile the solver's kernels (numba), about 10 s on this first run" in line
    ) != compiled


def test_the_kernels_of_this_checkout_are_compiled_after_a_solve():
    from flowlearn import DarcyProblem, solve_pressure
    from flowlearn.darcy import kernels

    solve_pressure(torch.zeros(6, 8, dtype=torch.float64), DarcyProblem.fracture((6, 8)))
    assert kernels.compiled()


@pytest.mark.parametrize("times_needed, stops", [(10.0, False), (2.0, True)])
def test_malloc_stops_keeping_freed_memory_only_where_the_memory_is_short_for_it(
    tmp_path, monkeypatch, times_needed, stops
):
    """Memory for the network's training but not for KEPT_HEAP_GROWTH times it: freed memory goes back (the effect
    on malloc is tests/test_runtime.py's); with room to spare it is kept."""
    cfg = _compose(tmp_path, "model=cnn")
    refs = find_fractures(EMBEDDED)[:4]
    needed = build.training_bytes(cfg.model, 2, [refs[0].shape], 1)
    monkeypatch.setattr(build, "available_memory", lambda: int(times_needed * needed))
    stopped = []
    monkeypatch.setattr(build, "stop_keeping_freed_memory", lambda: stopped.append(True) or True)
    build_correction(cfg.model, instantiate(cfg.law), refs)
    assert bool(stopped) == stops
