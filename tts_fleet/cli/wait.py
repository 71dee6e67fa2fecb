"""`tts-fleet wait SOURCE`: until every job is done or failed, by polling the bucket or, with
--events, by reading the stack's completion events (tts_fleet/client/results.py, events.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tts_fleet.cli import look
from tts_fleet.cli.options import json_flag, split_chars_option
from tts_fleet.cli.sources import not_a_terminal, require_source
from tts_fleet.cli.status import batch_line, open_batches
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.events import wait_for_completions
from tts_fleet.client.inputs import STDIN
from tts_fleet.client.keys import untrusted_ids
from tts_fleet.client.results import OutcomeCache, checks_failed, wait_for_outcomes
from tts_fleet.client.stack import ENV_EVENTS_QUEUE_URL
from tts_fleet.client.submit import load_submitted, read_receipt
from tts_fleet.exit_codes import ExitCode


@click.command()
@click.argument("source", default="-")
@click.option(
    "--timeout",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds before giving up (exit 4).",
)
@click.option(
    "--interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="Seconds between polls of the bucket.",
)
@click.option(
    "--events",
    "use_events",
    is_flag=True,
    help="Read the stack's completion events (notifications.enabled) instead of polling the "
    f"bucket [env {ENV_EVENTS_QUEUE_URL}]; polls when the stack has none.",
)
@split_chars_option
@json_flag()
@target_options(text_limit=True)
@click.pass_context
def wait(
    ctx: click.Context,
    target: Target,
    source: str,
    timeout: float,
    interval: float,
    use_events: bool,
    split_chars: int | None,
    as_json: bool,
) -> None:
    """Wait until every job of SOURCE is done or failed.

    SOURCE is a `submit --json` output file, or the same input the submit read. Exit 0: all
    done; 1: some failed (listed), or SOURCE names an id that is no job id (skipped with a
    warning); 4: the timeout came first; 2: bad input.
    """
    need(target, "bucket")
    require_source(source)
    not_a_terminal(source)
    submitted = load_submitted(source, target.max_text_chars, split_chars)
    if not submitted:
        raise click.UsageError(f"no job ids in {source}")
    # A receipt is a file anyone may have edited: an id that is no job id is not looked up.
    untrusted = untrusted_ids(submitted)
    look.warn_untrusted(untrusted)
    ids = sorted(set(submitted) - untrusted.keys())
    s3 = client_for("s3", target.aws)
    started = time.monotonic()
    if use_events and not target.events_queue_url:
        click.echo(
            "note: the stack has no events queue (notifications.enabled is off); polling the "
            f"bucket every {interval:g} s",
            err=True,
        )
    cache = OutcomeCache()
    with look.progress_bar(len(ids), "wait", not as_json) as advance:
        on_settled = settled_counter(advance)
        if use_events and target.events_queue_url:
            sqs = client_for("sqs", target.aws)
            done, failed = wait_for_completions(
                s3, sqs, target, ids, timeout=timeout, digests=submitted, on_settled=on_settled
            )
        else:
            done, failed = wait_for_outcomes(
                s3,
                target,
                ids,
                timeout=timeout,
                interval=interval,
                digests=submitted,
                on_settled=on_settled,
                cache=cache,
            )
    pending = [job_id for job_id in ids if job_id not in done and job_id not in failed]
    elapsed = time.monotonic() - started
    # Quality failures are among `failed`, their reason `quality: …`; a job kept although its
    # checks failed (QA_ON_FAIL=keep) is done, and said so when the polling read its manifest.
    kept = checks_failed(cache, sorted(done))
    batches = receipt_batches(target, source)
    code = finish_wait(ids, done, failed, pending, elapsed, as_json, len(untrusted), kept, batches)
    ctx.exit(code)


def settled_counter(advance: Callable[[int], None]) -> Callable[[int], None]:
    """The bar advances by steps; both waiters report how many ids are settled in all."""
    shown = [0]

    def report(settled: int) -> None:
        advance(settled - shown[0])
        shown[0] = settled

    return report


def receipt_batches(target: Target, source: str) -> list[dict[str, Any]] | None:
    """The batch a receipt names, while it is open (docs/cli.md); None for any other source,
    or when the batch cannot be read: a wait without a deadline reads no more than before."""
    path = Path(source)
    receipt = read_receipt(path) if source != STDIN and path.is_file() else None
    if receipt is None or not receipt.batch:
        return None
    shown = open_batches(target)
    wanted = receipt.batch.get("batch_id")
    return None if shown is None else [batch for batch in shown if batch["batch_id"] == wanted]


def finish_wait(
    ids: list[str],
    done: set[str],
    failed: dict[str, str],
    pending: list[str],
    elapsed: float,
    as_json: bool,
    untrusted: int = 0,
    kept: dict[str, str] | None = None,
    batches: list[dict[str, Any]] | None = None,
) -> ExitCode:
    timed_out = bool(pending)
    kept = kept or {}
    if as_json:
        look.emit_json(
            {
                "total": len(ids),
                "done": len(done),
                "failed": failed,
                "pending": pending,
                "timed_out": timed_out,
                "elapsed_s": round(elapsed, 3),
                "untrusted": untrusted,
                "checks_failed": kept,
                "batches": batches,
            }
        )
    else:
        skipped = f", {untrusted} untrusted skipped" if untrusted else ""
        click.echo(
            f"{len(done)} of {len(ids)} done, {len(failed)} failed, {len(pending)} pending{skipped}"
        )
        for job_id, reason in sorted(failed.items()):
            click.secho(f"failed: {look.shown_id(job_id)}: {look.shown(reason)}", fg="red")
        for job_id, reason in sorted(kept.items()):
            click.secho(f"stored with qa.passed false: {look.shown_id(job_id)}: "
                        f"{look.shown(reason)}", fg="yellow")  # fmt: skip
        if timed_out:
            shown = ", ".join(pending[: look.IDS_SHOWN]) + (
                " ..." if len(pending) > look.IDS_SHOWN else ""
            )
            click.echo(f"timed out after {elapsed:.0f} s; pending: {shown}")
        for batch in batches or []:
            click.echo(batch_line(batch))
    if timed_out:
        return ExitCode.TIMED_OUT
    return ExitCode.FAILED if failed or untrusted else ExitCode.OK
