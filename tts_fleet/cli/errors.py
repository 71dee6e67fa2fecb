"""Click exceptions that carry the exit code of their kind (tts_fleet/exit_codes.py).

click prints `Error: <message>` on stderr for each, one line, no traceback."""

from __future__ import annotations

import click

from tts_fleet.exit_codes import ExitCode


class BadInput(click.ClickException):
    """A bad flag value, stack config, job file or stack name."""

    exit_code = ExitCode.BAD_INPUT


class MissingTool(click.ClickException):
    """A tool the command needs is not installed (the Pulumi CLI)."""

    exit_code = ExitCode.MISSING_TOOL


class Failed(click.ClickException):
    """The command ran and the work failed (an AWS error, a failed run)."""

    exit_code = ExitCode.FAILED


def bad_config(problems: list[str]) -> BadInput:
    """A stack config's problems, each on its own `Error:` line (DESIGN §3.1), exit code
    BAD_INPUT: the last is the exception's message (main() prints it), the others go first."""
    for problem in problems[:-1]:
        click.secho(f"Error: {problem}", err=True, fg="red")
    return BadInput(problems[-1])
