"""What a command may write over: an output path is refused where writing it would replace one of the command's
inputs, a file of a training run (its ``predictions.h5``, its checkpoints), or an existing file of another kind than
the command writes, told from the file's contents (a checkpoint or a data file named by mistake). The library's
writers replace what their caller names; the commands check first.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from pathlib import Path

from flowlearn.checks import check_not_input
from flowlearn.errors import USER_ERRORS, DataValidationError, SettingError

# The kinds of file a command writes, as a refusal to replace a file of another kind names them.
OUTPUT_KINDS = {"predictions": "a predictions file", "fractures": "a fracture file", "png": "a PNG image"}


def check_new_output(
    output: str,
    kind: str,
    inputs: Sequence[str | Path] = (),
    inputs_are: str = "",
    option: str = "--output",
    run_dir: str | None = None,
) -> None:
    """Raise :class:`SettingError` for ``option``, the file of ``kind`` (a key of :data:`OUTPUT_KINDS`) that a
    command writes, where writing it would replace what is not the command's to replace:

    * one of the ``inputs`` it reads (the same file, however named: ``./a.h5``, a link, a hard link);
      ``inputs_are`` says what they are ("one of the inputs");
    * the predictions.h5 of a run, or a file in its checkpoints folder (:func:`_run_file`): the record of a
      training that report, evaluate and predict read, which ``run_dir`` names as the command's own run;
    * an existing file of another kind (:func:`_file_kind`), or one that cannot be read to tell: a checkpoint or a
      data file named by mistake would be lost. A file of the kind (an earlier output), or an empty one, is
      replaced.
    """
    check_not_input(output, inputs, inputs_are, option)
    target = Path(output)
    owned = _run_file(target, run_dir)
    if owned:
        raise SettingError(option, f"{output} is {owned}: give a new file")
    try:
        replaced = target.is_file() and target.stat().st_size > 0
    except OSError:  # not to be looked at: the write says why
        replaced = False
    if replaced:  # a folder, FIFO or device is left to check_writable
        try:
            found, what = _file_kind(target)
        except OSError as err:
            found, what = None, f"a file that cannot be read ({err.strerror or err})"
        if found != kind:
            raise SettingError(
                option, f"{output} exists and is {what}, not {OUTPUT_KINDS[kind]}: give a new file"
            )


def _run_file(output: Path, run_dir: str | None) -> str | None:
    """What ``output`` is of a run, as an error message says it ("the predictions.h5 of the run R"), where it is a
    run's predictions.h5 or in a run's checkpoints folder; None elsewhere. ``run_dir``, the command's own run, is
    "the run's own" (and a run even where it lacks its folders). Its folder is resolved (``run/./x``, a link to a
    folder), not its name: a link named ``output`` is replaced, not the file it points to."""
    from flowlearn.runs import looks_like_run

    folder = output.absolute().parent.resolve()
    own = Path(run_dir).resolve() if run_dir is not None else None
    if output.name == "predictions.h5" and (folder == own or looks_like_run(folder)):
        return "the run's own predictions.h5" if folder == own else f"the predictions.h5 of the run {folder}"
    run = folder.parent
    if folder.name == "checkpoints" and (run == own or looks_like_run(run)):
        if output.exists():
            return "one of the run's own checkpoints" if run == own else f"a checkpoint of the run {run}"
        return (
            "in the run's own checkpoints folder"
            if run == own
            else f"in the checkpoints folder of the run {run}"
        )
    return None


# File signatures (first bytes) of the files an output may be given in place of, and what each is.
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "png", "a PNG image"), (b"%PDF-", None, "a PDF document"))


def _file_kind(path: Path) -> tuple[str | None, str]:
    """(kind, what) of the existing, readable file ``path``: its key of :data:`OUTPUT_KINDS` (None for a file of
    none of them) and what it is, as an error message says it ("a torch checkpoint"), by its contents: the file
    signatures of PNG and HDF5, then the flowlearn or original layout of a fracture file
    (:func:`~flowlearn.data.files.detect_layout`) or the groups of a predictions file
    (:func:`~flowlearn.training.predictions.holds_predictions`)."""
    import zipfile

    import h5py

    from flowlearn.data.files import detect_layout, open_file

    with open(path, "rb") as fh:
        head = fh.read(512)
    for signature, kind, what in _SIGNATURES:
        if head.startswith(signature):
            return kind, what
    if h5py.is_hdf5(path):
        from flowlearn.training.predictions import holds_predictions

        try:
            with open_file(path) as f:
                try:
                    return "fractures", f"a fracture file ({detect_layout(f, path)} layout)"
                except DataValidationError:
                    if holds_predictions(f, path):
                        return "predictions", "a predictions file"
        except (*USER_ERRORS, OSError, KeyError, RuntimeError):
            return None, "a damaged HDF5 file"
        return None, "an HDF5 file holding neither fractures nor predictions"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            # torch.save writes a zip archive whose pickle is <name>/data.pkl.
            torch = any(name.endswith("/data.pkl") for name in archive.namelist())
        return None, "a torch checkpoint" if torch else "a zip archive"
    try:
        # Incremental: the bytes read may end inside a character.
        codecs.getincrementaldecoder("utf-8")().decode(head)
        text = b"\0" not in head
    except UnicodeDecodeError:
        text = False
    return None, "a text file" if text else "a file of another format (not HDF5 nor PNG)"
