"""``flowlearn predict``: apply a trained run to new aperture maps and write ``predictions.h5`` for them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from flowlearn.data.datamodule import FractureDataset, find_fractures
from flowlearn.data.files import read_fracture, validate_file
from flowlearn.data.inputs import missing_geometry, require_inputs
from flowlearn.errors import DataValidationError
from flowlearn.fractures.inclination import SMOOTHING
from flowlearn.fractures.statistics import aperture_statistics, out_of_range
from flowlearn.training.build import load_run
from flowlearn.training.predictions import write_predictions


def _to_stderr(line: str) -> None:
    print(f"flowlearn predict: warning: {line}", file=sys.stderr)


def predict(
    run_dir: str | Path,
    inputs: Sequence[str | Path],
    output: str | Path,
    checkpoint: str | Path | None = None,
    warn: Callable[[str], None] = _to_stderr,
) -> int:
    """Apply a trained run to the fractures in ``inputs`` (HDF5, either layout, with or without a reference pressure)
    and write ``output`` (the schema of :mod:`flowlearn.training.predictions`, split ``predict``).

    Files whose fractures lack what the model's input channels need (the walls) are refused with a
    :class:`~flowlearn.errors.DataValidationError` naming file and fracture, before any prediction. Each aperture
    statistic of an input fracture outside the training split's range, as the checkpoint records it, is passed
    to ``warn`` as one line naming the fracture, the statistic, its value and the range; so is each fracture
    without walls given to a model whose law reads them (``law=inclined``, ``law=mlcl``), and each of unknown voxel
    size given to one whose law reads the aperture slope (``law=mlcl``).

    Returns the number of fractures written.
    """
    paths = [str(p) for p in inputs]
    # The inputs first: a bad file or fracture is found before the model is loaded.
    for path in paths:
        validate_file(path)
    refs = find_fractures(paths)
    module, cfg = load_run(run_dir, checkpoint)
    for ref in refs:
        try:
            module.correction.check_shape(ref.shape)
        except ValueError as error:
            raise DataValidationError(f"{ref.path}: group '{ref.name}': the run's {error}") from None
    needs, needed_by = module.correction.inputs, f"the model of {run_dir} reads"
    require_inputs(paths, needs, needed_by)
    for what, lacking in missing_geometry(paths, module.law.uses_walls, module.law.uses_slope).items():
        for where in lacking:
            warn(f"{where}: {what}")
    if not module.training_statistics:
        warn(
            f"{checkpoint or run_dir}: no training statistics in the checkpoint; inputs are not compared with them"
        )
    for ref in refs:
        fracture = read_fracture(ref.path, ref.name, validate=False)
        statistics = aperture_statistics(fracture.aperture, fracture.voxel_size)
        for line in out_of_range(statistics, module.training_statistics):
            warn(f"{ref.path}: group '{ref.name}': {line}")
    # The run's own smoothing of the mid-surface: the inclination tensor its law and baselines were trained with.
    smoothing = cfg.data.get("slope_smoothing", SMOOTHING)
    dataset = FractureDataset(
        refs, require_pressure=False, inputs=needs, needed_by=needed_by, slope_smoothing=smoothing
    )
    try:
        return write_predictions(module, [("predict", dataset)], output)
    finally:
        dataset.close()
