"""`tts-fleet --help`: commands in workflow order with whole descriptions; the exit-code table."""

from __future__ import annotations

import re

from click.testing import CliRunner

from tts_fleet.cli.main import WORKFLOW_ORDER, cli
from tts_fleet.exit_codes import ExitCode, table


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
    assert names == [name for name in WORKFLOW_ORDER if name in cli.commands]
    assert names[:6] == ["local", "submit", "status", "wait", "results", "dlq"]
    for name, description in rows:
        assert not description.endswith("..."), f"{name}: description cut: {description}"


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [code for code, _ in table()]
    assert len(set(codes)) == len(codes) == len(ExitCode)
    assert (ExitCode.BAD_INPUT, ExitCode.MISSING_TOOL, ExitCode.TIMED_OUT) == (2, 3, 4)
