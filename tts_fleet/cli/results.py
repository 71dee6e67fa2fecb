"""`tts-fleet results [SOURCE] --out DIR`: download the audio and manifest of done jobs, and
with --join put split texts back together (tts_fleet/client/results.py, books.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from tts_fleet.cli import look
from tts_fleet.cli.options import json_flag, split_chars_option, threads_option
from tts_fleet.cli.sources import require_source
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.books import JoinReport, join_parts
from tts_fleet.client.results import (
    ResultsReport,
    checks_failed_in,
    download_results,
    quality_failures,
    result_objects,
)
from tts_fleet.client.submit import load_submitted
from tts_fleet.exit_codes import ExitCode


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
@threads_option("Download threads.")
@click.option(
    "--join",
    is_flag=True,
    help="Join the parts of split texts (<id>.p001…) into one <id>.<format> each, "
    "with <id>.json listing the parts.",
)
@split_chars_option
@json_flag()
@target_options(text_limit=True)
@click.pass_context
def results(
    ctx: click.Context,
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
    present with the same ETag is not downloaded again. A key, id or manifest that is not a
    job's own is skipped with a warning, and nothing is written outside OUT.
    """
    need(target, "bucket")
    require_source(source)
    submitted = load_submitted(source, target.max_text_chars, split_chars) if source else {}
    ids = list(job_ids) + list(submitted)
    s3 = client_for("s3", target.aws)
    untrusted: dict[str, str] = {}
    qa: dict[str, Any] = {}
    objects, missing = result_objects(s3, target, ids or None, id_prefix, submitted, untrusted, qa)
    with look.progress_bar(len(objects), "download", not as_json) as advance:
        report = download_results(s3, target, objects, out, threads=threads, progress=advance)
    report.untrusted.update(untrusted)
    look.warn_untrusted(report.untrusted)
    # Failed on quality: among the ids not done, or every failed job under --prefix.
    quality = quality_failures(s3, target, missing if ids else None, id_prefix)
    joined = join_parts(out, ids or None) if join else None
    ctx.exit(finish_results(report, missing, out, as_json, joined, Checks(qa, quality)))


@dataclass(frozen=True)
class Checks:
    """What the workers' output checks say of the jobs asked for (worker/qa/)."""

    qa: dict[str, Any] = field(default_factory=dict)  # done id -> its manifest's `qa`
    failed: dict[str, str] = field(default_factory=dict)  # id -> `quality: …` reason

    @property
    def kept(self) -> dict[str, str]:
        """Done jobs stored although a piece failed its checks (QA_ON_FAIL=keep)."""
        return checks_failed_in(self.qa)


def finish_results(
    report: ResultsReport,
    missing: list[str],
    out: Path,
    as_json: bool,
    joined: JoinReport | None = None,
    checks: Checks | None = None,
) -> ExitCode:
    checks = checks or Checks()
    if as_json:
        data: dict[str, Any] = {
            "dir": str(out), "downloaded": len(report.downloaded), "skipped": len(report.skipped),
            "failed": report.failed, "missing": missing, "bytes": report.bytes,
            "untrusted": len(report.untrusted), "qa": checks.qa,
            "quality_failed": checks.failed, "checks_failed": checks.kept,
        }  # fmt: skip
        if joined is not None:
            data["joined"] = joined.joined
            data["incomplete"] = {base: parts for base, parts in joined.incomplete.items()}
            data["join_failed"] = joined.failed
        look.emit_json(data)
    else:
        for key, reason in sorted(report.failed.items()):
            click.secho(f"failed: {look.shown(key)}: {look.shown(reason)}", err=True, fg="red")
        for job_id, reason in sorted(checks.failed.items()):
            click.secho(f"failed: {look.shown_id(job_id)}: {look.shown(reason)}", err=True,
                        fg="red")  # fmt: skip
        for job_id, reason in sorted(checks.kept.items()):
            click.secho(f"stored with qa.passed false: {look.shown_id(job_id)}: "
                        f"{look.shown(reason)}", err=True, fg="yellow")  # fmt: skip
        if missing:
            click.echo(
                f"not done (pending or failed): {', '.join(missing[: look.IDS_SHOWN])}", err=True
            )
        untrusted = f", {len(report.untrusted)} untrusted skipped" if report.untrusted else ""
        click.echo(
            f"{len(report.downloaded)} file(s) downloaded ({report.bytes} bytes), "
            f"{len(report.skipped)} already present{untrusted}, into {out}"
        )
        if joined is not None:
            _print_joined(joined, out)
    incomplete = bool(joined and (joined.incomplete or joined.failed))
    trouble = report.failed or report.untrusted or missing or incomplete
    return ExitCode.FAILED if trouble else ExitCode.OK


def _print_joined(joined: JoinReport, out: Path) -> None:
    for base in joined.joined:
        click.echo(f"joined: {out / base}.*")
    for base, parts in sorted(joined.incomplete.items()):
        shown = ", ".join(f"p{n:03d}" for n in parts[: look.IDS_SHOWN])
        click.secho(f"not joined: {base}: parts not done yet: {shown}", err=True, fg="red")
    for base, reason in sorted(joined.failed.items()):
        click.secho(f"not joined: {look.shown(base)}: {look.shown(reason)}", err=True, fg="red")
