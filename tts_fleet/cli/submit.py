"""`tts-fleet submit SOURCE`: validate every job, then send them with SendMessageBatch.

The work is in tts_fleet/client/; this module parses options, draws progress on a terminal and
prints the receipt as text or, with --json, as one JSON object (docs/cli.md#--json-output).
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.cli import look
from tts_fleet.cli.errors import Failed
from tts_fleet.cli.options import json_flag, split_chars_option, threads_option
from tts_fleet.cli.sources import lexicon_option, not_a_terminal, read_lexicon, require_source
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.batches import (
    BadDeadline,
    batch_json,
    new_batch,
    resolve_deadline,
    write_batch,
)
from tts_fleet.client.inputs import LoadedJobs, load_jobs
from tts_fleet.client.submit import (
    SubmitReceipt,
    existing_outputs,
    invoke_controller,
    preflight_queue,
    store_book,
    submit_jobs,
)
from tts_fleet.client.voices import voice_names
from tts_fleet.exit_codes import ExitCode
from worker.jobs import CUSTOM_VOICE_SPEAKERS


@click.command()
@click.argument("source", default="-")
@click.option("--skip-invalid", is_flag=True, help="Send the valid jobs even if some are not.")
@threads_option("Sender threads.")
@click.option("--voice", help="Voice for jobs that do not set one.")
@click.option("--language", help="Language for jobs that do not set one.")
@click.option("--format", "fmt", help="Audio format for jobs that do not set one.")
@split_chars_option
@lexicon_option
@click.option(
    "--deadline",
    metavar="TIME",
    help="Finish this batch by TIME, UTC (2026-12-02T06:00Z); the controller plans for it.",
)
@click.option("--within", metavar="DURATION", help="Finish this batch within DURATION (6h, 90m).")
@json_flag()
@target_options(text_limit=True)
@click.pass_context
def submit(
    ctx: click.Context,
    target: Target,
    source: str,
    skip_invalid: bool,
    threads: int,
    voice: str | None,
    language: str | None,
    fmt: str | None,
    split_chars: int | None,
    lexicon: Path | None,
    deadline: str | None,
    within: str | None,
    as_json: bool,
) -> None:
    """Send jobs from SOURCE: a JSONL file, a directory of .txt files, or - for stdin.

    An EPUB is a book: one job per table-of-contents chapter, and its record in the bucket
    (books/<book>.json) for `results --book`.

    Everything is validated first; with any invalid line nothing is sent (exit 2) unless
    --skip-invalid. Ids are deterministic, so re-running a submit duplicates no work.
    With --deadline or --within (or the stack's scaling.deadlineMinutes) the jobs are one
    batch, recorded in the bucket before they are sent; `status` shows its progress.
    """
    queue_url = need(target, "queue_url")
    now = time.time()  # the batch's submission: --within and the stack default count from it
    due = deadline_of(target, deadline, within, now)
    require_source(source)
    not_a_terminal(source)
    defaults = {k: v for k, v in (("voice", voice), ("language", language), ("format", fmt)) if v}
    voices, unlisted = known_voices(target)
    loaded = load_jobs(
        source,
        target.max_text_chars,
        defaults,
        split_chars,
        lexicon=read_lexicon(lexicon),
        voices=voices,
    )
    if unlisted and any("unknown voice" in line.reason for line in loaded.invalid):
        click.echo(f"warning: {unlisted}", err=True)
    receipt = SubmitReceipt.before_sending(queue_url, loaded)
    for line in loaded.invalid:
        click.secho(f"invalid: {line.describe()}", err=True, fg="red")
    if loaded.invalid and not skip_invalid:
        click.secho(
            f"Error: nothing sent: {len(loaded.invalid)} invalid job(s); fix them or pass "
            "--skip-invalid",
            err=True,
            fg="red",
        )
        ctx.exit(finish_submit(receipt, as_json, ExitCode.BAD_INPUT))
    sqs = client_for("sqs", target.aws)
    preflight_queue(sqs, queue_url)
    note_existing(receipt, target, loaded, threads)
    write_book(target, loaded, as_json)
    batch_id = record_batch(receipt, target, loaded, now, due)
    started = time.monotonic()
    with look.progress_bar(len(loaded.valid), "submit", not as_json) as advance:
        report = submit_jobs(
            sqs, queue_url, loaded.valid, threads=threads, progress=advance, batch_id=batch_id
        )
    sent = set(report.sent)
    if sent and target.controller_arn:
        warning = invoke_controller(client_for("lambda", target.aws), target.controller_arn)
        if warning:
            click.echo(f"warning: {warning}", err=True)
    receipt.sent = len(sent)
    receipt.failed = report.failed
    receipt.calls = report.calls
    receipt.ids = [job_id for job_id in loaded.ids if job_id in sent]
    receipt.elapsed_s = round(time.monotonic() - started, 3)
    ctx.exit(finish_submit(receipt, as_json, ExitCode.FAILED if report.failed else ExitCode.OK))


def deadline_of(
    target: Target, deadline: str | None, within: str | None, now: float
) -> float | None:
    """The batch's deadline (epoch seconds) from the flags or the stack's default; a bad or
    past one is a usage error of one line, before anything is read or sent."""
    try:
        return resolve_deadline(deadline, within, target.deadline_minutes, now)
    except BadDeadline as error:
        raise click.UsageError(str(error)) from None


def record_batch(
    receipt: SubmitReceipt, target: Target, loaded: LoadedJobs, now: float, due: float | None
) -> str | None:
    """Writes the batch record before any message is sent, so the controller never sees a
    job of a batch it does not know; the batch id, or None without a deadline."""
    if due is None or not loaded.valid:
        return None
    bucket = need(target, "bucket")
    digests = {job.job_id: job.digest() for job in loaded.valid}
    try:
        record = new_batch(now, due, digests)
    except BadDeadline as error:
        raise click.UsageError(str(error)) from None
    write_batch(client_for("s3", target.aws), bucket, record)
    receipt.batch = {"batch_id": record.batch_id, "deadline": batch_json(record, None)["deadline"]}
    return record.batch_id


def known_voices(target: Target) -> tuple[tuple[str, ...], str | None]:
    """The voices a job may name: the CustomVoice speakers and the stack's voice library,
    listed once per submit; just the speakers when no bucket is known or it cannot be listed
    (then also why, for the jobs refused for their voice)."""
    if not target.bucket:
        return CUSTOM_VOICE_SPEAKERS, None
    try:
        library = voice_names(client_for("s3", target.aws), target.bucket, target.prefix)
    except (ClientError, BotoCoreError) as error:
        return CUSTOM_VOICE_SPEAKERS, f"the voice library cannot be listed: {error}"
    return (*CUSTOM_VOICE_SPEAKERS, *library), None


def note_existing(receipt: SubmitReceipt, target: Target, loaded: LoadedJobs, threads: int) -> None:
    """How many jobs replace an existing output; nothing when the bucket cannot be read."""
    if not (target.bucket and loaded.valid):
        return
    existing = existing_outputs(client_for("s3", target.aws), target, loaded.valid, threads)
    if existing is not None:
        receipt.replaces, receipt.already_done = existing.replaces, existing.done


def write_book(target: Target, loaded: LoadedJobs, as_json: bool) -> None:
    """An EPUB's book record (and cover) into the bucket before its jobs are sent: without it
    `results --book` cannot put the chapters together, so a refusal sends nothing (exit 1)."""
    if loaded.book is None:
        return
    need(target, "bucket")
    try:
        key = store_book(client_for("s3", target.aws), target, loaded.book)
    except (ClientError, BotoCoreError) as error:
        raise Failed(
            f"nothing sent: could not write the book record under books/ of {target.bucket} "
            f"({error}); the producer needs s3:PutObject on books/* (the stack's producer "
            "policy grants it)"
        ) from None
    if not as_json:
        chapters = len(loaded.book.chapters)
        click.echo(
            f"book {loaded.book.book}: {chapters} chapter(s), record s3://{target.bucket}/{key}"
        )


def finish_submit(receipt: SubmitReceipt, as_json: bool, code: ExitCode) -> ExitCode:
    if as_json:
        look.emit_json(receipt.to_json())
        return code
    for job_id, reason in sorted(receipt.failed.items()):
        click.secho(f"failed: {job_id}: {reason}", err=True, fg="red")
    click.echo(
        f"sent {receipt.sent} of {receipt.total} job(s) in {receipt.calls} "
        f"SendMessageBatch call(s); {len(receipt.failed)} failed, "
        f"{len(receipt.invalid)} invalid, {receipt.duplicates} duplicate(s) dropped"
    )
    if receipt.replaces:
        click.echo(f"{receipt.replaces} job(s) replace an existing output (edited)")
    if receipt.already_done:
        click.echo(f"{receipt.already_done} job(s) already done: no synthesis")
    if receipt.batch:
        click.echo(f"batch {receipt.batch['batch_id']}, deadline {receipt.batch['deadline']}")
    return code
