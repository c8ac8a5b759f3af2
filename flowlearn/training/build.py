"""Building the trained model from config: for a new run (filled in from the data), or from a finished run."""

from __future__ import annotations

import bisect
import importlib
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from flowlearn.checks import available_memory, is_integer
from flowlearn.data.datamodule import FractureRef
from flowlearn.data.inputs import DEFAULT_INPUTS, channel_count
from flowlearn.errors import CheckpointError, ConfigError, RunDirectoryError
from flowlearn.models.correction import PixelCorrection
from flowlearn.models.laws import PermeabilityLaw
from flowlearn.runs import CONFIG_FILE, run_config
from flowlearn.runtime import stop_keeping_freed_memory
from flowlearn.training.checkpoints import read_checkpoint
from flowlearn.training.config import model_precision
from flowlearn.training.module import TRAINING_DATA, FractureFlowModule

log = logging.getLogger(__name__)


def model_inputs(model_cfg: DictConfig) -> tuple[str, ...]:
    """The input channels the configured model reads: ``model.inputs``, or the aperture for a model without
    that option (a pixel model)."""
    return tuple(OmegaConf.select(model_cfg, "inputs", default=DEFAULT_INPUTS))


def model_dtype(cfg: DictConfig) -> torch.dtype:
    """The dtype of the correction model that a run's ``trainer.precision`` asks for
    (:func:`~flowlearn.training.config.model_precision`)."""
    return getattr(torch, model_precision(cfg))


def model_class(target: str) -> type | None:
    """The class a model config's ``_target_`` names, None where it names none. (Hydra's get_class logs lines of
    its own before it raises.)"""
    module_name, _, class_name = str(target).rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), class_name, None)
    except (ImportError, ValueError):  # ValueError: an empty module name
        return None
    return found if isinstance(found, type) else None


