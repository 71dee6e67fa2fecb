"""How well one worker keeps a GPU fed: jobs/s and feed efficiency against moto.

    .venv/bin/python benchmarks/worker_feed.py [--jobs 400] [--latency-ms 200] [--backlog N]

The `tone` speech server answers every request after a FIXED latency (batch exponent 0), so
an ideal worker with C requests in flight completes C / latency jobs per second. Feed
efficiency = measured jobs/s ÷ (C / latency): 1.0 means the "GPU" never waited on SQS or S3.
The same run also times a strictly serial loop (receive one, synthesize, put, delete) as the
baseline. moto runs in its own process; numbers depend on this machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import boto3
import httpx

from tts_fleet.local import procs
from tts_fleet.local.emulator import create_stack, emulator_env, visible_and_in_flight
from worker.jobs import Job, audio_key, manifest_key

REGION = "us-east-1"
LOGS = Path(tempfile.mkdtemp(prefix="tts-worker-feed-"))
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, interval: float, what: str) -> T:
    """Polls until predicate() is truthy and returns its value."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
    return value


def aws_env(endpoint: str) -> dict[str, str]:
    env = emulator_env(endpoint)
    os.environ.update(env)
    return {**os.environ, **env}


def start_speech_server(latency_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    """The tone backend at a FIXED latency (batch exponent 0: no slow-down with concurrency)."""
    argv = procs.python_module(
        "tts_fleet.local.speech_server", "--host", "127.0.0.1", "--port", "0", "--backend", "tone"
    )
    argv += ["--latency-ms", f"{latency_ms:g}", "--batch-exponent", "0"]
    log = LOGS / "speech.log"
    proc = procs.spawn(argv, os.environ, log)
    line = procs.wait_for_line(log, "listening on ", proc, 30)
    return proc, line.removeprefix("listening on ").strip()


class Worker:
    """`python -m worker`; its log file holds both the EMF metric lines and its own log."""

    def __init__(self, env: dict[str, str], worker_id: str) -> None:
        self.log_path = LOGS / f"{worker_id}.log"
        self.proc = procs.spawn(procs.python_module("worker"), env, self.log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> list[dict[str, Any]]:
        lines = [x for x in self.log().splitlines() if x.startswith("{") and '"_aws"' in x]
        return [json.loads(x) for x in lines]


def outstanding(sqs: Any, queue_url: str) -> int:
    return sum(visible_and_in_flight(sqs, queue_url))


def job_batch(first: int, count: int) -> list[dict[str, str]]:
    return [
        {"Id": str(i), "MessageBody": Job(id=f"j{first + i:05d}", text="A short line.").body()}
        for i in range(count)
    ]


def fresh_queue(endpoint: str, queued: int, name: str) -> tuple[Any, Any, dict[str, str]]:
    httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    stack = create_stack(sqs, s3, name, max_receive_count=5, visibility_timeout=60)
    names = dataclasses.asdict(stack)
    for start in range(0, queued, 10):
        entries = job_batch(start, min(10, queued - start))
        sqs.send_message_batch(QueueUrl=names["queue_url"], Entries=entries)
    return sqs, s3, names


class Feeder(threading.Thread):
    """Keeps at most `backlog` jobs queued ahead of the completions, until all are sent.

    moto deep-copies a message's queue on every receive, so its ReceiveMessage costs grow
    with the backlog (≈35 ms per message at 400 queued, ≈2 ms at 20); real SQS does not.
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        first: int,
        jobs: int,
        backlog: int,
        completed: Callable[[], int],
    ) -> None:
        super().__init__(daemon=True)
        self.sqs, self.queue_url, self.sent, self.jobs = sqs, queue_url, first, jobs
        self.backlog, self.completed = backlog, completed

    def run(self) -> None:
        while self.sent < self.jobs:
            room = min(10, self.backlog - (self.sent - self.completed()), self.jobs - self.sent)
            if room < min(10, self.jobs - self.sent):
                time.sleep(0.02)
                continue
            self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=job_batch(self.sent, room))
            self.sent += room


def run_worker(
    env: dict[str, str], endpoint: str, speech_url: str, jobs: int, c: int, backlog: int
) -> float:
    """Seconds from the worker's first poll to its last completion."""
    sqs, _, names = fresh_queue(endpoint, min(jobs, backlog), f"feed{c}")
    settings = {
        "SPEECH_URL": speech_url,
        "CONCURRENCY": str(c),
        "WORKER_ID": f"bench-c{c}",
        "VISIBILITY_TIMEOUT": "60",
        "HEARTBEAT_SECONDS": "20",
        # The figures were measured with the test suite's fast-fault settings; kept here.
        "WAIT_TIME_SECONDS": "1",
        "STOP_TIMEOUT_SECONDS": "10",
        "HEALTH_TIMEOUT_SECONDS": "30",
        "RETRY_BASE_SECONDS": "1",
        "RETRY_MAX_SECONDS": "4",
        "SPEECH_RETRIES": "1",
        "PYTHONUNBUFFERED": "1",
        "QUEUE_URL": names["queue_url"],
        "DLQ_URL": names["dlq_url"],
        "OUTPUT_BUCKET": names["bucket"],
    }
    worker = Worker({**env, **settings}, settings["WORKER_ID"])

    def completions() -> dict[str, float]:
        """job id -> completion time, from the worker's EMF lines."""
        lines = [x for x in worker.metrics() if "JobsCompleted" in x]
        return {x["job_id"]: x["_aws"]["Timestamp"] / 1000 for x in lines}

    try:
        wait_for(lambda: "polling" in worker.log(), 60, 0.02, "worker start")
        started = time.time()
        Feeder(
            sqs, names["queue_url"], min(jobs, backlog), jobs, backlog, lambda: len(completions())
        ).start()
        done = wait_for(lambda: len(completions()) >= jobs and completions(), 1200, 0.05, "jobs")
        wait_for(lambda: outstanding(sqs, names["queue_url"]) == 0, 60, 0.5, "empty queue")
        return max(done.values()) - started
    finally:
        procs.stop(worker.proc, 30)


def run_serial(endpoint: str, speech_url: str, jobs: int, backlog: int) -> float:
    """The sample's shape: receive one, synthesize, put audio and manifest, delete."""
    sqs, s3, names = fresh_queue(endpoint, min(jobs, backlog), "serial")
    http = httpx.Client(timeout=60)
    started, done = time.time(), 0
    Feeder(sqs, names["queue_url"], min(jobs, backlog), jobs, backlog, lambda: done).start()
    while done < jobs:
        messages = sqs.receive_message(
            QueueUrl=names["queue_url"], MaxNumberOfMessages=1, WaitTimeSeconds=1
        ).get("Messages", [])
        for message in messages:
            job = Job.model_validate_json(message["Body"])
            request = {"input": job.text, "voice": job.voice}
            audio = http.post(f"{speech_url}/v1/audio/speech", json=request).content
            s3.put_object(Bucket=names["bucket"], Key=audio_key(job.job_id, "wav"), Body=audio)
            s3.put_object(Bucket=names["bucket"], Key=manifest_key(job.job_id), Body=b"{}")
            sqs.delete_message(QueueUrl=names["queue_url"], ReceiptHandle=message["ReceiptHandle"])
            done += 1
    return time.time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="keep at most N jobs queued (fed as jobs finish); 0 = all at once",
    )
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    backlog = args.backlog or args.jobs
    moto, endpoint = procs.start_moto_server(os.environ, LOGS / "moto.log")
    env = aws_env(endpoint)
    speech, speech_url = start_speech_server(args.latency_ms)
    try:
        print(
            f"{args.jobs} jobs, tone backend at a fixed {args.latency_ms:g} ms, moto at {endpoint}"
        )
        print(
            f"{'run':<16}{'seconds':>9}{'jobs/s':>9}{'ideal':>9}{'feed eff.':>11}{'× serial':>10}"
        )
        serial_s = run_serial(endpoint, speech_url, args.jobs, backlog)
        serial_rate = args.jobs / serial_s
        print(
            f"{'serial loop':<16}{serial_s:9.1f}{serial_rate:9.2f}{1 / latency:9.2f}"
            f"{serial_rate * latency:11.2f}{1:10.2f}",
            flush=True,
        )
        for c in args.concurrency:
            seconds = run_worker(env, endpoint, speech_url, args.jobs, c, backlog)
            rate, ideal = args.jobs / seconds, c / latency
            print(
                f"{f'CONCURRENCY {c}':<16}{seconds:9.1f}{rate:9.2f}{ideal:9.2f}"
                f"{rate / ideal:11.2f}{rate / serial_rate:10.2f}",
                flush=True,
            )
    finally:
        procs.stop(speech, 5)
        procs.stop(moto, 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
