"""Producer and operator commands: submit, status, wait, results, dlq list|redrive.

The work is in tts_fleet/client/; this module parses options, draws progress on a terminal and
prints either text or, with --json, one JSON document on stdout (keys: docs/cli.md#--json-output).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound
from rich.console import Console
from rich.table import Table

from tts_fleet.cli import look
from tts_fleet.cli.errors import BadInput, Failed, MissingTool
from tts_fleet.cli.options import (
    json_flag,
    project_dir_option,
    split_chars_option,
    target_flags,
    use_aws_settings,
)
from tts_fleet.client.aws import NoRegion, Target, client_for
from tts_fleet.client.books import JoinReport, join_parts
from tts_fleet.client.dlq import clear_failure_records, peek_dead_letters, redrive
from tts_fleet.client.events import wait_for_completions
from tts_fleet.client.inputs import LoadedJobs, load_jobs, load_submitted
from tts_fleet.client.results import (
    OutcomeCache,
    ResultsReport,
    download_results,
    outcomes,
    result_objects,
)
from tts_fleet.client.stack import StackError, resolve_target
from tts_fleet.client.status import find_dlq_url, oldest_age_s, queue_counts, service_counts
from tts_fleet.client.submit import (
    existing_outputs,
    invoke_controller,
    preflight_queue,
    submit_jobs,
)
from tts_fleet.config.models import ConfigError
from tts_fleet.config.stack_file import StackFile, stack_file_path
from tts_fleet.exit_codes import ExitCode
from worker.jobs import DEFAULT_MAX_TEXT_CHARS

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = ExitCode.OK, ExitCode.FAILED, ExitCode.TIMED_OUT
PENDING_SHOWN = 20


def register(group: click.Group) -> None:
    for command in (submit, status, wait, results, dlq):
        group.add_command(command)


# ---------------------------------------------------------------------------- shared


def target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--stack / --outputs-file / --queue-url / --dlq-url / --bucket / --output-prefix,
    resolved to a Target, and --region / --profile for every AWS call the command makes."""

    @target_flags
    @functools.wraps(func)
    def wrapper(
        stack: str | None,
        outputs_file: str | None,
        queue_url: str | None,
        dlq_url: str | None,
        bucket: str | None,
        output_prefix: str | None,
        region: str | None,
        profile: str | None,
        **kwargs: Any,
    ) -> Any:
        use_aws_settings(region, profile)
        try:
            target = resolve_target(
                stack, queue_url, dlq_url, bucket, prefix=output_prefix, outputs_file=outputs_file
            )
        except StackError as error:
            raise (MissingTool if error.missing_tool else BadInput)(str(error)) from None
        try:
            return func(target=target, **kwargs)
        except NoRegion as error:
            raise BadInput(str(error)) from None
        except ProfileNotFound as error:
            raise BadInput(f"{error}; list profiles with `aws configure list-profiles`") from None
        except (ClientError, BotoCoreError) as error:
            raise Failed(f"AWS: {error}") from None

    return wrapper


def need(target: Target, what: str) -> str:
    value = getattr(target, what)
    if not value:
        flag, env = {
            "queue_url": ("--queue-url", "TTS_FLEET_QUEUE_URL"),
            "bucket": ("--bucket", "TTS_FLEET_BUCKET"),
        }[what]
        raise click.UsageError(f"no {what.replace('_', ' ')}: pass {flag}, set {env}, or --stack S")
    return value


def dlq_url_of(target: Target) -> str:
    if target.dlq_url:
        return target.dlq_url
    if not target.queue_url:
        raise click.UsageError("no DLQ: pass --dlq-url, set TTS_FLEET_DLQ_URL, or --stack S")
    found = find_dlq_url(client_for("sqs"), target.queue_url)
    if not found:
        raise click.UsageError(
            "no DLQ: pass --dlq-url or set TTS_FLEET_DLQ_URL (the queue has no RedrivePolicy)"
        )
    return found


def require_source(source: str | None) -> None:
    """A missing input file is one clear line, not an 'invalid job' among others."""
    if source and source != "-" and not Path(source).exists():
        raise BadInput(f"no such file or directory: {source}")


