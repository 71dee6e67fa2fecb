"""Worker processes killed, stopped, or cut off from speech: no job lost, none done twice."""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    list_keys,
    make_queues_and_bucket,
    receive_all,
    start_speech_server,
    start_worker,
    version_counts,
    visible_and_in_flight,
    wait_for,
    wait_for_log,
)
from worker.jobs import Job

pytestmark = pytest.mark.processes

STARTED = r"job (\S+) started"
# A slow server's every answer takes this long, the worker's start-up probe synthesis too: long
# enough that no job finishes before the kill or the stop, short enough for the probe to
# pass within SLOW_HEALTH_S.
SLOW_MS = 10_000
SLOW_HEALTH_S = 60


def send(sqs: Any, queue_url: str, jobs: list[Job]) -> None:
    for job in jobs:
        sqs.send_message(QueueUrl=queue_url, MessageBody=job.body())


def manifest(s3: Any, bucket: str, job_id: str) -> dict[str, Any]:
    body = s3.get_object(Bucket=bucket, Key=f"outputs/{job_id}.json")["Body"].read()
    written: dict[str, Any] = json.loads(body)
    return written


def wait_manifests(s3: Any, bucket: str, ids: set[str], timeout: float) -> None:
    keys = {f"outputs/{i}.json" for i in ids}
    wait_for(lambda: keys <= set(list_keys(s3, bucket, "outputs/")), timeout, 0.3, "manifests")


def assert_once(s3: Any, bucket: str, ids: set[str]) -> None:
    """Exactly one PUT of each job's audio and manifest, and nothing else."""
    expected = {f"outputs/{i}.{ext}": 1 for i in ids for ext in ("wav", "json")}
    assert version_counts(s3, bucket) == expected


