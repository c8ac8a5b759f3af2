"""``flowlearn predict``: apply a trained run to new aperture maps and write ``predictions.h5`` for them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flowlearn.data.datamodule import FractureDataset, find_fractures
from flowlearn.training.build import load_run
from flowlearn.training.predictions import write_predictions


def predict(
    run_dir: str | Path,
    inputs: Sequence[str | Path],
    output: str | Path,
    checkpoint: str | Path | None = None,
) -> int:
    """Apply a trained run to the fractures in ``inputs`` (HDF5, either layout, with or without a reference pressure)
    and write ``output`` (the schema of :mod:`flowlearn.training.predictions`, split ``predict``).

    Returns the number of fractures written.
    """
    # The inputs first: a bad file is found before the model is loaded.
    dataset = FractureDataset(find_fractures([str(p) for p in inputs]), require_pressure=False)
    module, _ = load_run(run_dir, checkpoint)
    try:
        return write_predictions(module, [("predict", dataset)], output)
    finally:
        dataset.close()
