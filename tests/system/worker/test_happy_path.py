"""50 jobs through 2 worker processes and the espeak speech server: every job once."""

from __future__ import annotations

import io
import json
import wave
from typing import Any

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
from worker.jobs import Job

pytestmark = pytest.mark.processes

JOBS = 50


@pytest.mark.timeout(240)
def test_fifty_jobs_two_workers(aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes):
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=10)
    voices = ["Vivian", "Ryan", "Sohee", "Aiden"]
    jobs = [
        Job(id=f"p{i:03d}", text=f"Paragraph {i}. It is short.", voice=voices[i % 4])
        for i in range(JOBS)
    ]
    for start in range(0, JOBS, 10):
        entries = [
            {"Id": str(n), "MessageBody": j.body()} for n, j in enumerate(jobs[start : start + 10])
        ]
        sqs.send_message_batch(QueueUrl=names["queue_url"], Entries=entries)
    with start_speech_server("espeak") as speech:
        workers = [
            procs.add(
                start_worker(
                    aws_env,
                    SPEECH_URL=speech.url,
                    VISIBILITY_TIMEOUT=10,
                    HEARTBEAT_SECONDS=3,
                    WORKER_ID=f"w{n}",
                    **env_for(names),
                )
            )
            for n in range(2)
        ]
        manifests = {f"outputs/{j.id}.json" for j in jobs}
        wait_for(
            lambda: manifests <= set(list_keys(s3, names["bucket"], "outputs/")),
            180,
            0.5,
            "all manifests",
        )
        wait_for(
            lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30, 0.3, "empty queue"
        )
        for worker in workers:
            worker.terminate()
        assert [w.wait(30) for w in workers] == [0, 0]

    audio = {f"outputs/{j.id}.wav" for j in jobs}
    assert set(list_keys(s3, names["bucket"])) == manifests | audio
    assert version_counts(s3, names["bucket"]) == dict.fromkeys(manifests | audio, 1)
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
    done_by = set()
    for job in jobs:
        manifest = json.loads(
            s3.get_object(Bucket=names["bucket"], Key=f"outputs/{job.id}.json")["Body"].read()
        )
        body = s3.get_object(Bucket=names["bucket"], Key=f"outputs/{job.id}.wav")["Body"].read()
        with wave.open(io.BytesIO(body)) as reader:
            seconds = reader.getnframes() / reader.getframerate()
            assert reader.getframerate() == manifest["sample_rate"] == 24_000  # as vLLM-Omni
        assert seconds > 0.5
        assert manifest["duration_s"] == pytest.approx(seconds)
        assert manifest["request"] == job.request()
        assert manifest["attempts"] == 1
        done_by.add(manifest["worker"])
    assert done_by <= {"w0", "w1"}
    metric_lines = [json.loads(line) for w in workers for line in w.metrics().splitlines()]
    assert sum(line.get("JobsCompleted", 0) for line in metric_lines) == JOBS
    assert all(
        line["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "TtsFleet" for line in metric_lines
    )
