"""Fracture data: the HDF5 schema, the DataModule, rough-fracture generation and the LBM reference driver.

The LBM driver (:mod:`flowlearn.data.lbm`) needs the ``[lbm]`` extra and is imported only on use. The DataModule
(:mod:`flowlearn.data.datamodule`) is imported on first access, so reading files does not load Lightning.
"""

from flowlearn.data.schema import (
    Fracture,
    FractureInfo,
    convert,
    list_fractures,
    read_fracture,
    read_fractures,
    validate_fracture,
    write_fractures,
)
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
