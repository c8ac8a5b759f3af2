"""The README's two commands are the ones CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return [
        line.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()
    ]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = _bash_blocks((ROOT / "README.md").read_text())
    test_commands = [line for line in readme if "pytest" in line]
    assert len(test_commands) == 1, test_commands
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_commands[0] in ci_lines


def test_ci_installs_the_readme_system_packages():
    readme = _bash_blocks((ROOT / "README.md").read_text())
    apt = next(line for line in readme if line.startswith("apt-get install"))
    packages = set(apt.split()[3:])
    ci = (ROOT / ".ci" / "run").read_text()
    assert packages <= set(re.findall(r"[\w.+-]+", ci)), packages
