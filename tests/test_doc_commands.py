"""The commands the README and the documentation show are commands the code accepts: every `flowlearn ...` line of
their code blocks parses with the `flowlearn` parser (its commands, options and values as the code declares them),
and every `python train.py ...` line composes with Hydra into a config that passes the run's checks. A renamed
option, a removed config group or a value out of range in a page fails here, not in a user's first hour."""

from __future__ import annotations

import re
import shlex

import pytest
from hydra.errors import HydraException
from omegaconf import OmegaConf
from test_configs import _compose
from test_train import ROOT

from flowlearn.cli import build_parser
from flowlearn.errors import ConfigError
from flowlearn.training.config import check_run_groups, validate_config

PAGES = [ROOT / "README.md", ROOT / "data" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
# A placeholder a page asks the reader to fill in (<date>, RUN_DIR, ...): any word stands for it.
PLACEHOLDER = re.compile(r"<[^>]+>")
# What a page's command may lack on the machine that checks it: the files it names as examples, a GPU.
ELSEWHERE = ("file not found", "checkpoint not found", "this machine has no CUDA GPU")
# A shell substitution ($(...)) adds words the shell computes: left out, the rest must still parse.
SUBSTITUTION = re.compile(r"\$\([^()]*\)")


def _commands(program: str) -> list[tuple[str, str]]:
    """(page, command) for each line of a code block that runs ``program``, continued lines joined, one command
    of a ``&&`` chain at a time, a ``$ `` prompt and trailing comments dropped."""
    found = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text()):
            for line in SUBSTITUTION.sub("", block.replace("\\\n", " ")).splitlines():
                for part in line.split("&&"):
                    command = part.strip().removeprefix("$ ").split("  #")[0].strip()
                    # A line a program printed ("flowlearn predict: warning: ...") is output, not a command.
                    if (command.startswith(program + " ") or command == program) and not re.match(
                        rf"{re.escape(program)} [\w-]+:", command
                    ):
                        found.append((page.relative_to(ROOT).as_posix(), command))
    return found


FLOWLEARN = _commands("flowlearn")
TRAIN = _commands("python train.py")


def test_the_pages_show_both_kinds_of_command():
    assert len(FLOWLEARN) > 20 and len(TRAIN) > 20, (len(FLOWLEARN), len(TRAIN))


@pytest.mark.parametrize("page, command", FLOWLEARN, ids=[f"{p}: {c}" for p, c in FLOWLEARN])
def test_each_flowlearn_command_of_the_docs_parses(page, command):
    words = shlex.split(PLACEHOLDER.sub("X", command))[1:]
    if not words or words[0].startswith("-"):  # `flowlearn --help`, `flowlearn --version`
        return
    try:
        build_parser([words[0]]).parse_args(words)
    except SystemExit as stop:
        assert stop.code == 0, f"{page}: `{command}` is refused by the parser"


@pytest.mark.parametrize("page, command", TRAIN, ids=[f"{p}: {c}" for p, c in TRAIN])
def test_each_train_command_of_the_docs_composes_and_passes_the_checks(page, command, tmp_path):
    words = shlex.split(PLACEHOLDER.sub("X", command))[2:]
    overrides = [w for w in words if w not in ("-m", "--multirun")]
    # A sweep's comma lists: each value is a run of its own; the first stands for them.
    overrides = [re.sub(r"=([^=\[\]{}]*?),[^=]*$", r"=\1", w) if "[" not in w else w for w in overrides]
    try:
        cfg = _compose(tmp_path, *overrides)
    except HydraException as error:
        raise AssertionError(f"{page}: `{command}` does not compose: {error}") from None
    check_run_groups(cfg)
    try:
        validate_config(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))
    except ConfigError as error:
        assert any(reason in str(error) for reason in ELSEWHERE), f"{page}: `{command}`: {error}"
