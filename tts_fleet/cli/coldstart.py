"""`tts-fleet coldstart`: how long a stack's cold starts took, phase by phase (p50, p95 per
phase and instance type), from its workers' `ColdStartSeconds` lines
(tts_fleet/client/coldstart.py); what each phase spans: docs/deploy.md#cold-start-phase-budget."""

from __future__ import annotations

import time
from pathlib import Path

import click
from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.cli import look
from tts_fleet.cli.errors import BadInput, Failed
from tts_fleet.cli.options import aws_flags, json_flag, stack_option
from tts_fleet.client.aws import AwsSettings, NoRegion, client_for
from tts_fleet.client.coldstart import ColdStartError, PhaseFigures, read_figures

SOURCES = {
    "metrics": "CloudWatch metrics",
    "logs": "the worker log group's EMF lines",
    "file": "recorded EMF lines",
}


@click.command()
@stack_option("The stack (its workers' `Stack` dimension).", required=True)
@click.option("--days", type=float, default=7.0, show_default=True, help="Look-back.")
@click.option(
    "--log-group",
    help="Read the EMF lines of this log group (the worker service's, FilterLogEvents) and "
    "compute the percentiles here, instead of CloudWatch's metrics.",
)
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Read recorded EMF lines (a worker's stdout) from FILE instead.",
)
@json_flag()
@aws_flags()[0]  # --region
@aws_flags()[1]  # --profile
def coldstart(
    stack: str,
    days: float,
    log_group: str | None,
    from_file: Path | None,
    as_json: bool,
    region: str | None,
    profile: str | None,
) -> None:
    """Cold-start phases of a stack's workers: p50 and p95 per phase and instance type."""
    if log_group and from_file:
        raise BadInput("give at most one of --log-group and --from-file")
    try:
        source, figures = _read(stack, days, log_group, from_file, AwsSettings(region, profile))
    except ColdStartError as error:
        raise BadInput(str(error)) from None
    except NoRegion as error:
        raise BadInput(str(error)) from None
    except (BotoCoreError, ClientError) as error:
        raise Failed(f"cannot read the cold-start figures: {error}") from None
    if as_json:
        look.emit_json(
            {
                "stack": stack,
                "days": days,
                "source": source,
                "phases": [f.as_json() for f in figures],
            }
        )
        return
    click.echo(render(stack, days, source, figures), nl=False)


def _read(
    stack: str, days: float, log_group: str | None, from_file: Path | None, aws: AwsSettings
) -> tuple[str, list[PhaseFigures]]:
    now = time.time()
    if from_file is not None:
        with from_file.open(errors="replace") as lines:
            return read_figures(stack, days, lines=lines, now=now)
    if log_group is not None:
        return read_figures(stack, days, logs=client_for("logs", aws), log_group=log_group, now=now)
    return read_figures(stack, days, cloudwatch=client_for("cloudwatch", aws), now=now)


def render(stack: str, days: float, source: str, figures: list[PhaseFigures]) -> str:
    """A plain table: one row per phase and instance type, in the order of a cold start."""
    head = f"cold starts of stack {stack}, last {days:g} days ({SOURCES[source]})\n"
    if not figures:
        return head + "no ColdStartSeconds figures in that window\n"
    rows = [("phase", "instance type", "n", "p50", "p95")]
    rows += [
        (f.phase, f.instance_type, str(f.count), f"{f.p50:.1f}s", f"{f.p95:.1f}s") for f in figures
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    return head + "\n".join(lines) + "\n"
