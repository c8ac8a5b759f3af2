"""Fracture files: the HDF5 schema (read, validate, write atomically), provenance records, the models' input
channels and the DataModule that feeds training. The DataModule is imported on first access (no Lightning to read a
file).

* :mod:`~flowlearn.data.schema`: the two HDF5 layouts, a fracture and its checks; :mod:`~flowlearn.data.files`:
  reading and writing them; :mod:`~flowlearn.data.provenance`: records read back;
* :mod:`~flowlearn.data.inputs`: the input channels; :mod:`~flowlearn.data.copies`: a fracture held twice;
* :mod:`~flowlearn.data.datamodule`: the DataModule, its splits and batches.
"""

from flowlearn.data.files import convert, list_fractures, read_fracture, read_fractures, write_fractures
from flowlearn.data.schema import Fracture, FractureInfo, validate_fracture
from flowlearn.errors import DataValidationError

_LAZY = {"FractureDataModule", "FractureDataset", "SameShapeBatchSampler", "split_fractures"}


def __getattr__(name: str):
    if name in _LAZY:
        from flowlearn.data import datamodule

        return getattr(datamodule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DataValidationError",
    "Fracture",
    "FractureDataModule",
    "FractureDataset",
    "FractureInfo",
    "SameShapeBatchSampler",
    "convert",
    "list_fractures",
    "read_fracture",
    "read_fractures",
    "split_fractures",
    "validate_fracture",
    "write_fractures",
]
