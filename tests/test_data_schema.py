"""HDF5 schema: both layouts, validation messages, and atomic writes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowlearn.data.files import convert, list_fractures, read_fracture, read_fractures, write_fractures
from flowlearn.data.schema import DataValidationError, Fracture

SHARED = Path(__file__).resolve().parents[2] / "shared/data/example_fracture.mat"
REPO = Path(__file__).resolve().parents[1]


def make_fracture(name: str = "f0", shape: tuple[int, int] = (6, 9), seed: int = 0) -> Fracture:
    """A valid fracture whose pressure is the exact Darcy solution for uniform permeability."""
    rng = np.random.default_rng(seed)
    h, w = shape
    pressure = np.tile(2.0 - np.arange(w) / (w - 1), (h, 1))
    return Fracture(
        name=name,
        aperture=rng.uniform(0.5, 1.5, shape) * 1e-4,
        pressure=pressure,
        voxel_size=1e-5,
        provenance={"generator": "test", "seed": seed},
    )


def write_raw(path: Path, groups: dict[str, dict[str, np.ndarray]], attrs: dict | None = None) -> Path:
    """Write groups of datasets verbatim (no validation), to build deliberately broken files."""
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "flowlearn-fractures"
        f.attrs["schema_version"] = 1
        for gname, fields in groups.items():
            g = f.create_group(gname)
            for key, value in fields.items():
                g.create_dataset(key, data=value)
            for key, value in (
                attrs or {"voxel_size": 1e-5, "inlet_pressure": 2.0, "outlet_pressure": 1.0, "flow_axis": "x"}
            ).items():
                g.attrs[key] = value
    return path


def fields_of(fr: Fracture) -> dict[str, np.ndarray]:
    return {"aperture": fr.aperture, "pressure": fr.pressure}


@pytest.mark.skipif(not SHARED.exists(), reason="shared example_fracture.mat not present")
def test_reads_original_layout_of_shared_file():
    (info,) = list_fractures(SHARED)
    assert info.name == "fracture_1" and info.shape == (256, 260)
    fr = read_fracture(SHARED, "fracture_1")
    assert fr.aperture.shape == (256, 260) and fr.pressure.shape == (256, 260)
    assert (fr.inlet_pressure, fr.outlet_pressure, fr.flow_axis) == (2.0, 1.0, "x")
    # The LBM inlet and outlet columns sit at 2 and 1 to a fraction of a percent of the drop.
    np.testing.assert_allclose(fr.pressure[:, 0].mean(), 2.0, atol=2e-3)
    np.testing.assert_allclose(fr.pressure[:, -1].mean(), 1.0, atol=2e-3)


@pytest.mark.skipif(not SHARED.exists(), reason="shared example_fracture.mat not present")
def test_convert_shared_file_round_trip(tmp_path):
    assert convert(SHARED, tmp_path / "a.h5", layout="flowlearn") == 1
    assert convert(tmp_path / "a.h5", tmp_path / "b.mat", layout="original") == 1
    with h5py.File(SHARED) as src, h5py.File(tmp_path / "b.mat") as dst:
        for key in ("aperture_field", "pressure_field"):
            np.testing.assert_array_equal(src["fracture_1"][key][()], dst["fracture_1"][key][()])


def test_flowlearn_round_trip_keeps_arrays_mask_and_provenance(tmp_path):
    a = make_fracture("a", seed=1)
    mask = np.ones(a.shape, bool)
    mask[2, 3] = False
    b = Fracture(**{**a.__dict__, "name": "b", "mask": mask})
    write_fractures(tmp_path / "d.h5", [b, a])
    got = read_fractures(tmp_path / "d.h5")
    assert [g.name for g in got] == ["a", "b"]
    np.testing.assert_array_equal(got[0].aperture, a.aperture)
    np.testing.assert_array_equal(got[0].pressure, a.pressure)
    assert got[0].mask is None and got[1].mask[2, 3] == np.False_ and got[1].mask.sum() == mask.sum()
    assert got[1].provenance == {"generator": "test", "seed": 1}
    assert got[1].voxel_size == 1e-5


def test_walls_flow_rate_and_recipe_round_trip_and_are_optional(tmp_path):
    a = make_fracture("a", seed=2)
    bottom = -0.5 * a.aperture
    walled = Fracture(
        **{**a.__dict__, "name": "w", "bottom": bottom, "top": bottom + a.aperture, "flow_rate": 3e-12}
    )
    write_fractures(tmp_path / "d.h5", [a, walled], attrs={"recipe": '{"seed": 0}'})
    plain, got = read_fractures(tmp_path / "d.h5")
    np.testing.assert_array_equal(got.top - got.bottom, a.aperture)
    assert got.flow_rate == 3e-12 and plain.flow_rate is None and plain.bottom is None and plain.top is None
    assert h5py.File(tmp_path / "d.h5", "r").attrs["recipe"] == '{"seed": 0}'


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"top": np.zeros((6, 9))}, "field 'top': a wall without the other"),
        (
            {"bottom": np.zeros((6, 8)), "top": np.zeros((6, 8))},
            r"field 'bottom': shape \(6, 8\) does not match",
        ),
        ({"bottom": np.full((6, 9), np.nan), "top": np.zeros((6, 9))}, "field 'bottom': .*NaN"),
        ({"flow_rate": -1.0}, "attribute 'flow_rate' is -1.0; expected a finite number > 0"),
        ({"flow_rate": float("inf")}, "attribute 'flow_rate' is inf"),
    ],
)
def test_bad_walls_and_flow_rates_are_named(tmp_path, change, expected):
    bad = Fracture(**{**make_fracture().__dict__, **change})
    with pytest.raises(DataValidationError, match=expected):
        write_fractures(tmp_path / "d.h5", [bad])
    assert not (tmp_path / "d.h5").exists()


def test_written_file_gets_the_ordinary_mode(tmp_path):
    write_fractures(tmp_path / "m.h5", [make_fracture()])
    (tmp_path / "plain").touch()
    assert (tmp_path / "m.h5").stat().st_mode == (tmp_path / "plain").stat().st_mode


def test_zero_apertures_are_inactive_cells_not_errors(tmp_path):
    fr = make_fracture()
    fr.aperture[3, 4] = 0.0
    write_fractures(tmp_path / "z.h5", [fr])
    got = read_fracture(tmp_path / "z.h5", "f0")
    assert not got.active[3, 4] and got.active.sum() == got.aperture.size - 1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda g: g["f0"].pop("aperture"), r"group 'f0': field 'aperture': missing field"),
        (lambda g: g["f0"].update(extra=np.zeros(3)), r"group 'f0': field 'extra': unexpected field"),
        (lambda g: g["f0"].update(pressure=np.ones((6, 8))), r"'pressure': shape \(6, 8\) does not match"),
        (lambda g: g["f0"]["pressure"].__setitem__((2, 2), np.nan), r"'pressure': 1 non-finite .*\(2, 2\)"),
        (lambda g: g["f0"]["aperture"].__setitem__((1, 5), np.inf), r"'aperture': 1 non-finite .*\(1, 5\)"),
        (lambda g: g["f0"]["aperture"].__setitem__((4, 1), -1e-5), r"field 'aperture': 1 negative apertures"),
        (
            lambda g: g["f0"]["pressure"].__setitem__((slice(None), 0), 1.5),
            r"field 'pressure': inlet face .* mean 1\.5, inconsistent with declared inlet_pressure 2",
        ),
        (
            lambda g: g["f0"]["pressure"].__setitem__((slice(None), -1), 0.0),
            r"field 'pressure': outlet face .* inconsistent with declared outlet_pressure 1",
        ),
        (lambda g: g["f0"].update(mask=np.ones((2, 2), bool)), r"'mask': shape \(2, 2\) does not match"),
    ],
    ids=["missing-field", "extra-field", "shape", "nan", "inf", "negative", "inlet", "outlet", "mask-shape"],
)
def test_bad_fields_name_file_group_and_field(tmp_path, mutate, expected):
    groups = {"f0": {k: v.copy() for k, v in fields_of(make_fracture()).items()}}
    mutate(groups)
    path = write_raw(tmp_path / "bad.h5", groups)
    with pytest.raises(DataValidationError, match=expected) as err:
        read_fractures(path)
    assert str(path) in str(err.value)


def test_missing_group_is_named(tmp_path):
    path = write_raw(tmp_path / "g.h5", {"f0": fields_of(make_fracture())})
    with pytest.raises(DataValidationError, match=r"g\.h5: group 'f9': no such group \(groups: f0\)"):
        read_fracture(path, "f9")


def test_extra_top_level_dataset_is_rejected(tmp_path):
    path = write_raw(tmp_path / "x.h5", {"f0": fields_of(make_fracture())})
    with h5py.File(path, "a") as f:
        f.create_dataset("stray", data=np.zeros(4))
    with pytest.raises(DataValidationError, match=r"x\.h5: unexpected top-level dataset 'stray'"):
        read_fractures(path)


def test_missing_attribute_is_named(tmp_path):
    # With a pressure field, the inlet and outlet pressures it is relative to are required.
    attrs = {"voxel_size": 1.0, "flow_axis": "x"}
    path = write_raw(tmp_path / "a.h5", {"f0": fields_of(make_fracture())}, attrs=attrs)
    with pytest.raises(DataValidationError, match=r"group 'f0': missing attribute 'inlet_pressure'"):
        read_fractures(path)


def test_original_layout_wrong_shape_is_named(tmp_path):
    path = tmp_path / "o.mat"
    with h5py.File(path, "w") as f:
        g = f.create_group("fracture_1")
        g.create_dataset("aperture_field", data=np.ones((1, 2, 4, 5), np.float32))
        g.create_dataset("pressure_field", data=np.ones((1, 2, 4, 5), np.float32))
    with pytest.raises(DataValidationError, match=r"'fracture_1': field 'aperture_field': expected shape"):
        read_fractures(path)


def test_file_without_groups_is_rejected(tmp_path):
    path = tmp_path / "nogroups.h5"
    with h5py.File(path, "w"):
        pass
    with pytest.raises(DataValidationError, match=r"nogroups\.h5: contains no fracture groups"):
        read_fractures(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.h5"
    path.write_bytes(b"")
    with pytest.raises(DataValidationError, match=r"empty\.h5: empty file \(0 bytes\)"):
        read_fractures(path)


def test_not_hdf5_file(tmp_path):
    path = tmp_path / "text.h5"
    path.write_text("aperture,pressure\n1,2\n")
    with pytest.raises(DataValidationError, match=r"text\.h5: not an HDF5 file"):
        list_fractures(path)


def test_truncated_file(tmp_path):
    good = tmp_path / "good.h5"
    write_fractures(good, [make_fracture(shape=(64, 64), seed=s, name=f"f{s}") for s in range(4)])
    data = good.read_bytes()
    path = tmp_path / "trunc.h5"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataValidationError, match=r"trunc\.h5: (truncated or corrupt|.*cannot be read)"):
        read_fractures(path)


WRITER = """
import sys
import numpy as np
from flowlearn.data.files import write_fractures
from flowlearn.data.schema import Fracture
rng = np.random.default_rng(0)
w = 512
p = np.tile(2.0 - np.arange(w) / (w - 1), (w, 1))
noise = 1e-9 * rng.standard_normal((w, w))
frs = [Fracture(f"f{i:03d}", rng.uniform(1, 2, (w, w)), p + i * noise) for i in range(60)]
print("ready", flush=True)
write_fractures(sys.argv[1], frs)
"""


def test_killed_writer_leaves_no_partial_file(tmp_path):
    target = tmp_path / "data.h5"
    write_fractures(target, [make_fracture("old")])
    before = target.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 60
    # Kill only once the temporary file has real content, so the kill lands mid-write.
    while time.monotonic() < deadline:
        tmps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        if tmps and tmps[0].stat().st_size > 4_000_000:
            break
        assert proc.poll() is None, "writer finished before it could be interrupted"
        time.sleep(0.01)
    else:
        pytest.fail("writer never produced a temporary file")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert target.read_bytes() == before
    assert [f.name for f in read_fractures(target)] == ["old"]


def test_writer_rejects_invalid_fracture_and_leaves_target_alone(tmp_path):
    bad = make_fracture()
    bad.pressure[0, 0] = np.nan
    with pytest.raises(DataValidationError, match=r"group 'f0': field 'pressure': 1 non-finite"):
        write_fractures(tmp_path / "d.h5", [bad])
    assert list(tmp_path.iterdir()) == []
