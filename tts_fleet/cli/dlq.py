"""`tts-fleet dlq list|redrive`: read the dead-letter queue without consuming it, and move its
messages back to the jobs queue (tts_fleet/client/dlq.py)."""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.console import Console

from tts_fleet.cli import look
from tts_fleet.cli.options import json_flag
from tts_fleet.cli.target import dlq_url_of, need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.dlq import (
    DeadLetter,
    clear_failure_records,
    failure_reasons,
    peek_dead_letters,
    redrive,
)
from tts_fleet.client.status import queue_counts
from tts_fleet.exit_codes import ExitCode


@click.group()
def dlq() -> None:
    """Inspect and redrive the dead-letter queue."""


@dlq.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@json_flag()
@target_options()
def dlq_list(target: Target, limit: int, as_json: bool) -> None:
    """Show DLQ messages with their error and receive count, without consuming them.

    The error is the worker's failure record of the job (needs the bucket); where there is
    none, the message's `error` attribute, marked as such (a producer can set it itself).
    Reading a message counts as a receive, so each listing adds one to its receive count.
    """
    dlq_url = dlq_url_of(target)
    letters = peek_dead_letters(client_for("sqs", target.aws), dlq_url, limit)
    if target.bucket:
        letters = failure_reasons(client_for("s3", target.aws), target, letters)
    if as_json:
        look.emit_json(
            {"dlq_url": dlq_url, "count": len(letters), "messages": [vars(m) for m in letters]}
        )
        return
    table = look.table(f"{len(letters)} dead letter(s)")
    for column in ("job id", "receives", "error", "message id"):
        table.add_column(column)
    for letter in letters:
        table.add_row(
            "-" if letter.job_id is None else look.shown_id(letter.job_id),
            str(letter.receive_count),
            shown_reason(letter),
            look.shown(letter.message_id),
        )
    Console().print(table)


def shown_reason(letter: DeadLetter) -> str:
    """The worker's reason; else the producer-settable attribute, marked as such."""
    if letter.failure is not None:
        return look.shown(letter.failure)
    if letter.error is not None:
        return f"{look.shown(letter.error)} (from the message attribute)"
    return "-"


def failure_clearer(target: Target) -> Callable[[list[str]], None] | None:
    """Redriven jobs are pending again: drop their old failure records (needs the bucket)."""
    if not target.bucket:
        return None
    s3 = client_for("s3", target.aws)
    return lambda job_ids: clear_failure_records(s3, target, job_ids)


@dlq.command("redrive")
@click.option("--filter", "error_filter", help="Only messages whose error contains this text.")
@json_flag()
@target_options()
@click.pass_context
def dlq_redrive(
    ctx: click.Context, target: Target, error_filter: str | None, as_json: bool
) -> None:
    """Move DLQ messages back to the jobs queue (StartMessageMoveTask, or receive → send →
    delete where it is unavailable or --filter is given; never deletes before the send)."""
    queue_url = need(target, "queue_url")
    dlq_url = dlq_url_of(target)
    sqs = client_for("sqs", target.aws)
    with look.progress_bar(queue_counts(sqs, dlq_url)["visible"], "redrive", not as_json) as bar:
        report = redrive(
            sqs,
            dlq_url,
            queue_url,
            error_filter=error_filter,
            progress=bar,
            on_moved=failure_clearer(target),
        )
    if as_json:
        look.emit_json({"dlq_url": dlq_url, "queue_url": queue_url, **vars(report)})
    else:
        click.echo(
            f"moved {report.moved} message(s) by {report.method}; {report.skipped} skipped by "
            f"the filter, {len(report.failed)} failed, {report.duplicated} left in both queues"
        )
        for message_id, reason in report.failed.items():
            click.secho(
                f"failed: {look.shown(message_id)}: {look.shown(reason)}", err=True, fg="red"
            )
    ctx.exit(ExitCode.FAILED if report.failed else ExitCode.OK)
