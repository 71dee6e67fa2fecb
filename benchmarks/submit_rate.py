"""Submit rate: `tts_fleet.client.submit.submit_jobs` (SendMessageBatch, threads) against one-by-one
SendMessage, both to the same moto server (a separate process) in the same run.

    .venv/bin/python benchmarks/submit_rate.py --jobs 20000 --baseline-jobs 2000 --threads 8

Targets (issue 5): ≤ 0.1 SendMessage* calls per message, and ≥ 5× the one-by-one rate.
The baseline sends fewer messages (rates are compared, not totals) with the same threads.

moto 5.2.5 computes every queue attribute, counting all messages, on each message it
accepts, so its cost per message grows with the queue's depth (at 3,000 messages a single
SendMessage takes ~60 ms; 20,000 into one queue would take most of an hour and measure
moto, not the client). Both modes therefore send in rounds of --round messages, each to a
fresh queue created outside the timed region; only the sending is timed.

--rtt-ms adds a fixed delay to every API call (a botocore before-send hook), standing in
for the network round trip to a real SQS endpoint that a loopback emulator does not have.
Figures with it are labelled as such; the default is 0 (raw loopback to moto).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tts_fleet.client.aws import client_for
from tts_fleet.client.submit import submit_jobs
from tts_fleet.local import procs
from worker.jobs import Job, validate_job

TARGET_CALLS_PER_MESSAGE = 0.1
TARGET_SPEEDUP = 5.0


@contextmanager
def moto_server() -> Iterator[str]:
    """moto in its own process (tts_fleet.local.procs), stopped on the way out."""
    log = Path(tempfile.mkdtemp(prefix="tts-submit-rate-")) / "moto.log"
    proc, endpoint = procs.start_moto_server(os.environ, log)
    try:
        yield endpoint
    finally:
        procs.stop(proc, 10)


def make_jobs(count: int, tag: str) -> list[Job]:
    """Small jobs, like a line of a notification script each."""
    return [
        validate_job({"text": f"Your order {tag}-{n} has shipped."}).with_id() for n in range(count)
    ]


def count_calls(sqs: object) -> dict[str, int]:
    counts: dict[str, int] = {}

    def hook(model: object, **_: object) -> None:
        name = model.name  # type: ignore[attr-defined]
        counts[name] = counts.get(name, 0) + 1

    sqs.meta.events.register("before-call.sqs", hook)  # type: ignore[attr-defined]
    return counts


def one_by_one(sqs: object, queue_url: str, jobs: list[Job], threads: int) -> None:
    def send(job: Job) -> None:
        sqs.send_message(QueueUrl=queue_url, MessageBody=job.body())  # type: ignore[attr-defined]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(send, jobs))


def timed_rounds(sqs: object, jobs: list[Job], round_size: int, send: Callable) -> float:
    """Seconds spent sending `jobs`, round by round, each round into a fresh queue."""
    spent = 0.0
    for number, start in enumerate(range(0, len(jobs), round_size)):
        name = f"bench-{send.__name__}-{number}"
        queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]  # type: ignore[attr-defined]
        began = time.perf_counter()
        send(queue_url, jobs[start : start + round_size])
        spent += time.perf_counter() - began
    return spent


def add_round_trip(sqs: object, rtt_ms: float) -> None:
    def delay(**_: object) -> None:
        time.sleep(rtt_ms / 1000)

    if rtt_ms > 0:
        sqs.meta.events.register("before-send.sqs", delay)  # type: ignore[attr-defined]


def measure(
    jobs: int, baseline_jobs: int, threads: int, round_size: int, rtt_ms: float
) -> dict[str, Any]:
    sqs = client_for("sqs")
    calls = count_calls(sqs)
    add_round_trip(sqs, rtt_ms)
    sent: list[str] = []

    def batched(queue_url: str, chunk: list[Job]) -> None:
        report = submit_jobs(sqs, queue_url, chunk, threads=threads)
        assert not report.failed, report.failed
        sent.extend(report.sent)

    def single(queue_url: str, chunk: list[Job]) -> None:
        one_by_one(sqs, queue_url, chunk, threads)

    single_s = timed_rounds(sqs, make_jobs(baseline_jobs, "single"), round_size, single)
    single_calls = calls.pop("SendMessage", 0)
    batch_s = timed_rounds(sqs, make_jobs(jobs, "batch"), round_size, batched)
    assert len(sent) == jobs
    batch_calls = calls.get("SendMessageBatch", 0) + calls.get("SendMessage", 0)
    batch_rate, single_rate = jobs / batch_s, baseline_jobs / single_s
    return {
        "jobs": jobs,
        "threads": threads,
        "round": round_size,
        "rtt_ms": rtt_ms,
        "batch_seconds": round(batch_s, 2),
        "batch_messages_per_s": round(batch_rate, 1),
        "batch_calls": batch_calls,
        "calls_per_message": round(batch_calls / jobs, 4),
        "baseline_jobs": baseline_jobs,
        "baseline_seconds": round(single_s, 2),
        "baseline_messages_per_s": round(single_rate, 1),
        "baseline_calls_per_message": round(single_calls / baseline_jobs, 4),
        "speedup": round(batch_rate / single_rate, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--baseline-jobs", type=int, default=2_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--round", type=int, default=500, help="messages per fresh queue")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="added delay per API call")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with moto_server() as endpoint:
        os.environ.update(
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
        )
        figures = measure(args.jobs, args.baseline_jobs, args.threads, args.round, args.rtt_ms)
    met = (
        figures["calls_per_message"] <= TARGET_CALLS_PER_MESSAGE
        and figures["speedup"] >= TARGET_SPEEDUP
    )
    if args.json:
        print(json.dumps({**figures, "targets_met": met}))
    else:
        for key, value in figures.items():
            print(f"{key:28} {value}")
        print(f"targets (≤ {TARGET_CALLS_PER_MESSAGE} calls/message, ≥ {TARGET_SPEEDUP}× "
              f"one-by-one): {'met' if met else 'NOT met'}")  # fmt: skip
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
