"""The embedded AWS of `tts-fleet local`: moto's server in-process, with the stack's queue,
dead-letter queue and bucket created in it (DESIGN §6: moto stands in for SQS and S3)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tts_fleet.config.models import StackConfig
from tts_fleet.scaling import bands

REGION = "us-east-1"
# moto accepts any credentials; these keep boto3 from looking for real ones.
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
QUEUE_NAME = "tts-fleet-local-jobs"
DLQ_NAME = "tts-fleet-local-dlq"
BUCKET = "tts-fleet-local-outputs"
SECONDS_PER_DAY = 86_400
# ListObjectsV2 returns at most 1000 keys per page.
LIST_PAGE_SIZE = 1000


@dataclass(frozen=True)
class QueueCounts:
    visible: int
    in_flight: int
    dead_letters: int

    @property
    def outstanding(self) -> int:
        """DESIGN §4: what the fleet is sized for."""
        return bands.outstanding(self.visible, self.in_flight)


class Emulator:
    """moto's ThreadedMotoServer on 127.0.0.1 and a free port, in this process."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer  # heavy import: only when running locally

        # Werkzeug logs every request at INFO; the live view is the log here.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def start(self) -> str:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self.endpoint

    def stop(self) -> None:
        if self.endpoint:
            self._server.stop()
            self.endpoint = ""


@dataclass(frozen=True)
class LocalAws:
    """The emulator's endpoint, the created resources and one client per service."""

    endpoint: str
    queue_url: str
    dlq_url: str
    bucket: str
    sqs: Any
    s3: Any

    def env(self) -> dict[str, str]:
        """What a process (a worker, `tts-fleet submit`) needs to reach the emulator."""
        return emulator_env(self.endpoint)


def emulator_env(endpoint: str) -> dict[str, str]:
    """The AWS variables that point boto3 (in this process or a child) at an emulator."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        **DUMMY_CREDENTIALS,
    }


def clients(endpoint: str) -> tuple[Any, Any]:
    import boto3

    session = boto3.session.Session(region_name=REGION, **_lower(DUMMY_CREDENTIALS))
    return (
        session.client("sqs", endpoint_url=endpoint),
        session.client("s3", endpoint_url=endpoint),
    )


def _lower(credentials: dict[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in credentials.items()}


@dataclass(frozen=True)
class StackResources:
    """A jobs queue, the dead-letter queue its redrive policy names, and an output bucket."""

    queue_url: str
    dlq_url: str
    bucket: str


def create_stack(
    sqs: Any,
    s3: Any,
    name: str,
    *,
    max_receive_count: int,
    visibility_timeout: int | None = None,
    dlq_name: str | None = None,
    bucket: str | None = None,
    versioned: bool = False,
    retention_seconds: int | None = None,
    dlq_retention_seconds: int | None = None,
) -> StackResources:
    """The queue `name`, its DLQ (`<name>-dlq` unless given) after `max_receive_count`
    receives, and the bucket (`<name>-outputs` unless given): the stack's jobs path with the
    attributes the worker and the CLI depend on (the stand-in set-up for the local fleet,
    the tests and the benchmarks).

    An option left at None keeps SQS's own default (visibility 30 s, retention 4 days).
    `versioned` turns on bucket versioning, so that each PUT of a key is one version and a
    test can count overwrites."""
    dlq_attributes = _optional(MessageRetentionPeriod=dlq_retention_seconds)
    dlq_url = sqs.create_queue(QueueName=dlq_name or f"{name}-dlq", Attributes=dlq_attributes)[
        "QueueUrl"
    ]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
    attributes = {
        **_optional(VisibilityTimeout=visibility_timeout, MessageRetentionPeriod=retention_seconds),
        "RedrivePolicy": json.dumps(redrive),
    }
    queue_url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    bucket = bucket or f"{name}-outputs"
    s3.create_bucket(Bucket=bucket)
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return StackResources(queue_url, dlq_url, bucket)


def _optional(**attributes: int | None) -> dict[str, str]:
    return {key: str(value) for key, value in attributes.items() if value is not None}


def create_resources(endpoint: str, cfg: StackConfig, visibility_seconds: int) -> LocalAws:
    """The local fleet's stack: its queue settings from the stack file's `queue` section."""
    sqs, s3 = clients(endpoint)
    queue = cfg.queue
    created = create_stack(
        sqs,
        s3,
        QUEUE_NAME,
        dlq_name=DLQ_NAME,
        bucket=BUCKET,
        max_receive_count=queue.max_receive_count,
        visibility_timeout=visibility_seconds,
        retention_seconds=queue.retention_days * SECONDS_PER_DAY,
        dlq_retention_seconds=queue.dlq_retention_days * SECONDS_PER_DAY,
    )
    return LocalAws(endpoint, created.queue_url, created.dlq_url, created.bucket, sqs, s3)


def visible_and_in_flight(sqs: Any, queue_url: str) -> tuple[int, int]:
    """One queue's (visible, in flight) messages: what DESIGN §4 sums as outstanding."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    visible, in_flight = (int(attributes[name]) for name in names)
    return visible, in_flight


