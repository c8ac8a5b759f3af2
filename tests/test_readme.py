"""The README's two commands are the ones CI runs, and CI installs the optional system packages the docs name."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_lines(text: str) -> list[str]:
    return [
        line.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()
    ]


def _script_lines(name: str) -> list[str]:
    return [line.strip() for line in (ROOT / ".ci" / name).read_text().splitlines()]


def test_the_readme_has_two_commands_and_nothing_before_them():
    readme = _bash_lines((ROOT / "README.md").read_text())
    main, test = readme[:2]
    assert main.startswith("pip install") and main.endswith("python train.py"), main
    assert test.startswith("pip install") and test.endswith("python -m pytest"), test
    # pip alone: no extra that builds against a system library, no system package manager.
    assert "cholmod" not in main + test
    assert not any(line.startswith(("apt", "sudo")) for line in readme)


def test_ci_runs_the_readme_commands_verbatim():
    readme = _bash_lines((ROOT / "README.md").read_text())
    assert [line for line in readme if "pytest" in line] == [readme[1]]
    assert readme[1] in _script_lines("run")
    # The main command runs in a fresh virtual environment, before .ci/run installs any system package.
    assert readme[0] in _script_lines("fresh-venv")
    run = _script_lines("run")
    assert run.index("bash .ci/fresh-venv") < next(
        i for i, line in enumerate(run) if "apt-get install" in line
    )


def test_ci_installs_the_system_packages_the_docs_name():
    docs = [line for page in (ROOT / "docs").rglob("*.md") for line in _bash_lines(page.read_text())]
    named = {
        word
        for line in docs
        if "apt-get install" in line
        for word in line.split()[3:]
        if not word.startswith("-")
    }
    assert {"libsuitesparse-dev", "libopenblas-dev"} <= named, named
    ci = (ROOT / ".ci" / "run").read_text()
    assert named <= set(re.findall(r"[\w.+-]+", ci)), named - set(re.findall(r"[\w.+-]+", ci))
