"""The `tts-fleet` command: a click group listing every command, each imported when it runs."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from dataclasses import dataclass

import click

from tts_fleet.exit_codes import ExitCode


@dataclass(frozen=True)
class CommandInfo:
    """Where a command lives and its one-line summary for `--help` (the first sentence of its
    docstring, tests/unit/cli/test_cli_help.py holds them equal), so listing imports no command."""

    module: str
    attribute: str
    summary: str


# Every command, in the order `--help` lists them (the order a user meets them), each loaded
# from its module only when it runs (after pip's `commands_dict`).
COMMANDS: dict[str, CommandInfo] = {
    "local": CommandInfo(
        "tts_fleet.cli.local",
        "local",
        "Run the whole pipeline here: emulated SQS/S3, espeak speech, real workers, local scaler.",
    ),
    "submit": CommandInfo(
        "tts_fleet.cli.submit",
        "submit",
        "Send jobs from SOURCE: a JSONL file, a directory of .txt files, or - for stdin.",
    ),
    "status": CommandInfo(
        "tts_fleet.cli.status",
        "status",
        "Queue depth (visible, in flight, delayed), DLQ depth, oldest message age, ECS tasks.",
    ),
    "wait": CommandInfo(
        "tts_fleet.cli.wait", "wait", "Wait until every job of SOURCE is done or failed."
    ),
    "results": CommandInfo(
        "tts_fleet.cli.results",
        "results",
        "Download the audio and manifest of done jobs into OUT.",
    ),
    "dlq": CommandInfo("tts_fleet.cli.dlq", "dlq", "Inspect and redrive the dead-letter queue."),
    "simulate": CommandInfo(
        "tts_fleet.cli.simulation",
        "simulate_cmd",
        "Simulate a scaling policy on a workload trace: latency, drain time, GPU hours, cost.",
    ),
    "advise": CommandInfo(
        "tts_fleet.cli.simulation",
        "advise_cmd",
        "Sweep idleMinutes × hostIdleSeconds (and κ, scaling.coldStartWork, in controller mode) "
        "on a trace; print the cost/p95 Pareto frontier.",
    ),
    "cost": CommandInfo(
        "tts_fleet.cli.simulation",
        "cost_cmd",
        "The idle floor per month for each network mode, and the cost per GPU hour.",
    ),
    "scaling": CommandInfo(
        "tts_fleet.cli.scaling",
        "scaling",
        "Show how a stack sizes its fleet in its scaling.mode.",
    ),
    "coldstart": CommandInfo(
        "tts_fleet.cli.coldstart",
        "coldstart",
        "Cold-start phases of a stack's workers: p50 and p95 per phase and instance type.",
    ),
    "preflight": CommandInfo(
        "tts_fleet.cli.preflight",
        "preflight",
        "Check GPU capacity before a deploy: the instance types that match tts-fleet:gpu in the "
        "region, where they are offered, the account's vCPU quota, the largest worker count it "
        "allows, and the cheapest eligible type's price.",
    ),
    "deploy": CommandInfo(
        "tts_fleet.cli.deploy",
        "deploy",
        "Preview and apply a stack with the Pulumi Automation API (what CI runs).",
    ),
    "voices": CommandInfo(
        "tts_fleet.cli.voices",
        "voices",
        "Manage the stack's voice library: cloned and designed voices that jobs name in `voice`.",
    ),
    "weights": CommandInfo(
        "tts_fleet.cli.weights",
        "weights",
        "Upload a model snapshot and its weights.json to the stack's bucket (worker.weights: s3).",
    ),
    "speech-server": CommandInfo(
        "tts_fleet.cli.speech",
        "speech_server",
        "Serve POST /v1/audio/speech, GET /health and GET /v1/audio/voices on this machine.",
    ),
}
SUMMARY_CHARS = 200  # a longer summary is cut at a word with "..."


def load_command(name: str) -> click.Command:
    info = COMMANDS[name]
    command = getattr(importlib.import_module(info.module), info.attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{info.module}.{info.attribute} is not a click command")
    return command


class WorkflowGroup(click.Group):
    """The commands of COMMANDS, listed without importing them; each imported when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence: click cuts it at 45 characters otherwise."""
        rows = [(name, shorten(info.summary)) for name, info in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def shorten(text: str, limit: int = SUMMARY_CHARS) -> str:
    """`text`, or as many whole words as fit with "..." (as click shortens a command's help)."""
    return textwrap.shorten(text, limit, placeholder="...", break_on_hyphens=False)


@click.group(
    cls=WorkflowGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
@click.version_option(package_name="tts-fleet")
def cli() -> None:
    """Queue-driven GPU text-to-speech on AWS: submit jobs, watch the fleet, fetch audio,
    simulate and cost a scaling policy, and run the whole pipeline locally."""


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
