"""`tts-fleet weights upload`: a model snapshot and its weights.json into a stack's bucket
(tts_fleet/client/weights.py), for `worker.weights: s3`."""

from __future__ import annotations

from pathlib import Path

import click
from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

from tts_fleet.cli import look
from tts_fleet.cli.errors import BadInput, Failed, MissingTool, bad_config
from tts_fleet.cli.options import aws_flags, json_flag, project_dir_option, stack_option
from tts_fleet.cli.target import need
from tts_fleet.client.aws import AwsSettings, NoRegion, client_for
from tts_fleet.client.stack import ENV_BUCKET, StackError, resolve_target
from tts_fleet.client.weights import (
    DEFAULT_CONNECTIONS,
    WeightsError,
    hub_snapshot,
    snapshot_files,
    upload_snapshot,
)
from tts_fleet.config.models import ConfigError, WorkerConfig
from tts_fleet.config.stack_file import stack_config, stack_file_path


@click.group()
def weights() -> None:
    """Upload a model snapshot and its weights.json to the stack's bucket (worker.weights: s3).

    The task then fetches it before vLLM starts (`python -m worker.weights fetch`).
    """


def model_and_revision(
    stack: str | None, project_dir: Path, model: str | None, revision: str | None
) -> WorkerConfig:
    """worker.model and worker.modelRevision: the flags over the stack file (when there is
    one here), over the defaults; checked by the same rules as `pulumi up`."""
    has_file = stack is not None and stack_file_path(stack, project_dir).is_file()
    overrides = {"worker": {"model": model, "modelRevision": revision}}
    try:
        return stack_config(stack if has_file else None, project_dir, overrides).worker
    except ConfigError as error:
        raise bad_config(error.problems) from None


@weights.command("upload")
@stack_option(
    "Upload into this deployed stack's bucket (its bucketName output; needs the Pulumi CLI, "
    "or --outputs-file or --bucket), for its Pulumi.<STACK>.yaml's worker.model and "
    "worker.modelRevision."
)
@click.option(
    "--outputs-file",
    type=click.Path(dir_okay=False),
    help="A saved `pulumi stack output --json` to read bucketName from instead.",
)
@click.option("--bucket", help=f"The stack's output bucket [env {ENV_BUCKET}].")
@click.option("--model", help="Hugging Face model id [default: the stack's worker.model].")
@click.option(
    "--revision",
    help="The model's commit, 40 hex digits [default: the stack's worker.modelRevision].",
)
@click.option(
    "--from",
    "source",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Upload this local snapshot directory instead of downloading from the Hub.",
)
@click.option(
    "--connections",
    default=DEFAULT_CONNECTIONS,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Files uploaded at once (a large file also sends 4 parts at once).",
)
@project_dir_option()
@json_flag()
@aws_flags()[0]
@aws_flags()[1]
def upload(
    stack: str | None,
    outputs_file: str | None,
    bucket: str | None,
    model: str | None,
    revision: str | None,
    source: Path | None,
    connections: int,
    project_dir: Path,
    as_json: bool,
    region: str | None,
    profile: str | None,
) -> None:
    """Write a snapshot and its weights.json under weights/<model>/<revision>/ of the bucket.

    Files already there with the same size and sha256 are skipped, so a rerun resumes;
    weights.json goes last. Then deploy with `--set worker.weights=s3`.
    """
    worker = model_and_revision(stack, project_dir, model, revision)
    aws = AwsSettings(region, profile)
    try:
        target = resolve_target(stack, None, None, bucket, outputs_file=outputs_file, aws=aws)
    except StackError as error:
        raise (MissingTool if error.missing_tool else BadInput)(str(error)) from None
    bucket_name = need(target, "bucket")
    try:
        root = source or hub_snapshot(worker.model, worker.model_revision)
        files = snapshot_files(root, connections)
        with look.progress_bar(len(files), "upload", enabled=not as_json) as advance:
            report = upload_snapshot(
                client_for("s3", aws),
                bucket_name,
                worker.model,
                worker.model_revision,
                files,
                connections=connections,
                progress=lambda _size: advance(1),
            )
    except WeightsError as error:
        raise Failed(str(error)) from None
    except NoRegion as error:
        raise BadInput(str(error)) from None
    except ProfileNotFound as error:
        raise BadInput(f"{error}; list profiles with `aws configure list-profiles`") from None
    except (ClientError, BotoCoreError) as error:
        raise Failed(f"AWS: {error}") from None
    if as_json:
        look.emit_json({**vars(report), "uri": report.uri})
        return
    click.echo(
        f"uploaded {report.uri}: {report.files} files, {report.bytes / 1e9:.2f} GB "
        f"({report.uploaded_files} sent, {len(report.skipped)} already there); "
        "deploy with --set worker.weights=s3"
    )
