"""`tts-fleet --help`: commands in workflow order with whole descriptions, listed without
importing them; each command loads from its module, and running one imports no other area."""

from __future__ import annotations

import re
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


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [code for code, _ in table()]
    assert len(set(codes)) == len(codes) == len(ExitCode)
    assert (ExitCode.BAD_INPUT, ExitCode.MISSING_TOOL, ExitCode.TIMED_OUT) == (2, 3, 4)
