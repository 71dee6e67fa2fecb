"""A job longer than the visibility timeout stays invisible while it runs, and runs once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    version_counts,
    visible_and_in_flight,
    wait_for,
)
from worker.jobs import Job

pytestmark = pytest.mark.processes

VISIBILITY = 3
# How many visibility timeouts the job's one synthesis takes (each worker's start-up probe
# takes as long too): three expiries without a redelivery prove the heartbeat as well as more.
TIMEOUTS = 3


@pytest.mark.timeout(120)
def test_long_job_kept_invisible_by_heartbeat(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=VISIBILITY)
    job = Job(id="long-1", text="A job that takes several visibility timeouts.")
    settings = {"VISIBILITY_TIMEOUT": VISIBILITY, "HEARTBEAT_SECONDS": 1, **env_for(names)}
    expected = {"outputs/long-1.wav": 1, "outputs/long-1.json": 1}
    # Two idle workers: if the message ever became visible, the other one would take it.
    with start_speech_server(
        "tone", latency_ms=TIMEOUTS * VISIBILITY * 1000, batch_exponent=0
    ) as speech:
        workers = [
            procs.add(start_worker(aws_env, SPEECH_URL=speech.url, WORKER_ID=f"w{n}", **settings))
            for n in range(2)
        ]
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
        wait_for(lambda: version_counts(s3, names["bucket"]) == expected, 90)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
        for worker in workers:
            worker.terminate()
        assert [worker.wait(30) for worker in workers] == [0, 0]
    manifest = json.loads(
        s3.get_object(Bucket=names["bucket"], Key="outputs/long-1.json")["Body"].read()
    )
    assert manifest["attempts"] == 1
    assert manifest["synth_s"] >= TIMEOUTS * VISIBILITY
    logs = "".join(worker.log() for worker in workers)
    # Received once: no worker (not even the one running it) ever saw the message again.
    assert logs.count("job long-1") == 2, logs  # "started" and "done"
    assert version_counts(s3, names["bucket"]) == expected
