"""A `Worker` run in a thread of the test process with a stand-in speech client, so a race
can be forced at the exact step it needs; the queue, bucket and S3/SQS calls are the emulator's."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

from tests.lib.procs import wait_for
from worker.jobs import Job
from worker.loop import Worker
from worker.metrics import Metrics
from worker.protection import Protection
from worker.settings import Settings
from worker.speech import Speech


class FakeSpeech:
    """Takes `delay` seconds (per job id when a dict), then runs `during` if given."""

    def __init__(self, delay: float | dict[str, float] = 0.2, during: Any = None) -> None:
        self.delay, self.during = delay, during

    def synthesize(self, job: Job) -> Speech:
        delay = self.delay if isinstance(self.delay, float) else self.delay[job.job_id]
        time.sleep(delay)
        if self.during is not None:
            self.during(job)
        return Speech(b"RIFFfake", 24_000, 1.0, 1)


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
    values.update(overrides)
    return Worker(Settings(**values), sqs, s3, speech, protection, metrics)


def run_until(worker: Worker, done: Any, timeout: float = 30) -> None:
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(done, timeout)
    finally:
        worker.request_stop()
        thread.join(60)
    assert not thread.is_alive()
