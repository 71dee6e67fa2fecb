"""A worker rides out a 10-second SQS brown-out: every job done once, none lost, none in the DLQ.

The worker (`python -m worker`, its own boto3 retry settings) reaches SQS and S3 through the
fault proxy; for 10 s most of its SQS calls (receives, heartbeats, deletes) fail: a 503, a
throttle, a reset connection, or a lost answer (a receive that hid messages from everyone, a
delete that landed). The queue keeps the deployed stack's default maxReceiveCount."""

from __future__ import annotations

import random

import boto3
import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    list_keys,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    version_counts,
    visible_and_in_flight,
    wait_for,
)
from tts_fleet.config.models import QueueConfig
from tts_fleet.local.emulator import emulator_env
from tts_fleet.local.faults import Brownout, FaultProxy
from worker.jobs import Job

pytestmark = pytest.mark.processes

BROWNOUT_SECONDS = 10
# The worker's 4 slots × 2 s a job: 14 s of work, 12 of it left when the brown-out starts, so
# jobs are received, held (heartbeats) and deleted throughout it.
JOBS = 28
SPEECH_LATENCY_MS = 2000


@pytest.mark.timeout(120)
def test_a_worker_rides_out_an_sqs_brownout(aws_env: dict[str, str], moto_endpoint: str) -> None:
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    max_receive_count = QueueConfig().max_receive_count
    names = make_queues_and_bucket(sqs, s3, max_receive_count=max_receive_count)
    jobs = [Job(id=f"b{i:02d}", text=f"Line {i}.") for i in range(JOBS)]
    for start in range(0, JOBS, 10):
        entries = [{"Id": j.id, "MessageBody": j.body()} for j in jobs[start : start + 10]]
        sqs.send_message_batch(QueueUrl=names["queue_url"], Entries=entries)
    manifests = {f"outputs/{j.id}.json" for j in jobs}

    def done() -> set[str]:
        return manifests & set(list_keys(s3, names["bucket"], "outputs/"))

    brownout = Brownout(random.Random(1), services={"sqs"})
    with (
        FaultProxy(moto_endpoint, brownout) as proxy,
        start_speech_server("tone", latency_ms=SPEECH_LATENCY_MS, batch_exponent=0) as speech,
        Processes() as procs,
    ):
        urls = {k: v.replace(moto_endpoint, proxy.url) for k, v in env_for(names).items()}
        worker = procs.add(
            start_worker({**aws_env, **emulator_env(proxy.url)}, SPEECH_URL=speech.url, **urls)
        )
        wait_for(done, 60, 0.2, "the first job")
        brownout.start(BROWNOUT_SECONDS)
        wait_for(lambda: not brownout.active(), BROWNOUT_SECONDS + 1)
        unfinished = JOBS - len(done())
        wait_for(lambda: done() == manifests, 60, 0.3, "every job")
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
        worker.terminate()
        assert worker.wait(30) == 0, worker.log()

    assert sum(brownout.injected.values()) > 10, brownout.injected
    assert unfinished > 0  # work was still held when the brown-out ended
    audio = {f"outputs/{j.id}.wav" for j in jobs}
    assert version_counts(s3, names["bucket"]) == dict.fromkeys(manifests | audio, 1)
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