def not_a_terminal(source: str | None) -> None:
    """Reading jobs from an interactive terminal would just hang: say what to give instead."""
    if source in (None, "-") and sys.stdin.isatty():
        raise click.UsageError("give a JSONL file or a directory of .txt files, or pipe jobs in")


def stack_text_limit(stack: str | None, project_dir: Path) -> int:
    """worker.maxTextChars of the stack's file, so submit rejects what its workers would
    dead-letter; the worker's default without a stack file (a target given by URL)."""
    path = stack_file_path(stack, project_dir) if stack else None
    if path is None or not path.exists():
        return DEFAULT_MAX_TEXT_CHARS
    try:
        return StackFile.load(path).config().worker.max_text_chars
    except ConfigError as error:
        raise BadInput(str(error)) from None


def emit_json(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, sort_keys=True))


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return json_flag("Print a JSON summary.")(func)


# ---------------------------------------------------------------------------- submit


@click.command()
@click.argument("source", default="-")
@click.option("--skip-invalid", is_flag=True, help="Send the valid jobs even if some are not.")
@click.option(
    "--threads", default=8, show_default=True, type=click.IntRange(1, 64), help="Sender threads."
)
@click.option(
    "--max-text-chars",
    type=click.IntRange(1),
    help="Longest text accepted [default: with --stack, worker.maxTextChars of its stack file "
    f"in --project-dir, if there is one; else {DEFAULT_MAX_TEXT_CHARS:,}].",
)
@project_dir_option()
@click.option("--voice", help="Voice for jobs that do not set one.")
@click.option("--language", help="Language for jobs that do not set one.")
@click.option("--format", "fmt", help="Audio format for jobs that do not set one.")
@split_chars_option
@json_option
@target_options
def submit(
    target: Target,
    source: str,
    skip_invalid: bool,
    threads: int,
    max_text_chars: int | None,
    project_dir: Path,
    voice: str | None,
    language: str | None,
    fmt: str | None,
    split_chars: int | None,
    as_json: bool,
) -> None:
    """Send jobs from SOURCE: a JSONL file, a directory of .txt files, or - for stdin.

    Everything is validated first; with any invalid line nothing is sent (exit 2) unless
    --skip-invalid. Ids are deterministic, so re-running a submit duplicates no work.
    """
    queue_url = need(target, "queue_url")
    require_source(source)
    not_a_terminal(source)
    defaults = {k: v for k, v in (("voice", voice), ("language", language), ("format", fmt)) if v}
    limit = max_text_chars or stack_text_limit(target.stack, project_dir)
    loaded = load_jobs(source, limit, defaults, split_chars)
    summary = submit_summary(queue_url, loaded)
    for line in loaded.invalid:
        click.secho(f"invalid: {line.describe()}", err=True, fg="red")
    if loaded.invalid and not skip_invalid:
        click.secho(
            f"Error: nothing sent: {len(loaded.invalid)} invalid job(s); fix them or pass "
            "--skip-invalid",
            err=True,
            fg="red",
        )
        finish_submit(summary, as_json, ExitCode.BAD_INPUT)
    sqs = client_for("sqs")
    preflight_queue(sqs, queue_url)
    note_existing(summary, target, loaded, threads)
    started = time.monotonic()
    with look.progress_bar(len(loaded.valid), "submit", not as_json) as advance:
        report = submit_jobs(sqs, queue_url, loaded.valid, threads=threads, progress=advance)
    sent = set(report.sent)
    if sent and target.controller_arn:
        warning = invoke_controller(client_for("lambda"), target.controller_arn)
        if warning:
            click.echo(f"warning: {warning}", err=True)
    summary.update(
        sent=len(sent),
        failed=report.failed,
        calls=report.calls,
        ids=[job_id for job_id in loaded.ids if job_id in sent],
        elapsed_s=round(time.monotonic() - started, 3),
    )
    finish_submit(summary, as_json, EXIT_FAILED if report.failed else EXIT_OK)


def submit_summary(queue_url: str, loaded: LoadedJobs) -> dict[str, Any]:
    """The --json summary before anything is sent (its keys are documented in docs/cli.md)."""
    return {
        "queue_url": queue_url,
        "total": len(loaded.valid),
        "invalid": [vars(line) for line in loaded.invalid],
        "duplicates": loaded.duplicates,
        "sent": 0,
        "failed": {},
        "calls": 0,
        "ids": [],
        "digests": loaded.digests,  # what `wait`/`results` check each manifest against
        "replaces": None,  # ids whose existing output is another request's (None: unknown)
        "already_done": None,  # ids whose output is this very request's
        "elapsed_s": 0.0,
    }