@pytest.mark.timeout(150)
def test_sigkill_with_jobs_in_flight(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    # The queue's own visibility is long: only the worker's short one (kept alive by its
    # heartbeat while it lived) can bring the jobs back quickly after the kill.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=600)
    jobs = [Job(id=f"k{i}", text=f"Job number {i}.") for i in range(4)]
    with (
        start_speech_server("tone", latency_ms=SLOW_MS, batch_exponent=0) as slow,
        start_speech_server("tone") as fast,
    ):
        a = procs.add(
            start_worker(
                aws_env,
                SPEECH_URL=slow.url,
                WORKER_ID="a",
                HEALTH_TIMEOUT_SECONDS=SLOW_HEALTH_S,
                VISIBILITY_TIMEOUT=4,
                HEARTBEAT_SECONDS=1,
                **env_for(names),
            )
        )
        send(sqs, names["queue_url"], jobs)
        wait_for_log(a, STARTED, count=4)
        time.sleep(2.5)  # let the heartbeat extend at least once past the first 4 s
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        b = procs.add(start_worker(aws_env, SPEECH_URL=fast.url, WORKER_ID="b", **env_for(names)))
        # Back within A's visibility extension (4 s) plus a margin for a loaded machine.
        wait_manifests(s3, names["bucket"], {j.job_id for j in jobs}, timeout=60)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
        b.terminate()
        assert b.wait(30) == 0
    assert_once(s3, names["bucket"], {j.job_id for j in jobs})
    for job in jobs:
        done = manifest(s3, names["bucket"], job.job_id)
        assert (done["worker"], done["attempts"]) == ("b", 2)


@pytest.mark.timeout(150)
def test_sigterm_releases_unfinished_jobs_at_once(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    # Visibility 600 s everywhere: a job B finishes within a minute was released, not expired.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=600)
    jobs = [Job(id=f"t{i}", text=f"Job number {i}.") for i in range(2)]
    with (
        start_speech_server("tone", latency_ms=SLOW_MS, batch_exponent=0) as slow,
        start_speech_server("tone") as fast,
    ):
        a = procs.add(
            start_worker(
                aws_env,
                SPEECH_URL=slow.url,
                WORKER_ID="a",
                HEALTH_TIMEOUT_SECONDS=SLOW_HEALTH_S,
                CONCURRENCY=2,
                VISIBILITY_TIMEOUT=600,
                HEARTBEAT_SECONDS=200,
                STOP_TIMEOUT_SECONDS=3,
                **env_for(names),
            )
        )
        send(sqs, names["queue_url"], jobs)
        wait_for_log(a, STARTED, count=2)
        a.send_signal(signal.SIGTERM)
        assert a.wait(3 + 20) == 0  # stop timeout plus process start/exit slack
        assert "released 2 unfinished job(s)" in a.log()
        b = procs.add(
            start_worker(
                aws_env,
                SPEECH_URL=fast.url,
                WORKER_ID="b",
                VISIBILITY_TIMEOUT=600,
                HEARTBEAT_SECONDS=200,
                **env_for(names),
            )
        )
        wait_manifests(s3, names["bucket"], {j.job_id for j in jobs}, timeout=60)
        b.terminate()
        assert b.wait(30) == 0
    assert_once(s3, names["bucket"], {j.job_id for j in jobs})
    assert {manifest(s3, names["bucket"], j.job_id)["worker"] for j in jobs} == {"b"}


@pytest.mark.timeout(150)
def test_sigterm_finishes_in_flight_jobs(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=600)
    jobs = [Job(id=f"f{i}", text=f"Job number {i}.") for i in range(3)]
    with start_speech_server("tone", latency_ms=3_000, batch_exponent=0) as speech:
        a = procs.add(
            start_worker(
                aws_env,
                SPEECH_URL=speech.url,
                WORKER_ID="a",
                CONCURRENCY=2,
                STOP_TIMEOUT_SECONDS=60,
                **env_for(names),
            )
        )
        send(sqs, names["queue_url"], jobs)
        started = set(re.findall(STARTED, wait_for_log(a, STARTED, count=2)))
        a.send_signal(signal.SIGTERM)
        assert a.wait(60) == 0
    assert len(started) == 2
    assert_once(s3, names["bucket"], started)
    assert {manifest(s3, names["bucket"], i)["worker"] for i in started} == {"a"}
    assert visible_and_in_flight(sqs, names["queue_url"]) == (1, 0)  # the third was never received


@pytest.mark.timeout(150)
def test_speech_down_then_back(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=20, visibility_timeout=30)
    jobs = [Job(id=f"d{i}", text=f"Job number {i}.") for i in range(3)]
    speech = start_speech_server("tone")
    try:
        worker = procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
        wait_for_log(worker, r"polling ")
        speech.stop()
        send(sqs, names["queue_url"], jobs)
        wait_for_log(worker, r"released for \d+s after receive \d+: speech server", count=4)
        assert list_keys(s3, names["bucket"]) == []
        speech = start_speech_server("tone", port=speech.port)
        wait_manifests(s3, names["bucket"], {j.job_id for j in jobs}, timeout=60)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
    finally:
        speech.stop()
    assert_once(s3, names["bucket"], {j.job_id for j in jobs})
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
    assert max(manifest(s3, names["bucket"], j.job_id)["attempts"] for j in jobs) >= 2


@pytest.mark.timeout(150)
def test_speech_down_past_max_receive_count(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=2, visibility_timeout=30)
    jobs = [Job(id=f"x{i}", text=f"Job number {i}.") for i in range(2)]
    with start_speech_server("tone") as speech:
        worker = procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
        wait_for_log(worker, r"polling ")
    send(sqs, names["queue_url"], jobs)
    dead = receive_all(sqs, names["dlq_url"], expected=2, timeout=90)
    assert sorted(json.loads(m["Body"])["id"] for m in dead) == ["x0", "x1"]
    for message in dead:
        reason = message["MessageAttributes"]["error"]["StringValue"]
        assert reason.startswith("transient failures on all 2 receives: speech server")
    assert list_keys(s3, names["bucket"], "outputs/") == []
    for job in jobs:
        record = json.loads(
            s3.get_object(Bucket=names["bucket"], Key=f"failures/{job.job_id}.json")["Body"].read()
        )
        assert (record["id"], record["attempts"]) == (job.job_id, 2)
        assert "unreachable" in record["detail"]
    wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
