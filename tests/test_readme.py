"""CI must run the README's test command as written, and the README must list every experiment family."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [c.strip() for c in re.findall(r"```bash\n(.+?)\n\s*```", section, flags=re.S)]


def test_quickstart_has_exactly_two_commands_and_ci_runs_the_second():
    commands = quickstart_commands()
    assert len(commands) == 2
    assert "python train.py" in commands[0]
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text()
