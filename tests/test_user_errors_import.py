"""``flowlearn import`` and ``flowlearn reference``: a user's mistake is one line naming the file, option or value,
exit status 2, and no output file; a row per case. The importers' own checks are tested in
tests/test_user_errors_scans.py: here, that the command says them in its options' words."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
from test_scans import BOTTOM, TOP, VOLUME
from test_user_errors_scans import _blocked, _unclear

from flowlearn.cli import main
from flowlearn.data.files import write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.threads import usable_cores

VOXEL = "2e-5"
VOXEL_RANGE = "must be a number in [1e-09, 1] (metres per voxel: a nanometre to a metre)"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The scans and fracture files of the rows, by name."""
    base = tmp_path_factory.mktemp("import")
    made: dict[str, Path] = {}

    def npy(name: str, array: np.ndarray) -> None:
        made[name] = base / f"{name}.npy"
        np.save(made[name], array)

    npy("scan", VOLUME)
    npy("empty", np.zeros((8, 9, 10), np.uint8))
    npy("full", np.ones((8, 9, 10), np.uint8))
    npy("blocked", _blocked())
    npy("unclear", _unclear())
    made["tif"] = base / "scan.tif"
    tifffile.imwrite(made["tif"], np.moveaxis(VOLUME, 2, 0), photometric="minisblack")
    made["truncated"] = base / "truncated.tif"
    made["truncated"].write_bytes(made["tif"].read_bytes()[: made["tif"].stat().st_size // 2])
    made["raw"] = base / "scan.raw"
    VOLUME.tofile(made["raw"])  # 24 x 40 x 24 uint8: 23040 bytes
    for name, heights in (("top", TOP), ("bottom", BOTTOM), ("narrow", BOTTOM[:, :30])):
        made[name] = base / f"{name}.csv"
        np.savetxt(made[name], heights, delimiter=",")
    made["nan"] = base / "nan.csv"
    made["nan"].write_text(made["top"].read_text().replace(made["top"].read_text().split(",")[1], "nan", 1))
    made["text"] = base / "notes.csv"
    made["text"].write_text("top wall\nmeasured on Monday\n")
    aperture = np.full((6, 8), 50.0)
    npy("map", aperture)
    negative = aperture.copy()
    negative[4, 5] = -2.0
    npy("negative", negative)
    closed = aperture.copy()
    closed[:, 4] = 0.0
    npy("closed", closed)
    # Fracture files: an aperture map with its voxel size, one too thin for its voxels, one without fractures, one in the original layout (no
    # voxel size), and a text file where an output is asked for.
    made["maps"] = base / "maps.h5"
    write_fractures(made["maps"], [Fracture("f0", np.full((6, 8), 4e-5), None, voxel_size=1e-5)])
    # Gaps of a third of a voxel: no voxel centre lies in them.
    made["thin"] = base / "thin.h5"
    write_fractures(made["thin"], [Fracture("f0", np.full((6, 8), 3e-6), None, voxel_size=1e-5)])
    made["no_groups"] = base / "no_groups.h5"
    with h5py.File(made["no_groups"], "w") as f:
        f.attrs["schema"], f.attrs["schema_version"] = "flowlearn-fractures", 1
    made["original"] = base / "original.h5"
    with h5py.File(made["original"], "w") as f:
        f.create_dataset("fracture_1/aperture_field", data=np.full((1, 1, 6, 8), 4.0))
    made["notes"] = base / "notes.txt"
    made["notes"].write_text("not a fracture file\n")
    made["jpg"] = base / "map.jpg"
    made["jpg"].write_bytes(b"\xff\xd8")
    return made


TOO_MANY = str(usable_cores() + 1)

# {name}: a file of the `files` fixture; {out}: the output, which no row may leave behind.
ROWS = [
    # ------------------------------------------------------------------------------------------ import volume
    (["import", "volume", "{empty}", "--voxel-size", VOXEL], "{empty}: no pore voxel (none nonzero)"),
    (
        ["import", "volume", "{full}", "--voxel-size", VOXEL],
        "{full}: every voxel of the 8x9x10 volume is pore",
    ),
    (["import", "volume", "{full}", "--voxel-size", VOXEL], "the segmentation inverted (give --pore-label)?"),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--pore-label", "5"],
        "{scan}: no pore voxel (none equal to --pore-label 5)",
    ),
    (
        ["import", "volume", "{blocked}", "--voxel-size", VOXEL],
        "{blocked}: no pore cluster (face-connected) joins the inlet to the outlet",
    ),
    (["import", "volume", "{blocked}", "--voxel-size", VOXEL], "is --flow-axis right ('columns' or 'rows')?"),
    (
        ["import", "volume", "{unclear}", "--voxel-size", VOXEL],
        "{unclear}: cannot tell the fracture's normal",
    ),
    (["import", "volume", "{unclear}", "--voxel-size", VOXEL], "give --normal (0, 1 or 2"),
    (
        ["import", "volume", "{truncated}", "--voxel-size", VOXEL],
        "{truncated}: not a readable TIFF file (truncated or corrupt?)",
    ),
    (
        ["import", "volume", "{raw}", "--voxel-size", VOXEL, "--shape", "24", "40", "25", "--dtype", "uint8"],
        "{raw}: 23040 bytes, but shape (24, 40, 25) of uint8 takes 24000 bytes",
    ),
    (["import", "volume", "{raw}", "--voxel-size", VOXEL], "--shape and dtype are needed to read {raw}"),
    (
        ["import", "volume", "{raw}", "--voxel-size", VOXEL, "--shape", "24", "40", "24", "--dtype", "pixel"],
        "--dtype must be a numeric numpy dtype",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--shape", "24", "40", "24"],
        "--shape and dtype describe raw files only",
    ),
    (["import", "volume", "{raw}", "--voxel-size", VOXEL, "--shape", "24", "0", "24"], "must be a positive"),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--normal", "3"],
        "argument --normal: invalid choice",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--pore-label", "1.5"],
        "argument --pore-label: invalid int value: '1.5'",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--flow-axis", "x"],
        "argument --flow-axis: invalid choice: 'x'",
    ),
    (["import", "volume", "{scan}", "--voxel-size", "nan"], f"argument --voxel-size: {VOXEL_RANGE}, got nan"),
    (["import", "volume", "{scan}", "--voxel-size", "inf"], f"argument --voxel-size: {VOXEL_RANGE}, got inf"),
    (
        ["import", "volume", "{scan}", "--voxel-size=-2e-5"],
        f"argument --voxel-size: {VOXEL_RANGE}, got -2e-05",
    ),
    (["import", "volume", "{scan}", "--voxel-size", "0"], f"argument --voxel-size: {VOXEL_RANGE}, got 0.0"),
    (["import", "volume", "{scan}"], "the following arguments are required: --voxel-size"),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--crop", "0", "25", "0", "40"],
        "--crop must be (row0, row1, col0, col1), integers with 0 <= row0 < row1 <= 24",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--crop", "0", "10"],
        "argument --crop: expected 4",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--coarsen", "0"],
        "argument --coarsen: must be a positive integer, got 0",
    ),
    (
        ["import", "volume", "{scan}", "--voxel-size", VOXEL, "--coarsen", "14"],
        "--coarsen must leave at least 2 rows and 3 columns of the 24x40 map",
    ),
    (["import", "volume", "{map}x", "--voxel-size", VOXEL], "{map}x: no such file or folder (SCAN)"),
    (["import", "volume", "{scan}", "--voxel-size", VOXEL, "-o", "{scan}"], "--output {scan} is the scan"),
    (["import", "volume", "{scan}", "--voxel-size", VOXEL, "-o", ""], "argument -o/--output: must be a path"),
    (["import", "volume", "{scan}", "--voxel-size", VOXEL, "-o", "{notes}"], "exists and is a text file"),
    (["import", "shape", "{scan}"], "argument KIND: invalid choice: 'shape'"),
    # ------------------------------------------------------------------------------------------- import walls
    (
        ["import", "walls", "{top}", "{narrow}", "--pixel-size", VOXEL],
        "{top}: shape (24, 40), but {narrow} has shape (24, 30)",
    ),
    (["import", "walls", "{nan}", "{bottom}", "--pixel-size", VOXEL], "{nan}: top heights: 1 non-finite"),
    # Swapped: the top below the bottom everywhere, the walls touch everywhere.
    (
        ["import", "walls", "{bottom}", "{top}", "--pixel-size", VOXEL, "--units", "um"],
        "are TOP and BOTTOM swapped, or does the top need --flip?",
    ),
    (["import", "walls", "{text}", "{bottom}", "--pixel-size", VOXEL], "{text}: not a table of numbers"),
    (
        ["import", "walls", "{top}", "{map}x", "--pixel-size", VOXEL],
        "{map}x: no such file or folder (BOTTOM)",
    ),
    (
        ["import", "walls", "{top}", "{bottom}", "--pixel-size", "nan"],
        f"argument --pixel-size: {VOXEL_RANGE}",
    ),
    (["import", "walls", "{top}", "{bottom}", "--pixel-size=-1"], f"argument --pixel-size: {VOXEL_RANGE}"),
    (
        ["import", "walls", "{top}", "{bottom}", "--pixel-size", VOXEL, "--units", "inch"],
        "argument --units: invalid choice: 'inch'",
    ),
    # Heights in micrometres read as metres: gaps of metres on a map of a millimetre.
    (["import", "walls", "{top}", "{bottom}", "--pixel-size", VOXEL], "longest side"),
    (["import", "walls", "{top}", "{bottom}", "--pixel-size", VOXEL, "-o", "{bottom}"], "is the scan"),
    # ---------------------------------------------------------------------------------------- import aperture
    (
        ["import", "aperture", "{negative}", "--pixel-size", VOXEL, "--units", "um"],
        "{negative}: apertures: 1 negative value(s) (min -2), the first at pixel (4, 5)",
    ),
    (
        ["import", "aperture", "{closed}", "--pixel-size", VOXEL, "--units", "um"],
        "{closed}: no open path (aperture > 0, 4-connected) joins the inlet",
    ),
    (
        ["import", "aperture", "{map}", "--pixel-size", VOXEL, "--scale", "nan"],
        "--scale must be a number > 0 (metres per grey level), got nan",
    ),
    (
        ["import", "aperture", "{map}", "--pixel-size", VOXEL, "--scale", "inf"],
        "--scale must be a finite number > 0 (metres per grey level), got inf",
    ),
    (
        ["import", "aperture", "{map}", "--pixel-size", VOXEL, "--scale=-1e-6"],
        "--scale must be a number > 0 (metres per grey level), got -1e-06",
    ),
    (["import", "aperture", "{map}", "--pixel-size", VOXEL, "--scale", "0"], "--scale must be a number > 0"),
    (
        ["import", "aperture", "{map}", "--pixel-size", VOXEL],
        "one of the arguments --scale --units is required",
    ),
    (
        ["import", "aperture", "{map}", "--pixel-size", VOXEL, "--scale", "1e-6", "--units", "um"],
        "argument --units: not allowed with argument --scale",
    ),
    (
        ["import", "aperture", "{jpg}", "--pixel-size", VOXEL, "--units", "um"],
        "{jpg}: cannot read a map from it (MAP); expected a file ending in .csv",
    ),
    (
        ["import", "aperture", "{tif}", "--pixel-size", VOXEL, "--units", "um"],
        "{tif}: 24 pages; a map is one page",
    ),
    (
        ["import", "aperture", "{map}", "--pixel-size", "inf", "--units", "um"],
        f"argument --pixel-size: {VOXEL_RANGE}",
    ),
    # ---------------------------------------------------------------------------------------------- reference
    (["reference", "{no_groups}"], "the following arguments are required: -o/--output"),
    (["reference", "{no_groups}", "-o", "{out}"], "{no_groups}: contains no fracture groups"),
    (["reference", "{maps}", "-o", "{maps}"], "--output {maps} is the input DATA: give a new file"),
    (
        ["reference", "{maps}", "-o", "{notes}"],
        "--output {notes} exists and is a text file, not a fracture file",
    ),
    (
        ["reference", "{original}", "-o", "{out}"],
        "{original}: group 'fracture_1': its voxel size is unknown, so its aperture cannot be voxelised",
    ),
    (["reference", "{thin}", "-o", "{out}"], "{thin}: group 'f0': no voxel is fluid at 1e-05 m per voxel"),
    (["reference", "{maps}", "-o", "{out}", "--density-drop", "0.5"], "--density-drop must be in (0, 0.1]"),
    (["reference", "{maps}", "-o", "{out}", "--omega", "2"], "--omega must be in (0, 2), got 2.0"),
    (
        ["reference", "{maps}", "-o", "{out}", "--threads", TOO_MANY],
        f"--threads must be an integer in [1, {usable_cores()}]",
    ),
    (["reference", "{maps}", "-o", "{out}", "--target", "tpu"], "argument --target: invalid choice: 'tpu'"),
    (["reference", "{map}x", "-o", "{out}"], "{map}x: no such file"),
    (["reference", "{maps}", "-o", "{out}", "--tasks", "4"], "--tasks applies only with --slurm"),
    (["reference", "{maps}", "-o", "{out}", "--slurm", "--mem-gb", "0"], "--mem-gb must be > 0, got 0.0"),
]


@pytest.mark.parametrize("argv, message", ROWS)
def test_import_and_reference_mistakes(files, tmp_path, capsys, argv, message):
    names = {name: str(path) for name, path in files.items()} | {"out": str(tmp_path / "out.h5")}
    given = [word.format(**names) for word in argv]
    if given[0] == "import" and "-o" not in given and "--help" not in given:
        given += ["-o", names["out"]]
    try:
        status = main(given)
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert message.format(**names) in err, err
    assert not (tmp_path / "out.h5").exists()
    assert not (tmp_path / "out.h5.parts").exists()
