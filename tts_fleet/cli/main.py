"""The `tts-fleet` command: a click group; each area registers its commands from its module."""

from __future__ import annotations

import importlib
import os
import sys

import click

from tts_fleet.exit_codes import ExitCode

# One module per area, each exposing `register(group)`; imported eagerly so a
# broken area fails loudly at start-up instead of hiding a command.
COMMAND_MODULES = (
    "tts_fleet.cli.scaling",
    "tts_fleet.cli.jobs",
    "tts_fleet.cli.simulation",
    "tts_fleet.cli.local",
    "tts_fleet.cli.deploy",
    "tts_fleet.cli.speech",
    "tts_fleet.cli.preflight",
)


# `--help` lists commands in the order a user meets them, not alphabetically.
WORKFLOW_ORDER = (
    "local",
    "submit",
    "status",
    "wait",
    "results",
    "dlq",
    "simulate",
    "advise",
    "cost",
    "scaling",
    "preflight",
    "deploy",
    "speech-server",
)


class WorkflowGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        known = [name for name in WORKFLOW_ORDER if name in self.commands]
        return known + sorted(set(self.commands) - set(known))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence: click cuts it at 45 characters otherwise."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=WorkflowGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
@click.version_option(package_name="tts-fleet")
def cli() -> None:
    """Queue-driven GPU text-to-speech on AWS: submit jobs, watch the fleet, fetch audio,
    simulate and cost a scaling policy, and run the whole pipeline locally."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(cli)


def main() -> None:
    """The console script: every error is one `Error: …` line on stderr with the exit code of
    its kind (tts_fleet/exit_codes.py); a traceback only with TTS_FLEET_DEBUG=1."""
    try:
        code = cli.main(prog_name="tts-fleet", standalone_mode=False)
    except click.exceptions.Exit as done:
        code = done.exit_code
    except click.UsageError as error:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
        code = _fail(f"{error.format_message()}{hint}", error.exit_code)
    except click.ClickException as error:
        code = _fail(error.format_message(), error.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("Aborted.", err=True)
        code = ExitCode.INTERRUPTED
    except Exception as error:  # a bug or an environment problem we did not foresee
        if os.environ.get("TTS_FLEET_DEBUG"):
            raise
        message, code = describe_unexpected(error)
        code = _fail(message, code)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


def _fail(message: str, code: int) -> int:
    first = " ".join(message.split())  # one line whatever the exception carried
    click.secho(f"Error: {first}", err=True, fg="red")
    return code


def describe_unexpected(error: Exception) -> tuple[str, int]:
    """One line for an exception no command turned into its own message."""
    from botocore.exceptions import NoCredentialsError, NoRegionError

    if isinstance(error, NoRegionError):
        return "no AWS region: pass --region, or set AWS_REGION", ExitCode.BAD_INPUT
    if isinstance(error, NoCredentialsError):
        return (
            "no AWS credentials: run `aws configure` or `aws sso login`, or set AWS_PROFILE",
            ExitCode.BAD_INPUT,
        )
    if isinstance(error, OSError) and error.filename:
        return f"{error.strerror}: {error.filename}", ExitCode.BAD_INPUT
    return (
        f"unexpected {type(error).__name__}: {error} (TTS_FLEET_DEBUG=1 shows the traceback)",
        ExitCode.FAILED,
    )