def note_existing(
    summary: dict[str, Any], target: Target, loaded: LoadedJobs, threads: int
) -> None:
    """How many jobs replace an existing output; nothing when the bucket cannot be read."""
    if not (target.bucket and loaded.valid):
        return
    existing = existing_outputs(client_for("s3"), target, loaded.valid, threads)
    if existing is not None:
        summary.update(replaces=existing.replaces, already_done=existing.done)


def finish_submit(summary: dict[str, Any], as_json: bool, code: int) -> None:
    if as_json:
        emit_json(summary)
    else:
        for job_id, reason in sorted(summary["failed"].items()):
            click.secho(f"failed: {job_id}: {reason}", err=True, fg="red")
        click.echo(
            f"sent {summary['sent']} of {summary['total']} job(s) in {summary['calls']} "
            f"SendMessageBatch call(s); {len(summary['failed'])} failed, "
            f"{len(summary['invalid'])} invalid, {summary['duplicates']} duplicate(s) dropped"
        )
        if summary["replaces"]:
            click.echo(f"{summary['replaces']} job(s) replace an existing output (edited)")
        if summary["already_done"]:
            click.echo(f"{summary['already_done']} job(s) already done: no synthesis")
    raise SystemExit(code)


# ---------------------------------------------------------------------------- status


@click.command()
@click.option("--cluster", help="ECS cluster (default: the stack's clusterName output).")
@click.option("--service", help="ECS service (default: the stack's serviceName output).")
@click.option("--watch", type=click.FloatRange(min=0.1), help="Refresh every SECONDS.")
@click.option("--count", type=click.IntRange(min=1), help="With --watch: stop after N refreshes.")
@json_option
@target_options
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
            emit_json(snapshot)
        else:
            console = Console()
            if watch is not None and console.is_terminal:
                console.clear()
            console.print(status_table(snapshot))
        refreshes += 1
        if watch is None or (count is not None and refreshes >= count):
            return
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return


def read_status(target: Target, cluster: str | None, service: str | None) -> dict[str, Any]:
    queue_url = need(target, "queue_url")
    sqs = client_for("sqs")
    counts = queue_counts(sqs, queue_url)
    dlq_url = target.dlq_url or optional(lambda: find_dlq_url(sqs, queue_url))
    ecs = None
    if cluster and service:
        ecs = service_counts(client_for("ecs"), cluster, service)
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "queue_url": queue_url,
        **counts,
        "outstanding": counts["visible"] + counts["in_flight"],
        "dlq_url": dlq_url,
        "dlq_depth": optional(lambda: queue_counts(sqs, dlq_url)["visible"]) if dlq_url else None,
        "oldest_age_s": oldest_age_s(client_for("cloudwatch"), queue_url),
        "ecs": ecs,
    }


def optional(read: Callable[[], Any]) -> Any:
    """A value status can live without (an operator may not be allowed to read it)."""
    try:
        return read()
    except (ClientError, BotoCoreError):
        return None


def status_table(snapshot: dict[str, Any]) -> Table:
    def show(value: Any) -> str:
        return "-" if value is None else str(value)

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


