"""`tts-fleet status`: the queue, the DLQ, the oldest message's age and the ECS service, once
or every --watch seconds, as a table or, with --json, one JSON object per refresh; and each
open deadline batch (issue #23) with the controller's forecast, when the bucket is known."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table

from tts_fleet.cli import look
from tts_fleet.cli.options import json_flag
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.batches import optional_batches
from tts_fleet.client.status import find_dlq_url, oldest_age_s, queue_counts, service_counts
from tts_fleet.scaling.bands import outstanding

T = TypeVar("T")


@click.command()
@click.option("--cluster", help="ECS cluster (default: the stack's clusterName output).")
@click.option("--service", help="ECS service (default: the stack's serviceName output).")
@click.option("--watch", type=click.FloatRange(min=0.1), help="Refresh every SECONDS.")
@click.option("--count", type=click.IntRange(min=1), help="With --watch: stop after N refreshes.")
@json_flag()
@target_options()
def status(
    target: Target,
    cluster: str | None,
    service: str | None,
    watch: float | None,
    count: int | None,
    as_json: bool,
) -> None:
    """Queue depth (visible, in flight, delayed), DLQ depth, oldest message age, ECS tasks."""
    cluster, service = cluster or target.cluster, service or target.service
    refreshes = 0
    while True:
        snapshot = read_status(target, cluster, service)
        if as_json:
            look.emit_json(snapshot)
        else:
            console = Console()
            if watch is not None and console.is_terminal:
                console.clear()
            console.print(status_table(snapshot))
            for batch in snapshot["batches"] or []:
                console.print(batch_line(batch), soft_wrap=True, highlight=False)
        refreshes += 1
        if watch is None or (count is not None and refreshes >= count):
            return
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return


def read_status(target: Target, cluster: str | None, service: str | None) -> dict[str, Any]:
    queue_url = need(target, "queue_url")
    sqs = client_for("sqs", target.aws)
    counts = queue_counts(sqs, queue_url)
    dlq_url = target.dlq_url or optional(lambda: find_dlq_url(sqs, queue_url))
    ecs = None
    if cluster and service:
        ecs = service_counts(client_for("ecs", target.aws), cluster, service)
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "queue_url": queue_url,
        **counts,
        "outstanding": outstanding(counts["visible"], counts["in_flight"]),
        "dlq_url": dlq_url,
        "dlq_depth": optional(lambda: queue_counts(sqs, dlq_url)["visible"]) if dlq_url else None,
        "oldest_age_s": oldest_age_s(client_for("cloudwatch", target.aws), queue_url),
        "ecs": ecs,
        "batches": open_batches(target),
    }


def open_batches(target: Target) -> list[dict[str, Any]] | None:
    """Each open batch (docs/cli.md, `status --json`); None when there is no bucket or the
    caller may not read its batches. A record that cannot be used is a warning on stderr."""
    found = optional_batches(client_for("s3", target.aws), target.bucket)
    if found is None:
        return None
    for problem in found.problems:
        click.secho(look.shown(f"warning: skipped batch data: {problem}"), err=True, fg="yellow")
    return found.to_json()


def batch_verdict(batch: dict[str, Any]) -> str:
    """On track or at risk, as the controller last forecast; "not planned yet" before."""
    if batch["on_track"] is None:
        return "not planned yet"
    return "on track" if batch["on_track"] else "at risk"


def batch_line(batch: dict[str, Any]) -> str:
    """One open batch as one line (status and wait), its values escaped: a record is
    untrusted input, however checked."""

    def value(key: str) -> str:
        return look.shown("-" if batch[key] is None else batch[key])

    return (
        f"batch {value('batch_id')}: {value('done')} of {value('jobs')} done, "
        f"{value('remaining')} remaining, deadline {value('deadline')}, predicted finish "
        f"{value('predicted_finish')}: {batch_verdict(batch)}"
    )


def optional(read: Callable[[], T]) -> T | None:
    """A value status can live without (an operator may not be allowed to read it)."""
    try:
        return read()
    except (ClientError, BotoCoreError):
        return None


def status_table(snapshot: dict[str, Any]) -> Table:
    def show(value: Any) -> str:  # ECS's counts among them: a server's, so shown safely
        return "-" if value is None else look.shown(value)

    ecs = snapshot["ecs"] or {}
    table = look.table(f"tts-fleet status {snapshot['at']}")
    for column in ("visible", "in flight", "delayed", "DLQ", "oldest age s", "desired", "running"):
        table.add_column(column, justify="right")
    table.add_row(
        *(show(snapshot[key]) for key in ("visible", "in_flight", "delayed", "dlq_depth")),
        show(snapshot["oldest_age_s"]),
        show(ecs.get("desired")),
        show(ecs.get("running")),
    )
    return table
