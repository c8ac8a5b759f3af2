"""``predictions.h5``: the fields a trained model predicts, per fracture, beside its baselines'. Schema, writer and
reader.

One group per fracture (named like the input, ``<file stem>/<group>`` flattened to ``<file stem>__<group>``), each
with datasets shaped like the aperture map (float64 but ``active``):

- ``aperture`` (m), ``active`` (bool);
- ``correction``: the learned W (laws ``inclined``, ``lcl`` and ``ap2``) or exponent w (law ``exponent``);
- ``log_k``: natural log of the conductivity the solve used; for a tensor law (``inclined``) (3, H, W), the solve's
  tensor form (log T_xx, log T_yy, ρ = T_xy/√(T_xx T_yy)) (see :mod:`flowlearn.darcy.conductivity`);
- ``pressure``: the model's pressure (NaN at inactive pixels);
- ``pressure_<baseline>``: each baseline's (:mod:`flowlearn.models.baselines`), for the baselines that apply;
- ``pressure_reference``: the reference (LBM) pressure of the input, absent where the input has none;

and attributes ``law``, ``correction_name``, ``split`` (train/val/test, or ``predict``), ``voxel_size`` (metres per
pixel, NaN when the input does not say), ``power_exponent`` (the ``power`` baseline's a, NaN when none was fitted),
``flow_rate`` (the model's outlet flow rate, NaN for a law without flow-rate units), ``flow_rate_<baseline>`` and
``flow_rate_reference`` (NaN where the input has none); flow rates in the units of the data's ``flow_rate`` for the
heads of the pressures; ``reference_error``, the reference's own error as the input's provenance records it
(:data:`~flowlearn.data.provenance.ERRORS`; absent where it records none). Flow rates are finite with the
sign of the head drop (inlet minus outlet), or NaN. Files are written atomically; :func:`read_predictions` checks
every group it reads against this schema, so that a reader meets only fields and attributes that it can use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import torch

from flowlearn.checks import shown
from flowlearn.data.files import atomic_hdf5, open_file
from flowlearn.data.provenance import ERRORS
from flowlearn.data.schema import number_attribute, where
from flowlearn.errors import DataValidationError
from flowlearn.metrics import STAGES
from flowlearn.models.baselines import BASELINE_NAMES, COMPARED
from flowlearn.training.batches import as_batch

# Lightning's import is the writer's alone: the readers (evaluate, ensemble, report) start without it.
if TYPE_CHECKING:
    from flowlearn.data.datamodule import FractureDataset
    from flowlearn.training.module import FractureFlowModule

FIELD_NAMES = ("aperture", "active", "correction", "log_k", "pressure", "pressure_reference")
# The attributes every group has.
REQUIRED_ATTRIBUTES = ("split", "law", "correction_name")
# The values of the attributes ``split`` and ``correction_name``.
SPLITS = (*STAGES, "predict")
CORRECTION_NAMES = ("W", "w")
# File attribute: the training split's range of each statistic (flowlearn.fractures.statistics), as JSON.
TRAINING_STATISTICS = "training_statistics"
BASELINE_PREFIX = "pressure_"
FLOW_RATE_PREFIX = "flow_rate_"


@dataclass(frozen=True)
class FractureFields:
    """The fields of one fracture as a trained model and the baselines predict them (one group of
    ``predictions.h5``).

    Arrays are (H, W) or (D, H, W); floats are float64.

    Attributes:
        name: fracture key, e.g. ``"fractures__fracture_003"``.
        split: ``train``, ``val``, ``test`` or ``predict``.
        law: the law's name (``lcl``, ``ap2``, ``exponent``).
        correction_name: ``"W"`` (T = law(Ap)·W) or ``"w"`` (the exponent law's K = Ap^(2·relu(w))).
        voxel_size: metres per pixel, NaN when unknown.
        aperture: aperture map (m, or the source's unit when ``voxel_size`` is NaN).
        active: bool, pixels that carry flow.
        correction: the learned W or w.
        log_k: natural log of the conductivity the solve used, (H, W), or (3, H, W) in the tensor form.
        pressure: the model's pressure, NaN where no flow was solved.
        pressure_reference: reference (LBM) pressure, None where the input had none (an aperture map to predict on).
        baseline_pressures: each applicable baseline's pressure, by baseline name.
        flow_rate: the model's outlet flow rate, NaN for a law without flow-rate units.
        flow_rate_reference: the reference flow rate, NaN where the input has none.
        baseline_flow_rates: each applicable baseline's outlet flow rate, by baseline name.
        power_exponent: the ``power`` baseline's exponent a, NaN when none was fitted.
        flow_rate_interval: (low, high) of an ensemble's interval of the flow rate (:mod:`flowlearn.reporting.
            ensemble`), NaN for a single model.
        reference_error: the reference's own error against the smooth walls' Stokes flow as the input's provenance
            records it, :data:`~flowlearn.data.provenance.ERRORS`; NaN each where it records none.
    """

    name: str
    split: str
    law: str
    correction_name: str
    voxel_size: float
    aperture: np.ndarray
    active: np.ndarray
    correction: np.ndarray
    log_k: np.ndarray
    pressure: np.ndarray
    pressure_reference: np.ndarray | None
    baseline_pressures: dict[str, np.ndarray]
    flow_rate: float
    flow_rate_reference: float
    baseline_flow_rates: dict[str, float]
    power_exponent: float
    flow_rate_interval: tuple[float, float] = (math.nan, math.nan)
    reference_error: tuple[float, ...] = (math.nan,) * len(ERRORS)

    @property
    def pressure_compared(self) -> np.ndarray:
        """The LCL's pressure, which every map shows beside the model's (with the best closed form's)."""
        return self.baseline_pressures[COMPARED]

    @property
    def solved(self) -> np.ndarray:
        """bool mask of the pixels where the model's and the LCL's solves produced a pressure: active and
        connected to a face."""
        return self.active & np.isfinite(self.pressure) & np.isfinite(self.pressure_compared)

    @property
    def compared(self) -> np.ndarray:
        """bool mask of the pixels the metrics compare: the solved ones less the inlet and outlet columns, whose
        heads are fixed in the fracture setup (see :mod:`flowlearn.metrics`)."""
        mask = self.solved.copy()
        mask[..., 0] = mask[..., -1] = False
        return mask


def group_name(key: str) -> str:
    """The group of a fracture key ``"<file stem>/<group>"``: one level, ``<stem>__<group>``."""
    return key.replace("/", "__")


def _numpy(value: torch.Tensor) -> np.ndarray:
    array = value.detach().cpu().numpy()
    return array if array.dtype == bool else array.astype(np.float64)


@torch.no_grad()
def predict_fields(
    module: FractureFlowModule, dataset: FractureDataset, index: int, split: str
) -> FractureFields:
    """The fields of fracture ``index`` of ``dataset`` under ``module`` (in eval mode or not, as it is), with every
    applicable baseline's."""
    item = dataset[index]
    batch = as_batch(item, module.device)
    fields = module(batch)
    baselines = module.baselines.solutions(batch, 0, float(module.power_exponent))
    reference = batch.get("pressure")
    return FractureFields(
        name=group_name(item["name"]),
        split=split,
        law=module.law.name,
        correction_name=module.law.correction_name,
        voxel_size=float(item["voxel_size"]),
        aperture=_numpy(batch["aperture"][0]),
        active=_numpy(batch["active"][0]),
        correction=_numpy(fields["correction"][0]),
        log_k=_numpy(fields["log_k"][0]),
        pressure=_numpy(fields["pressure"][0]),
        pressure_reference=None if reference is None else _numpy(reference[0]),
        baseline_pressures={name: _numpy(pressure) for name, (pressure, _) in baselines.items()},
        flow_rate=float(fields["flow_rate"][0]),
        flow_rate_reference=float(item["flow_rate"]),
        baseline_flow_rates={name: float(flow_rate) for name, (_, flow_rate) in baselines.items()},
        power_exponent=float(module.power_exponent),
        reference_error=tuple(float(value) for value in item["reference_error"]),
    )


def write_predictions(
    module: FractureFlowModule,
    datasets: Iterable[tuple[str, FractureDataset]],
    path: str | Path,
) -> int:
    """Predict every fracture of the ``(split, dataset)`` pairs one at a time, in eval mode, and write the fields
    atomically to ``path``; returns the number of fractures written."""
    was_training = module.training
    module.eval()
    try:
        fields = (
            predict_fields(module, dataset, index, split)
            for split, dataset in datasets
            for index in range(len(dataset))
        )
        return write_fields(path, fields, module.training_statistics)
    finally:
        module.train(was_training)


def write_fields(
    path: str | Path,
    fields: Iterable[FractureFields],
    statistics: Mapping[str, Any] | None,
    **attributes: Any,
) -> int:
    """Write ``fields`` (one group each) atomically to the predictions file ``path``, with the training split's
    ``statistics`` ranges and ``attributes`` as file attributes; returns the number of groups written."""
    count = 0
    with atomic_hdf5(path) as out:
        if statistics:
            out.attrs[TRAINING_STATISTICS] = json.dumps(statistics)
        out.attrs.update(attributes)
        for one in fields:
            _write_group(out, one)
            count += 1
    return count


def _write_group(out: h5py.File, fields: FractureFields) -> None:
    group = out.create_group(fields.name)
    group.attrs.update(
        {
            "law": fields.law,
            "correction_name": fields.correction_name,
            "split": fields.split,
            "voxel_size": fields.voxel_size,
            "power_exponent": fields.power_exponent,
            "flow_rate": fields.flow_rate,
            "flow_rate_reference": fields.flow_rate_reference,
            **{f"{FLOW_RATE_PREFIX}{name}": rate for name, rate in fields.baseline_flow_rates.items()},
        }
    )
    if all(math.isfinite(end) for end in fields.flow_rate_interval):
        group.attrs["flow_rate_interval"] = fields.flow_rate_interval
    if any(math.isfinite(value) for value in fields.reference_error):
        group.attrs["reference_error"] = fields.reference_error
    for name in FIELD_NAMES:
        if getattr(fields, name) is not None:
            group.create_dataset(name, data=getattr(fields, name))
    for name, pressure in fields.baseline_pressures.items():
        group.create_dataset(f"{BASELINE_PREFIX}{name}", data=pressure)


def training_statistics(path: str | Path) -> dict[str, list[float]]:
    """The training split's range of each statistic that the predictions file ``path`` records (empty where the
    run's checkpoint had none).

    Raises:
        DataValidationError: the file attribute is not a JSON object of (low, high) pairs.
    """
    with open_file(path) as f:
        return _training_statistics(path, f)


def _training_statistics(path: str | Path, f: h5py.File) -> dict[str, list[float]]:
    value = f.attrs.get(TRAINING_STATISTICS, "{}")
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    try:
        ranges = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        ranges = None
    if not isinstance(ranges, dict) or not all(
        isinstance(pair, list)
        and len(pair) == 2
        and all(isinstance(end, int | float) and not isinstance(end, bool) for end in pair)
        for pair in ranges.values()
    ):
        raise DataValidationError(
            f"{path}: attribute '{TRAINING_STATISTICS}' is {shown(value)}; expected a JSON object of [low, high] "
            "pairs, one per statistic (as training writes it)"
        )
    return ranges


def read_predictions(path: str | Path, split: str | None = None) -> list[FractureFields]:
    """Every fracture of a ``predictions.h5`` file, in group order; with ``split``, only that split's.

    Every group is checked against the schema of the module docstring where it is read (:func:`_check_group`,
    :func:`_read_group`), so that the readers (``flowlearn evaluate``, ``report``, ``ensemble``) meet no field or
    attribute that they cannot use: a bad one is named with the file, the group and what is expected.

    Raises:
        FileNotFoundError: no such file.
        DataValidationError: not HDF5, a group without the attributes and the ``pressure`` of a predictions group (a
            fracture file, say), or a predictions group that breaks the schema (a missing or misshapen field, an
            attribute out of its range, another law than the file's first group's).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no predictions file {path}")
    with open_file(path) as f:
        _training_statistics(path, f)
        # Each group's attributes, read once: h5py reads an attribute at a time, slowly.
        groups = [(name, group, _check_group(path, name, group)) for name, group in f.items()]
        first_name, _, first = groups[0] if groups else (None, None, {})
        for name, _, attrs in groups:
            if attrs["law"] != first["law"]:
                raise DataValidationError(
                    f"{where(path, name, attribute='law')} is {attrs['law']!r}, and {first['law']!r} in group '{first_name}': "
                    "expected one law in every group (a predictions file holds one run's predictions)"
                )
        return [
            _read_group(path, name, group, attrs)
            for name, group, attrs in groups
            if split is None or attrs["split"] == split
        ]


def holds_predictions(f: h5py.File, path: str | Path) -> bool:
    """Whether the open HDF5 file ``f`` (read from ``path``) is a predictions file by the checks
    :func:`read_predictions` makes on every group before it reads a field (:func:`_check_group`): it has groups,
    each with the attributes and the ``pressure`` of a predictions group. No field is read: this tells a predictions
    file from other HDF5 files (a fracture file), it does not validate one."""
    try:
        for name, group in f.items():
            _check_group(path, name, group)
    except DataValidationError:
        return False
    return len(f) > 0


def _text_attribute(
    path: str | Path, name: str, attrs: dict[str, Any], attribute: str, allowed: Sequence[str]
) -> str:
    value = attrs[attribute]
    text = value.decode(errors="replace") if isinstance(value, bytes | np.bytes_) else value
    if not isinstance(text, str) or (allowed and text not in allowed):
        expected = f"{', '.join(allowed[:-1])} or {allowed[-1]}" if allowed else "a name"
        raise DataValidationError(
            f"{where(path, name, attribute=attribute)} is {shown(value)}; expected {expected}"
        )
    return text


def _check_group(path: str | Path, name: str, group: h5py.Group | h5py.Dataset) -> dict[str, Any]:
    """The attributes of the group ``name`` of a predictions file (its text ones as ``str``), after the checks that
    need no field's data (cheap, so made on every group of a file, whichever split is read): it is a predictions
    group, and its split and correction name are known names."""
    attrs = dict(group.attrs) if isinstance(group, h5py.Group) else {}
    if (
        not isinstance(group, h5py.Group)
        or "pressure" not in group
        or any(key not in attrs for key in REQUIRED_ATTRIBUTES)
    ):
        raise DataValidationError(
            f"{path}: group '{name}' has no predictions (attributes {', '.join(REQUIRED_ATTRIBUTES)} and "
            "field 'pressure'): not a predictions file; give a run's predictions.h5 or a file that "
            "flowlearn predict wrote"
        )
    for attribute, allowed in (("split", SPLITS), ("law", ()), ("correction_name", CORRECTION_NAMES)):
        attrs[attribute] = _text_attribute(path, name, attrs, attribute, allowed)
    return attrs


def _dataset(path: str | Path, name: str, group: h5py.Group, field: str) -> h5py.Dataset:
    """The dataset ``field`` of ``group``, which every predictions group holds."""
    dataset = group.get(field)
    if not isinstance(dataset, h5py.Dataset):
        raise DataValidationError(
            f"{where(path, name, field=field)} is missing: every predictions group holds it (as training and "
            "flowlearn predict write it)"
        )
    return dataset


def _map(
    path: str | Path, name: str, group: h5py.Group, field: str, shapes: Sequence[tuple[int, ...]]
) -> np.ndarray:
    """The float dataset ``field`` of ``group``, of one of ``shapes`` (the first: the aperture map's)."""
    dataset = _dataset(path, name, group, field)
    if dataset.shape not in shapes:
        also = (
            ""
            if len(shapes) == 1
            else f" (nor {' or '.join(str(s) for s in shapes[1:])}, the per-axis forms)"
        )
        raise DataValidationError(
            f"{where(path, name, field=field)}: shape {dataset.shape} does not match field 'active' {shapes[0]}{also}"
        )
    if not np.issubdtype(dataset.dtype, np.floating):
        raise DataValidationError(
            f"{where(path, name, field=field)}: expected a float dtype, got {dataset.dtype}"
        )
    return dataset[()]


def _numbers(
    path: str | Path, name: str, attrs: Mapping[str, Any], attribute: str, count: int, what: str
) -> tuple[float, ...] | None:
    """Attribute ``attribute`` as ``count`` floats, None where absent."""
    if attribute not in attrs:
        return None
    value = attrs[attribute]
    array = np.asarray(value)
    if array.shape != (count,) or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise DataValidationError(
            f"{where(path, name, attribute=attribute)} is {shown(value)}; expected {what}"
        )
    return tuple(float(x) for x in array)


def _heads(pressure: np.ndarray, active: np.ndarray) -> tuple[float, float]:
    """(inlet, outlet): the model's pressure on the first and last columns, where its heads are fixed; NaN where
    those columns hold no finite value."""
    ends = []
    for column in (0, -1):
        values = pressure[..., column][active[..., column] & np.isfinite(pressure[..., column])]
        ends.append(float(values.mean()) if values.size else math.nan)
    return ends[0], ends[1]


def _read_group(path: str | Path, name: str, group: h5py.Group, attrs: dict[str, Any]) -> FractureFields:
    """One group, checked: every field the writer writes, shaped like ``active``, which has a pixel to compare;
    numbers where the schema has numbers, and flow rates in the direction of the head drop (or NaN where none).
    ``attrs``: its attributes, as :func:`_check_group` returns them."""
    active = _dataset(path, name, group, "active")
    if active.dtype != bool or active.ndim not in (2, 3):
        raise DataValidationError(
            f"{where(path, name, field='active')}: expected a bool map of 2 or 3 dimensions, got shape "
            f"{active.shape}, dtype {active.dtype}"
        )
    shape = active.shape
    active = active[()]
    if not active.any():
        raise DataValidationError(
            f"{where(path, name, field='active')} has no active pixel; a fracture needs a path from inlet to outlet"
        )
    maps = {
        field: _map(path, name, group, field, [shape]) for field in ("aperture", "correction", "pressure")
    }
    maps["log_k"] = _map(path, name, group, "log_k", [shape, (2, *shape), (3, *shape)])
    reference = (
        _map(path, name, group, "pressure_reference", [shape]) if "pressure_reference" in group else None
    )
    present = [b for b in BASELINE_NAMES if f"{BASELINE_PREFIX}{b}" in group or b == COMPARED]
    baselines = {b: _map(path, name, group, f"{BASELINE_PREFIX}{b}", [shape]) for b in present}

    voxel_size = number_attribute(path, name, attrs, "voxel_size", math.nan)
    if not (math.isnan(voxel_size) or (math.isfinite(voxel_size) and voxel_size > 0)):
        raise DataValidationError(
            f"{where(path, name, attribute='voxel_size')} is {voxel_size!r}; expected a finite number > 0 (metres per "
            "pixel), or NaN where it is unknown"
        )
    power_exponent = number_attribute(path, name, attrs, "power_exponent", math.nan)
    if math.isinf(power_exponent):
        raise DataValidationError(
            f"{where(path, name, attribute='power_exponent')} is {power_exponent!r}; expected a finite number, or NaN where "
            "none was fitted"
        )
    inlet, outlet = _heads(maps["pressure"], active)
    if not (math.isfinite(inlet) and math.isfinite(outlet) and inlet != outlet):
        raise DataValidationError(
            f"{where(path, name, field='pressure')}: holds no head drop between its first and last columns "
            f"(inlet {inlet:g}, outlet {outlet:g}); the model's pressure holds the heads there"
        )
    rates = {
        key: number_attribute(path, name, attrs, key, math.nan)
        for key in ("flow_rate", "flow_rate_reference", *(f"{FLOW_RATE_PREFIX}{b}" for b in present))
    }
    for key, rate in rates.items():
        if not (math.isnan(rate) or (math.isfinite(rate) and (rate > 0) == (inlet > outlet) and rate != 0)):
            sign = ">" if inlet > outlet else "<"
            raise DataValidationError(
                f"{where(path, name, attribute=key)} is {rate!r}; expected a finite number {sign} 0 (inlet head {inlet:g}, "
                f"outlet head {outlet:g}), or NaN where there is none"
            )
    interval = _numbers(path, name, attrs, "flow_rate_interval", 2, "two numbers, low and high")
    if interval is not None and not (
        all(math.isfinite(end) for end in interval) and 0 <= interval[0] <= interval[1]
    ):
        raise DataValidationError(
            f"{where(path, name, attribute='flow_rate_interval')} is {shown(interval)}; expected two finite numbers "
            "0 <= low <= high"
        )
    error = _numbers(
        path, name, attrs, "reference_error", len(ERRORS), f"{len(ERRORS)} numbers ({', '.join(ERRORS)})"
    )
    if error is not None and any(math.isinf(value) for value in error):
        raise DataValidationError(
            f"{where(path, name, attribute='reference_error')} is {shown(error)}; expected {len(ERRORS)} finite numbers "
            f"({', '.join(ERRORS)}), NaN where none is recorded"
        )
    fields = FractureFields(
        name=name,
        split=attrs["split"],
        law=attrs["law"],
        correction_name=attrs["correction_name"],
        voxel_size=voxel_size,
        active=active,
        **maps,
        pressure_reference=reference,
        baseline_pressures=baselines,
        flow_rate=rates["flow_rate"],
        flow_rate_reference=rates["flow_rate_reference"],
        baseline_flow_rates={b: rates[f"{FLOW_RATE_PREFIX}{b}"] for b in present},
        power_exponent=power_exponent,
        flow_rate_interval=(math.nan, math.nan) if interval is None else interval,
        reference_error=(math.nan,) * len(ERRORS) if error is None else error,
    )
    if not fields.compared.any():
        raise DataValidationError(
            f"{where(path, name, field='pressure')}: no active pixel between the inlet and outlet columns where it "
            f"and field '{BASELINE_PREFIX}{COMPARED}' are finite: nothing to compare"
        )
    return fields
