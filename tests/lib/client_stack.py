"""Running the real CLI in process against an emulator stack, and reading the queues back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
from click.testing import CliRunner, Result

from tts_fleet.cli.main import cli
from tts_fleet.local.emulator import visible_and_in_flight
from worker.jobs import Manifest, audio_key, manifest_key, validate_job

MAX_RECEIVE_COUNT = 3


@dataclass(frozen=True)
class Stack:
    queue_url: str
    dlq_url: str
    bucket: str
    env: dict[str, str]


def run(*args: str, input: str | None = None) -> Result:
    """The real command through click's runner (in process, so botocore hooks can count)."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def run_json(*args: str, input: str | None = None) -> tuple[int, dict[str, Any]]:
    result = run(*args, "--json", input=input)
    return result.exit_code, json.loads(result.stdout)


def depth(queue_url: str) -> int:
    return sum(visible_and_in_flight(boto3.client("sqs"), queue_url))


def drain_bodies(queue_url: str) -> list[dict[str, Any]]:
    """Receives (and deletes) every message; their parsed bodies."""
    sqs = boto3.client("sqs")
    bodies: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            return bodies
        bodies += [json.loads(m["Body"]) for m in messages]
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


def queued_bodies(queue_url: str) -> list[dict[str, Any]]:
    """Every message body a queue holds (visible, in flight or delayed), read from the
    in-process emulator's state: exact, and without receiving 1,000 messages over HTTP."""
    from moto.sqs.models import sqs_backends

    account, name = queue_url.rstrip("/").split("/")[-2:]
    queue = sqs_backends[account]["us-east-1"].queues[name]
    return [json.loads(message.body) for message in queue._messages]


def finish(
    stack: Stack, job_id: str, audio: bytes = b"RIFF-audio", text: str = "t", key: str = ""
) -> None:
    """What a worker leaves for a done job {"id": job_id, "text": text}: audio first (at
    `key` if given, as for a re-made job), then the manifest naming it."""
    s3 = boto3.client("s3")
    job = validate_job({"id": job_id, "text": text}, max_text_chars=max(len(text), 1))
    key = key or audio_key(job_id, "wav")
    s3.put_object(Bucket=stack.bucket, Key=key, Body=audio)
    manifest = Manifest(
        id=job_id, request=job.request(), audio_key=key,
        duration_s=1.0, sample_rate=24_000, model="m", voice="Vivian", synth_s=0.5,
        queue_wait_s=0.1, attempts=1, pieces=1, worker="w", finished_at="2026-01-01T00:00:00Z",
        request_hash=job.request_hash("m"),
    )  # fmt: skip
    s3.put_object(Bucket=stack.bucket, Key=manifest_key(job_id), Body=manifest.to_json())
