"""A `Worker` run in a thread of the test process with a stand-in speech client, so a race
can be forced at the exact step it needs; the queue, bucket and S3/SQS calls are the emulator's."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

from tests.lib.procs import wait_for
from worker.jobs import Job, Manifest, audio_key, manifest_key
from worker.loop import Worker
from worker.metrics import Metrics
from worker.protection import Protection
from worker.settings import DEFAULT_MODEL, Settings
from worker.speech import Speech


def fake_audio(job: Job) -> bytes:
    """The stand-in's audio for a job: it names the text, so a test can tell which it is."""
    return b"RIFF" + job.text.encode()


class FakeSpeech:
    """Takes `delay` seconds (per job id when a dict), then runs `during` if given."""

    def __init__(self, delay: float | dict[str, float] = 0.2, during: Any = None) -> None:
        self.delay, self.during = delay, during
        self.calls: list[str] = []  # the texts synthesized, in order

    def synthesize(self, job: Job) -> Speech:
        self.calls.append(job.text)
        delay = self.delay if isinstance(self.delay, float) else self.delay[job.job_id]
        time.sleep(delay)
        if self.during is not None:
            self.during(job)
        return Speech(fake_audio(job), 24_000, 1.0, 1)


def manifest_of(job: Job, worker: str = "peer", **fields: Any) -> Manifest:
    """The manifest a worker serving DEFAULT_MODEL writes for `job` (fields override)."""
    values: dict[str, Any] = dict(
        id=job.job_id, request=job.request(), audio_key=audio_key(job.job_id, job.format),
        duration_s=1.0, sample_rate=24_000, model=DEFAULT_MODEL, voice=job.voice, synth_s=0.1,
        queue_wait_s=0.0, attempts=1, pieces=1, worker=worker,
        finished_at="2026-01-01T00:00:00.000+00:00",
        request_hash=job.request_hash(DEFAULT_MODEL),
    )  # fmt: skip
    values.update(fields)
    return Manifest(**values)


def put_outputs(s3: Any, bucket: str, job: Job, worker: str = "peer", **fields: Any) -> Manifest:
    """What a worker that finished `job` leaves behind: its audio, then its manifest."""
    manifest = manifest_of(job, worker, **fields)
    s3.put_object(Bucket=bucket, Key=manifest.audio_key, Body=fake_audio(job))
    s3.put_object(Bucket=bucket, Key=manifest_key(job.job_id), Body=manifest.to_json())
    return manifest


class BlockingSpeech:
    """Synthesizes the jobs in `block` only when `go` is set (or after 60 s); others at once."""

    def __init__(self, block: set[str]) -> None:
        self.block, self.go = block, threading.Event()

    def synthesize(self, job: Job) -> Speech:
        if job.job_id in self.block:
            self.go.wait(60)
        return Speech(b"RIFFfake", 24_000, 1.0, 1)


def make_worker(names: dict[str, str], sqs: Any, s3: Any, speech: Any, **overrides: Any) -> Worker:
    values: dict[str, Any] = dict(
        queue_url=names["queue_url"],
        dlq_url=names["dlq_url"],
        output_bucket=names["bucket"],
        wait_time_seconds=1,
        visibility_timeout=30,
        heartbeat_seconds=10,
        stop_timeout_seconds=5,
        retry_base_seconds=1,
        retry_max_seconds=2,
        worker_id="w",
    )
    metrics = overrides.pop("metrics", None) or Metrics(io.StringIO())
    protection = overrides.pop("protection", None) or Protection("")
    delete_sqs = overrides.pop("delete_sqs", None)
    values.update(overrides)
    return Worker(Settings(**values), sqs, s3, speech, protection, metrics, delete_sqs)


def run_until(worker: Worker, done: Any, timeout: float = 30) -> None:
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(done, timeout)
    finally:
        worker.request_stop()
        thread.join(60)
    assert not thread.is_alive()
