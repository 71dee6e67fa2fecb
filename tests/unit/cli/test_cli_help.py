"""`tts-fleet --help`: commands in workflow order with whole descriptions, listed without
importing them; each command loads from its module, and running one imports no other area."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import COMMANDS, cli, load_command
from tts_fleet.exit_codes import ExitCode, table

ROOT = Path(__file__).resolve().parents[3]


def _commands_section(text: str) -> list[tuple[str, str]]:
    section = text.split("Commands:", 1)[1]
    return [
        (match.group(1), match.group(2))
        for match in re.finditer(r"^  (\S+)\s+(.+)$", section, flags=re.M)
    ]


def test_help_lists_commands_in_workflow_order_with_whole_descriptions() -> None:
    result = CliRunner().invoke(cli, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    rows = _commands_section(result.output)
    names = [name for name, _ in rows]
    assert names == list(COMMANDS)
    assert names[:6] == ["local", "submit", "status", "wait", "results", "dlq"]
    for name, description in rows:
        assert not description.endswith("..."), f"{name}: description cut: {description}"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_loads_and_its_summary_is_its_first_sentence(name: str) -> None:
    # The listing shows COMMANDS' summaries without importing a command: each must say what
    # the command's own help says, or the two drift apart.
    command = load_command(name)
    assert command.name == name
    first_paragraph = " ".join((command.help or "").split("\n\n")[0].split())
    assert first_paragraph.startswith(COMMANDS[name].summary)
    assert isinstance(cli.get_command(click.Context(cli), name), click.Command)


IMPORTED_BY = """
import json, sys
from tts_fleet.cli.main import cli
try:
    cli(sys.argv[1:], prog_name="tts-fleet")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("tts_fleet", "pulumi")))))
"""


def _imported_by(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.processes
def test_a_command_imports_only_its_own_area() -> None:
    # A fresh interpreter: the test process has imported every area already.
    listing = _imported_by("--help")
    assert not {m for m in listing if m.startswith("tts_fleet.cli.") and m != "tts_fleet.cli.main"}
    submit = _imported_by("submit", "--help")
    assert "tts_fleet.cli.submit" in submit
    assert not {m for m in submit if m.startswith(("tts_fleet.sim", "tts_fleet.deploy", "pulumi"))}
    assert "tts_fleet.cli.simulation" not in submit and "tts_fleet.local.run" not in submit


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [code for code, _ in table()]
    assert len(set(codes)) == len(codes) == len(ExitCode)
    assert (ExitCode.BAD_INPUT, ExitCode.MISSING_TOOL, ExitCode.TIMED_OUT) == (2, 3, 4)
