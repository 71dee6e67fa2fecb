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
