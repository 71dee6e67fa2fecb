"""Every command that reads a stack file prints each config problem on its own line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import cli
from tts_fleet.exit_codes import ExitCode

BAD_STACK = """\
config:
  tts-fleet:scaling:
    maxWorkers: 0
    idleMinutes: 5000
"""
PROBLEMS = [
    "Error: tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)",
    "Error: tts-fleet:scaling.idleMinutes: must be <= 1440 (got 5000)",
]


@pytest.mark.parametrize(
    "command",
    [
        ["scaling"],
        ["simulate", "--trace", "burst:5"],
        ["cost"],
        ["preflight"],
        ["local", "--demo", "1"],
    ],
)
def test_each_problem_is_one_error_line(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "Pulumi.t.yaml").write_text(BAD_STACK)
    args = [*command, "--stack", "t", "--project-dir", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == PROBLEMS