def fleet_counts(aws: LocalAws) -> QueueCounts:
    visible, in_flight = visible_and_in_flight(aws.sqs, aws.queue_url)
    return QueueCounts(visible, in_flight, sum(visible_and_in_flight(aws.sqs, aws.dlq_url)))


def list_keys(aws: LocalAws, prefix: str) -> list[str]:
    paginator = aws.s3.get_paginator("list_objects_v2")
    keys: list[str] = []
    pages = paginator.paginate(
        Bucket=aws.bucket, Prefix=prefix, PaginationConfig={"PageSize": LIST_PAGE_SIZE}
    )
    for page in pages:
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def download(aws: LocalAws, keys: list[str], prefix: str, directory: Path) -> list[Path]:
    """Copies each key into `directory`, dropping `prefix` from its name."""
    if keys:
        directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for key in keys:
        path = directory / key.removeprefix(prefix)
        aws.s3.download_file(aws.bucket, key, str(path))
        paths.append(path)
    return paths


def download_outputs(aws: LocalAws, manifest_keys: list[str], directory: Path) -> list[Path]:
    """Each job's manifest into `directory` as `<id>.json`, and the audio its `audio_key`
    names as `<id>.<format>`: a re-made job's audio lives under a hashed key, and its old
    audio, which the manifest no longer names, is not copied."""
    from worker.jobs import Manifest

    paths: list[Path] = []
    if manifest_keys:
        directory.mkdir(parents=True, exist_ok=True)
    for key in manifest_keys:
        body = aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read()
        manifest = Manifest.model_validate_json(body)
        audio = directory / f"{manifest.id}.{manifest.audio_key.rsplit('.', 1)[-1]}"
        aws.s3.download_file(aws.bucket, manifest.audio_key, str(audio))
        path = directory / f"{manifest.id}.json"
        path.write_bytes(body)  # after the audio: here too a manifest means done
        paths += [audio, path]
    return paths


# ReceiveMessage returns at most 10 messages; the longest visibility hides them for good.
RECEIVE_MAX_MESSAGES = 10
MAX_VISIBILITY_SECONDS = 43_200


def drain_bodies(aws: LocalAws) -> list[str]:
    """Every visible message's body, hidden so each is read once (the emulator is about to
    stop: this is how the jobs still queued survive it)."""
    bodies: list[str] = []
    while True:
        answer = aws.sqs.receive_message(
            QueueUrl=aws.queue_url,
            MaxNumberOfMessages=RECEIVE_MAX_MESSAGES,
            VisibilityTimeout=MAX_VISIBILITY_SECONDS,
            WaitTimeSeconds=0,
        )
        messages = answer.get("Messages", [])
        if not messages:
            return bodies
        bodies.extend(message["Body"] for message in messages)
