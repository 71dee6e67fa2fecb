"""`tts-fleet results [SOURCE] --out DIR`: download the audio and manifest of done jobs, and
with --join put split texts back together (tts_fleet/client/results.py, books.py); with
--subtitles write each job's SRT or VTT; with --book BOOK make the audiobook of a submitted EPUB
(tts_fleet/client/audiobook.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tts_fleet.cli import look
from tts_fleet.cli.options import json_flag, split_chars_option, threads_option
from tts_fleet.cli.sources import require_source
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.audiobook_options import (
    DEFAULT_CHAPTER_PAUSE_S,
    DEFAULT_LOUDNESS_LUFS,
    DEFAULT_PARAGRAPH_PAUSE_S,
    BookOptions,
)
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
from tts_fleet.client.subtitles import SUBTITLE_FORMATS, SubtitleFormat, job_subtitles
from tts_fleet.exit_codes import ExitCode

if TYPE_CHECKING:
    from tts_fleet.client.audiobook import BookReport


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
@click.option(
    "--book",
    default=None,
    metavar="BOOK",
    help="Make the audiobook of a submitted EPUB: OUT/<book>-c001.m4a, … and OUT/<book>.m4b "
    "with chapters, title, author and cover (needs the audiobook extra).",
)
@click.option(
    "--loudness",
    type=float,
    default=DEFAULT_LOUDNESS_LUFS,
    show_default=True,
    help="--book: the whole book's integrated loudness, LUFS (true peak at most -1.5 dBTP).",
)
@click.option(
    "--paragraph-pause",
    type=float,
    default=DEFAULT_PARAGRAPH_PAUSE_S,
    show_default=True,
    help="--book: seconds of silence added at each paragraph boundary.",
)
@click.option(
    "--chapter-pause",
    type=float,
    default=DEFAULT_CHAPTER_PAUSE_S,
    show_default=True,
    help="--book: seconds of silence added between chapters.",
)
@click.option(
    "--subtitles",
    type=click.Choice(SUBTITLE_FORMATS),
    default=None,
    help="Also write subtitles, one cue per sentence: <id>.srt|vtt per job, and with --book "
    "<book>.srt|vtt aligned to the M4B.",
)
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
    book: str | None,
    loudness: float,
    paragraph_pause: float,
    chapter_pause: float,
    subtitles: SubtitleFormat | None,
    as_json: bool,
) -> None:
    """Download the audio and manifest of done jobs into OUT.

    Which jobs: those of SOURCE (a `submit --json` output or the submit's input), the --id
    given, or every done job whose id starts with --prefix (default: all). A file already
    present with the same ETag is not downloaded again. A key, id or manifest that is not a
    job's own is skipped with a warning, and nothing is written outside OUT.
    """
    need(target, "bucket")
    if book is not None:
        if source or job_ids or id_prefix or join:
            raise click.UsageError("--book takes no SOURCE, --id, --prefix or --join")
        options = BookOptions(loudness, paragraph_pause, chapter_pause, subtitles, threads)
        problems = options.problems()
        if problems:
            raise click.UsageError("; ".join(problems))
        ctx.exit(audiobook(target, book, out, options, as_json))
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
    if subtitles is not None:
        done = [str(o["Local"])[: -len(".json")] for o in objects if o["Local"].endswith(".json")]
        job_subtitles(out, done, subtitles)
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


def audiobook(
    target: Target, book: str, out: Path, options: BookOptions, as_json: bool
) -> ExitCode:
    """`results --book`: exit 0 with the M4B written, 1 when jobs are not done or the book
    cannot be made (one line each)."""
    # numpy, soundfile and the encoder are needed here only: imported when a book is made.
    from tts_fleet.client.audiobook import BookError, ChaptersNotDone, make_audiobook

    s3 = client_for("s3", target.aws)
    try:
        report = make_audiobook(s3, target, book, out, options)
    except ChaptersNotDone as error:
        if as_json:
            look.emit_json({"book": book, "written": False, "missing": error.missing})
        click.secho(f"book not made: {look.shown(str(error))}", err=True, fg="red")
        return ExitCode.FAILED
    except BookError as error:
        if as_json:
            look.emit_json({"book": book, "written": False, "error": str(error)})
        click.secho(f"book not made: {look.shown(str(error))}", err=True, fg="red")
        return ExitCode.FAILED
    if as_json:
        look.emit_json(_book_json(report))
    else:
        for chapter in report.chapters:
            click.echo(f"chapter {chapter.number} at {chapter.start_s:.3f}s: "
                       f"{look.shown(chapter.title)} -> {chapter.path}")  # fmt: skip
        click.echo(
            f"{report.m4b}: {len(report.chapters)} chapter(s), {report.duration_s:.1f}s, "
            f"{report.lufs:.1f} LUFS (gain {report.gain_db:+.1f} dB), true peak "
            f"{report.true_peak_dbtp:.1f} dBTP"
        )
        if report.subtitles is not None:
            click.echo(f"subtitles: {report.subtitles}")
        if report.cover_skipped is not None:
            click.secho(f"warning: no cover: {look.shown(report.cover_skipped)}", err=True,
                        fg="yellow")  # fmt: skip
    return ExitCode.OK


def _book_json(report: BookReport) -> dict[str, Any]:
    return {
        "book": report.book, "written": True, "m4b": str(report.m4b),
        "duration_s": report.duration_s, "measured_lufs": report.measured_lufs,
        "gain_db": report.gain_db, "lufs": report.lufs,
        "true_peak_dbtp": report.true_peak_dbtp, "limited": report.limited,
        "subtitles": str(report.subtitles) if report.subtitles else None,
        "cover_skipped": report.cover_skipped,
        "chapters": [
            {"number": c.number, "title": c.title, "start_s": c.start_s, "end_s": c.end_s,
             "file": str(c.path)}
            for c in report.chapters
        ],
    }  # fmt: skip