# ---------------------------------------------------------------------------- wait


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
    "bucket [env TTS_FLEET_EVENTS_QUEUE_URL]; polls when the stack has none.",
)
@split_chars_option
@json_option
@target_options
def wait(
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
    done; 1: some failed (listed); 4: the timeout came first; 2: bad input.
    """
    need(target, "bucket")
    require_source(source)
    not_a_terminal(source)
    submitted = load_submitted(source, split_chars=split_chars)
    ids = sorted(submitted)
    if not ids:
        raise click.UsageError(f"no job ids in {source}")
    s3 = client_for("s3")
    started = time.monotonic()
    if use_events and not target.events_queue_url:
        click.echo(
            "note: the stack has no events queue (notifications.enabled is off); polling the "
            f"bucket every {interval:g} s",
            err=True,
        )
    with look.progress_bar(len(ids), "wait", not as_json) as advance:
        on_settled = settled_counter(advance)
        if use_events and target.events_queue_url:
            sqs = client_for("sqs")
            done, failed = wait_for_completions(
                s3, sqs, target, ids, timeout=timeout, digests=submitted, on_settled=on_settled
            )
        else:
            done, failed = poll_bucket(s3, target, submitted, timeout, interval, on_settled)
    pending = [job_id for job_id in ids if job_id not in done and job_id not in failed]
    finish_wait(ids, done, failed, pending, time.monotonic() - started, as_json)


def poll_bucket(
    s3: Any,
    target: Target,
    submitted: dict[str, str | None],
    timeout: float,
    interval: float,
    on_settled: Callable[[int], None],
) -> tuple[set[str], dict[str, str]]:
    """Lists the bucket every `interval` until every id is settled or `timeout` has passed.
    Done means a manifest made from the request submitted (its digest), when known."""
    started = time.monotonic()
    cache = OutcomeCache()
    ids = sorted(submitted)
    while True:
        done, failed = outcomes(s3, target, ids, cache, digests=submitted)
        on_settled(len(done) + len(failed))
        if len(done) + len(failed) == len(ids) or time.monotonic() - started >= timeout:
            return done, failed
        time.sleep(interval)


def settled_counter(advance: Callable[[int], None]) -> Callable[[int], None]:
    """The bar advances by steps; both waiters report how many ids are settled in all."""
    shown = [0]

    def report(settled: int) -> None:
        advance(settled - shown[0])
        shown[0] = settled

    return report


def finish_wait(
    ids: list[str],
    done: set[str],
    failed: dict[str, str],
    pending: list[str],
    elapsed: float,
    as_json: bool,
) -> None:
    timed_out = bool(pending)
    if as_json:
        emit_json(
            {
                "total": len(ids),
                "done": len(done),
                "failed": failed,
                "pending": pending,
                "timed_out": timed_out,
                "elapsed_s": round(elapsed, 3),
            }
        )
    else:
        click.echo(f"{len(done)} of {len(ids)} done, {len(failed)} failed, {len(pending)} pending")
        for job_id, reason in sorted(failed.items()):
            click.secho(f"failed: {job_id}: {reason}", fg="red")
        if timed_out:
            shown = ", ".join(pending[:PENDING_SHOWN]) + (
                " ..." if len(pending) > PENDING_SHOWN else ""
            )
            click.echo(f"timed out after {elapsed:.0f} s; pending: {shown}")
    raise SystemExit(EXIT_TIMEOUT if timed_out else EXIT_FAILED if failed else EXIT_OK)


# ---------------------------------------------------------------------------- results


@click.command()
@click.argument("source", required=False)
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to download into.",
)
@click.option("--id", "job_ids", multiple=True, help="A job id (repeatable).")
@click.option("--prefix", "id_prefix", default="", help="Only ids starting with this.")
@click.option(
    "--threads", default=8, show_default=True, type=click.IntRange(1, 64), help="Download threads."
)
@click.option(
    "--join",
    is_flag=True,
    help="Join the parts of split texts (<id>.p001…) into one <id>.<format> each, "
    "with <id>.json listing the parts.",
)
@split_chars_option
@json_option
@target_options
def results(
    target: Target,
    source: str | None,
    out: Path,
    job_ids: tuple[str, ...],
    id_prefix: str,
    threads: int,
    join: bool,
    split_chars: int | None,
    as_json: bool,
) -> None:
    """Download the audio and manifest of done jobs into OUT.

    Which jobs: those of SOURCE (a `submit --json` output or the submit's input), the --id
    given, or every done job whose id starts with --prefix (default: all). A file already
    present with the same ETag is not downloaded again.
    """
    need(target, "bucket")
    require_source(source)
    submitted = load_submitted(source, split_chars=split_chars) if source else {}
    ids = list(job_ids) + list(submitted)
    s3 = client_for("s3")
    objects, missing = result_objects(s3, target, ids or None, id_prefix, submitted)
    with look.progress_bar(len(objects), "download", not as_json) as advance:
        report = download_results(s3, target, objects, out, threads=threads, progress=advance)
    joined = join_parts(out, ids or None) if join else None
    finish_results(report, missing, out, as_json, joined)


def finish_results(
    report: ResultsReport,
    missing: list[str],
    out: Path,
    as_json: bool,
    joined: JoinReport | None = None,
) -> None:
    if as_json:
        data: dict[str, Any] = {
            "dir": str(out), "downloaded": len(report.downloaded), "skipped": len(report.skipped),
            "failed": report.failed, "missing": missing, "bytes": report.bytes,
        }  # fmt: skip
        if joined is not None:
            data["joined"] = joined.joined
            data["incomplete"] = {base: parts for base, parts in joined.incomplete.items()}
            data["join_failed"] = joined.failed
        emit_json(data)
    else:
        for key, reason in sorted(report.failed.items()):
            click.secho(f"failed: {key}: {reason}", err=True, fg="red")
        if missing:
            click.echo(
                f"not done (pending or failed): {', '.join(missing[:PENDING_SHOWN])}", err=True
            )
        click.echo(
            f"{len(report.downloaded)} file(s) downloaded ({report.bytes} bytes), "
            f"{len(report.skipped)} already present, into {out}"
        )
        if joined is not None:
            _print_joined(joined, out)
    incomplete = bool(joined and (joined.incomplete or joined.failed))
    raise SystemExit(EXIT_FAILED if report.failed or missing or incomplete else EXIT_OK)


def _print_joined(joined: JoinReport, out: Path) -> None:
    for base in joined.joined:
        click.echo(f"joined: {out / base}.*")
    for base, parts in sorted(joined.incomplete.items()):
        shown = ", ".join(f"p{n:03d}" for n in parts[:PENDING_SHOWN])
        click.secho(f"not joined: {base}: parts not done yet: {shown}", err=True, fg="red")
    for base, reason in sorted(joined.failed.items()):
        click.secho(f"not joined: {base}: {reason}", err=True, fg="red")


# ---------------------------------------------------------------------------- dlq


@click.group()
def dlq() -> None:
    """Inspect and redrive the dead-letter queue."""


@dlq.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@json_option
@target_options
def dlq_list(target: Target, limit: int, as_json: bool) -> None:
    """Show DLQ messages with their error and receive count, without consuming them.

    Reading a message counts as a receive, so each listing adds one to its receive count.
    """
    dlq_url = dlq_url_of(target)
    letters = peek_dead_letters(client_for("sqs"), dlq_url, limit)
    if as_json:
        emit_json(
            {"dlq_url": dlq_url, "count": len(letters), "messages": [vars(m) for m in letters]}
        )
        return
    table = look.table(f"{len(letters)} dead letter(s)")
    for column in ("job id", "receives", "error", "message id"):
        table.add_column(column)
    for letter in letters:
        table.add_row(
            letter.job_id or "-", str(letter.receive_count), letter.error or "-", letter.message_id
        )
    Console().print(table)


def failure_clearer(target: Target) -> Callable[[list[str]], None] | None:
    """Redriven jobs are pending again: drop their old failure records (needs the bucket)."""
    if not target.bucket:
        return None
    s3 = client_for("s3")
    return lambda job_ids: clear_failure_records(s3, target, job_ids)


@dlq.command("redrive")
@click.option("--filter", "error_filter", help="Only messages whose error contains this text.")
@json_option
@target_options
def dlq_redrive(target: Target, error_filter: str | None, as_json: bool) -> None:
    """Move DLQ messages back to the jobs queue (StartMessageMoveTask, or receive → send →
    delete where it is unavailable or --filter is given; never deletes before the send)."""
    queue_url = need(target, "queue_url")
    dlq_url = dlq_url_of(target)
    sqs = client_for("sqs")
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
        emit_json({"dlq_url": dlq_url, "queue_url": queue_url, **vars(report)})
    else:
        click.echo(
            f"moved {report.moved} message(s) by {report.method}; {report.skipped} skipped by "
            f"the filter, {len(report.failed)} failed, {report.duplicated} left in both queues"
        )
        for message_id, reason in report.failed.items():
            click.secho(f"failed: {message_id}: {reason}", err=True, fg="red")
    raise SystemExit(EXIT_FAILED if report.failed else EXIT_OK)