def build_correction(
    model_cfg: DictConfig,
    law: PermeabilityLaw,
    train_refs: Sequence[FractureRef],
    batch_size: int = 1,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """Instantiate the correction model in ``dtype``, filling in what the data decides: the shape of a pixel model,
    the dimension of a CNN, and the law's starting value. A network too large for the training maps or for the
    memory available in batches of ``batch_size`` is refused first (:func:`check_network_size`); where the memory
    is enough for its training but not for :data:`KEPT_HEAP_GROWTH` times it, malloc stops keeping freed memory
    (:func:`flowlearn.runtime.stop_keeping_freed_memory`)."""
    target = model_class(model_cfg._target_)
    if target is None:
        raise ConfigError(f"model._target_: {model_cfg._target_} names no class of this flowlearn")
    shapes = sorted({ref.shape for ref in train_refs})
    if issubclass(target, PixelCorrection):
        if len(train_refs) != 1:
            raise ConfigError(
                f"model=pixel learns one W per pixel of one fracture, but the training split has {len(train_refs)} "
                "fractures: use model=cnn, or give one fracture with data.fractions=[1,0,0]"
            )
        return instantiate(model_cfg, shape=shapes[0], initial=law.initial_raw).to(dtype)
    dims = {len(shape) for shape in shapes}
    if len(dims) != 1:
        raise ConfigError(f"the training fractures mix 2D and 3D shapes: {shapes}")
    dim = dims.pop()
    # A batch holds no more fractures than the training split has, whatever data.batch_size asks for (100,000 on 6
    # fractures had been refused as needing 4.57e3 GiB).
    needed = check_network_size(model_cfg, dim, shapes, min(batch_size, len(train_refs)), dtype)
    if KEPT_HEAP_GROWTH * needed > available_memory() and stop_keeping_freed_memory():
        log.info(
            "the model needs about %.3g GiB to train, and up to %.3g times that with the memory it frees kept for "
            "reuse: more than this process has available, so freed memory goes back to the system (slower steps)",
            needed / 2**30,
            KEPT_HEAP_GROWTH,
        )
    return instantiate(model_cfg, dim=dim, initial=law.initial_raw).to(dtype)


# Numbers of training state per parameter: the weight, its gradient, Adam's two moments and its update's temporaries
# (a training step of a 40M-parameter U-Net measured 4.3 float64 numbers per parameter, Lightning aside).
STATE_NUMBERS_PER_PARAMETER = 5
# Unfolded inputs (im2col columns) of the largest convolution that a training step holds at once: CPU convolutions of
# float64 unfold the whole batch forwards and again backwards (the peak of a training step in batches of 4 measured
# 3.1 of them at kernel 5 on 256x256 maps, 3.5 at kernel 25 on 64x64). float32 convolutions unfold less or not at
# all: the estimate stays on the safe side for them. A deep network holds more: with every freed block kept on the
# heap for the solves (flowlearn.runtime), each convolution's unfolded input leaves a block of its own behind, and a
# step's peak grew by up to one unfolded input per layer (2026-11-27, the CNN in float64, batches of 4 on 64x64
# maps: 0.6-1.9 GB over four processes at depth 32, 7.0 GB at depth 128, against 0.4 and 0.9 GB estimated from the
# largest alone; how much stays behind varies with how the threads' allocations interleave). So the estimate counts
# the larger of these copies of the largest and one of every convolution's.
UNFOLDED_COPIES = 3.5
# The peak of a network's training over :func:`training_bytes` while malloc keeps freed memory for reuse
# (flowlearn.runtime): the CNN in float64 on the embedded dataset, batches of 4, peaked 1.3x its estimate above the
# process's own gigabyte at depth 3 with 16 channels and 1.9-2.0x at depth 4-8 with 32-64 channels (2026-11-28),
# against 0.2-0.6x under glibc's own settings. 2.5 leaves a margin.
KEPT_HEAP_GROWTH = 2.5


def check_network_size(
    model_cfg: DictConfig,
    dim: int,
    shapes: Sequence[tuple[int, ...]],
    batch_size: int,
    dtype: torch.dtype = torch.float64,
) -> int:
    """Raise :class:`ConfigError` for a network whose ``kernel_size`` or ``levels`` the training maps ``shapes``
    cannot use, or the memory available cannot train in batches of ``batch_size`` in ``dtype``, naming the largest
    value that works. A kernel beyond twice the longest side sees nothing but padding, a level beyond the shortest
    side's halvings nothing but one pixel, and :func:`training_bytes` must stay within the memory available.
    Checked before anything is allocated. Returns :func:`training_bytes` of the network."""
    longest = max(max(shape) for shape in shapes)
    shortest = min(min(shape) for shape in shapes)
    map_bounds = {
        "kernel_size": (
            2 * longest - 1,
            f"beyond 2 x {longest} - 1 a kernel reaches past the longest training map ({longest} pixels) on both "
            "sides from every pixel, into padding only",
        ),
        "levels": (
            math.ceil(math.log2(shortest)),
            f"halving the shortest side of the training maps ({shortest} pixels) more often leaves one pixel",
        ),
    }
    kernel = model_cfg.get("kernel_size")
    if is_integer(kernel) and kernel > 1:
        # Each layer widens the receptive field by kernel - 1 pixels; the bisection below builds networks this deep.
        map_bounds["depth"] = (
            math.ceil((2 * longest - 2) / (kernel - 1)),
            f"beyond it the stack of {kernel}-pixel kernels sees past the longest training map ({longest} pixels) "
            "on both sides from every pixel, into padding only",
        )
    options = {name: bound for name, bound in map_bounds.items() if name in model_cfg}
    memory = available_memory()
    within = f"within the {memory / 2**30:.3g} GiB this process has available, in batches of {batch_size}"

    def largest_fitting(name: str) -> int | None:
        """The largest value of option ``name`` up to its map bound whose training fits in memory, the other
        options unchanged; None when none does."""
        values = range(1, options[name][0] + 1, 2 if name == "kernel_size" else 1)  # kernels are odd
        # Memory grows with each option: the values that fit come first.
        count = bisect.bisect_left(
            values,
            True,
            key=lambda v: (
                training_bytes(model_cfg, dim, shapes, batch_size, dtype=dtype, **{name: v}) > memory
            ),
        )
        return values[count - 1] if count else None

    for name, (bound, reason) in options.items():
        value = model_cfg[name]
        if is_integer(value) and value > bound:
            fitting = largest_fitting(name)
            memory_note = "" if fitting == bound else f", and at most {fitting} to train {within}"
            raise ConfigError(
                f"model.{name} must be at most {bound} on these maps ({reason}){memory_note}, got {value}"
            )
    needed = training_bytes(model_cfg, dim, shapes, batch_size, dtype=dtype)
    if needed > memory:
        sizes = ", ".join(f"model.{name}={value}" for name, value in model_cfg.items() if is_integer(value))
        fitting = [(name, largest_fitting(name)) for name in options]
        hint = ", ".join(f"model.{name} up to {largest}" for name, largest in fitting if largest is not None)
        raise ConfigError(
            f"the model ({sizes}) needs about {needed / 2**30:.3g} GiB to train on maps of up to "
            f"{'x'.join(map(str, max(shapes, key=math.prod)))} pixels (its parameters with their gradients and "
            f"Adam's moments, its activations, its convolutions' unfolded inputs), more than fits {within}; "
            + (f"{hint} would fit, the other values unchanged" if hint else "make it smaller")
        )
    return needed


def training_bytes(
    model_cfg: DictConfig,
    dim: int,
    shapes: Sequence[tuple[int, ...]],
    batch_size: int,
    *,
    dtype: torch.dtype = torch.float64,
    **values: int,
) -> int:
    """An estimate of the memory a training step of the network ``model_cfg`` (``values`` replacing its
    options) takes in ``dtype`` on the largest of ``shapes`` in batches of ``batch_size``, from the network built
    and run on torch's meta device, which computes shapes and allocates nothing: its parameters (with their
    gradients and Adam's moments), every layer's output (kept for the backward pass) and the unfolded inputs of its
    largest convolution."""
    largest = max(shapes, key=math.prod)
    activations = unfolded = all_unfolded = 0

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        nonlocal activations, unfolded, all_unfolded
        activations += output.numel() * output.element_size()
        if isinstance(module, nn.modules.conv._ConvNd):
            columns = inputs[0].shape[0] * module.in_channels * math.prod(module.kernel_size)
            size = columns * math.prod(output.shape[2:]) * output.element_size()
            unfolded, all_unfolded = max(unfolded, size), all_unfolded + size

    with torch.device("meta"):
        network = instantiate(OmegaConf.merge(model_cfg, values), dim=dim)
        for module in network.modules():
            if not list(module.children()):
                module.register_forward_hook(record)
        channels = channel_count(model_inputs(model_cfg), dim)
        network.to(dtype)(torch.zeros(batch_size, channels, *largest, dtype=dtype))
    parameters = sum(p.numel() for p in network.parameters())
    state = parameters * STATE_NUMBERS_PER_PARAMETER * dtype.itemsize
    return round(state + activations + max(UNFOLDED_COPIES * unfolded, all_unfolded))


def load_run(
    run_dir: str | Path, checkpoint: str | Path | None = None
) -> tuple[FractureFlowModule, DictConfig]:
    """Rebuild a trained module from a run directory (its ``.hydra/config.yaml`` and a checkpoint).

    ``checkpoint`` defaults to ``checkpoints/last.ckpt`` in the run directory. What the data decided at training
    time (a pixel model's shape, a network's dimension) is read from the checkpoint's weights; the network's input
    channels and the training split's aperture statistics from its training-data record (checkpoints written
    before that record existed: the inputs of the config, no statistics).
    """
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    checkpoint = Path(checkpoint) if checkpoint else run_dir / "checkpoints" / "last.ckpt"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    for needed, what in ((config_path, "the run's config"), (checkpoint, "a checkpoint")):
        if needed.is_dir():
            raise FileNotFoundError(f"{needed}: is a directory, not {what} file")
        if not needed.exists():
            raise FileNotFoundError(f"{run_dir}: {what} is missing ({needed} does not exist)")
    saved = read_checkpoint(checkpoint, option=None, weights_only=True)
    cfg = run_config(run_dir)
    try:
        law = instantiate(cfg.law)
    except InstantiationException as error:
        raise RunDirectoryError(
            f"{config_path}: the run's law ({cfg.law.get('_target_')}) does not exist in this flowlearn; runs "
            "trained with law=cubic or law=transmissivity (now law=ap2, T = Ā·Ap²/12·W, and law=lcl) need training "
            "again"
        ) from error
    state, record = saved["state_dict"], saved.get(TRAINING_DATA, {})
    # A run trained before the power-law baseline existed carries no exponent: that baseline stays absent.
    state.setdefault("power_exponent", torch.tensor(math.nan, dtype=torch.float64))
    target = model_class(cfg.model._target_)
    if target is None:
        raise RunDirectoryError(
            f"{config_path}: the run's model ({cfg.model._target_}) does not exist in this flowlearn"
        )
    weights = "correction.raw" if target is PixelCorrection else "correction.head.weight"
    if weights not in state:
        # Another kind of model (a pixel model's checkpoint in a network's run, or the reverse): its weights give
        # neither the shape nor the dimension to build this run's model with, so this comes before check_checkpoint.
        trained = record.get("model", "another kind of model")
        raise CheckpointError(
            f"{checkpoint} was trained with {trained}, and {config_path} has model={target.config_name}: use a "
            f"checkpoint of a run with model={target.config_name}, or the run of this checkpoint"
        )
    if target is PixelCorrection:
        shape = tuple(state["correction.raw"].shape)
        correction = instantiate(cfg.model, shape=shape, initial=law.initial_raw)
    else:
        dim = state["correction.head.weight"].ndim - 2
        inputs = list(record.get("inputs", model_inputs(cfg.model)))
        # Runs before the plates anchor existed (their configs do not name it) trained the bare network.
        exact = cfg.model.get("exact_on_plates", False)
        correction = instantiate(
            cfg.model, dim=dim, initial=law.initial_raw, inputs=inputs, exact_on_plates=exact
        )
    correction.to(model_dtype(cfg))
    module = FractureFlowModule(correction, law, solver=None, training_statistics=record.get("statistics"))
    module.check_checkpoint(saved, str(checkpoint))
    try:
        module.load_state_dict(state)
    except RuntimeError as error:  # a checkpoint written before its record says what it fits
        first = str(error).splitlines()[1].strip() if len(str(error).splitlines()) > 1 else str(error)
        raise CheckpointError(
            f"{checkpoint} does not fit the model of {config_path} ({correction.description}): {first}"
        ) from None
    return module, cfg
