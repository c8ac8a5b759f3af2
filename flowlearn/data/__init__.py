"""Fracture data: the HDF5 schema, the DataModule, rough-fracture generation and the LBM reference driver.

The LBM driver (:mod:`flowlearn.data.lbm`) needs the ``[lbm]`` extra and is imported only on use;
the DataModule needs ``lightning`` and lives in :mod:`flowlearn.data.datamodule`.
"""

from flowlearn.data.schema import (
    DataValidationError,
    Fracture,
    FractureInfo,
    convert,
    list_fractures,
    read_fracture,
    read_fractures,
    validate_fracture,
    write_fractures,
)

__all__ = [
    "DataValidationError",
    "Fracture",
    "FractureInfo",
    "convert",
    "list_fractures",
    "read_fracture",
    "read_fractures",
    "validate_fracture",
    "write_fractures",
]
