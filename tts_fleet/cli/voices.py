"""`tts-fleet voices add|list|rm|preview`: the voice library in the stack's bucket
(tts_fleet/client/voices.py), which the jobs of a Base or VoiceDesign stack name in `voice`."""

from __future__ import annotations

from pathlib import Path

import click

from tts_fleet.cli import look
from tts_fleet.cli.errors import BadInput, Failed
from tts_fleet.cli.options import json_flag
from tts_fleet.cli.target import need, target_options
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.results import read_manifest, wait_for_outcomes
from tts_fleet.client.submit import invoke_controller, submit_jobs
from tts_fleet.client.voices import (
    PREVIEW_TEXT,
    VoiceError,
    add_voice,
    caller_arn,
    list_voices,
    preview_job,
    read_reference,
    read_voice,
    remove_voice,
)
from tts_fleet.exit_codes import ExitCode
from worker.jobs import VoiceRecord


@click.group()
def voices() -> None:
    """Manage the stack's voice library: cloned and designed voices that jobs name in `voice`.

    A stack with worker.taskType Base clones from a voice's reference clip and transcript;
    VoiceDesign speaks a voice's description. Voices live in the bucket under voices/.
    """


@voices.command("add")
@click.argument("name")
@click.option(
    "--audio",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Reference clip, a WAV of 1-30 s (a clone voice, for taskType Base).",
)
@click.option("--text", "ref_text", default="", help="What the reference clip says, word for word.")
@click.option(
    "--description",
    default="",
    help="What the voice sounds like (a designed voice, for taskType VoiceDesign).",
)
@click.option("--consent", default="", help="The speaker's consent, recorded with the voice.")
@json_flag()
@target_options()
def add(
    target: Target,
    name: str,
    audio: Path | None,
    ref_text: str,
    description: str,
    consent: str,
    as_json: bool,
) -> None:
    """Add a voice: a reference clip and its transcript, or a description."""
    bucket = need(target, "bucket")
    try:
        reference = read_reference(audio) if audio is not None else None
        record = add_voice(
            client_for("s3", target.aws),
            bucket,
            target.prefix,
            name,
            added_by=caller_arn(client_for("sts", target.aws)),
            reference=reference,
            ref_text=ref_text,
            description=description,
            consent=consent,
        )
    except VoiceError as error:
        raise BadInput(str(error)) from None
    if as_json:
        look.emit_json(record.model_dump())
        return
    click.echo(f"added {record.kind} voice {record.name} ({_what(record)})")


@voices.command("list")
@json_flag()
@target_options()
def list_cmd(target: Target, as_json: bool) -> None:
    """The library's voices: name, kind, what they are and who added them."""
    records, problems = list_voices(
        client_for("s3", target.aws), need(target, "bucket"), target.prefix
    )
    for problem in problems:
        click.secho(f"unreadable: {problem}", err=True, fg="yellow")
    if as_json:
        look.emit_json({"voices": [r.model_dump() for r in records], "unreadable": problems})
        return
    if not records:
        click.echo("no voices in the library")
    for r in records:
        click.echo(f"{r.name}\t{r.kind}\t{_what(r)}\tadded by {r.added_by} at {r.added_at}")


@voices.command("rm")
@click.argument("name")
@target_options()
def rm(target: Target, name: str) -> None:
    """Remove a voice (its record, then its audio); jobs naming it fail from then on."""
    try:
        record = remove_voice(
            client_for("s3", target.aws), need(target, "bucket"), target.prefix, name
        )
    except VoiceError as error:
        raise BadInput(str(error)) from None
    click.echo(f"removed {record.kind} voice {record.name}")


@voices.command("preview")
@click.argument("name")
@click.argument("text", default=PREVIEW_TEXT)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the audio [default: NAME-preview.wav].",
)
@click.option(
    "--timeout", default=900.0, show_default=True, help="Seconds to wait for the preview."
)
@click.option("--interval", default=2.0, show_default=True, help="Seconds between looks.")
@json_flag()
@target_options()
@click.pass_context
def preview(
    ctx: click.Context,
    target: Target,
    name: str,
    text: str,
    out: Path | None,
    timeout: float,
    interval: float,
    as_json: bool,
) -> None:
    """Say TEXT (a short default) in voice NAME: one job, waited for, its audio written."""
    queue_url, bucket = need(target, "queue_url"), need(target, "bucket")
    s3 = client_for("s3", target.aws)
    try:
        read_voice(s3, bucket, target.prefix, name)  # there, and readable, before any job
        job = preview_job(name, text)
    except VoiceError as error:
        raise BadInput(str(error)) from None
    report = submit_jobs(client_for("sqs", target.aws), queue_url, [job], threads=1)
    if report.failed:
        raise Failed(f"preview not sent: {report.failed[job.job_id]}")
    if target.controller_arn:
        invoke_controller(client_for("lambda", target.aws), target.controller_arn)
    done, failed = wait_for_outcomes(
        s3, target, [job.job_id], timeout=timeout, interval=interval,
        digests={job.job_id: job.digest()},
    )  # fmt: skip
    if job.job_id in failed:
        raise Failed(f"preview of {name} failed: {failed[job.job_id]}")
    manifest = read_manifest(s3, target, job.job_id) if done else None
    if manifest is None:
        click.secho(f"preview of {name} not done within {timeout:g}s", err=True, fg="red")
        ctx.exit(ExitCode.TIMED_OUT)
        return
    path = out or Path(f"{name}-preview.{job.format}")
    path.write_bytes(s3.get_object(Bucket=bucket, Key=manifest.audio_key)["Body"].read())
    if as_json:
        look.emit_json({"voice": name, "job_id": job.job_id, "out": str(path),
                        "duration_s": manifest.duration_s})  # fmt: skip
        return
    click.echo(f"wrote {path} ({manifest.duration_s or 0:.1f} s of {name})")


def _what(record: VoiceRecord) -> str:
    if record.kind == "design":
        return record.description
    return f"{record.duration_s:g} s reference: {record.ref_text}"
