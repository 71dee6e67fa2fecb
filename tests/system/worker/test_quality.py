"""Output checks through a real worker process against the espeak-ng stand-in (issue 21): clean
speech in several languages, scripts and speeds passes every check on its first attempt, and
the manifests and metric lines say so. (The stand-in's injected faults are tested with it.)"""

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
    visible_and_in_flight,
    wait_for,
)
from tests.unit.worker.test_qa_checks import SENTENCES
from worker.jobs import Job, Manifest, manifest_key
from worker.qa.guard import seed_for

pytestmark = pytest.mark.processes


def jobs() -> list[Job]:
    made = []
    for language, sentences in SENTENCES.items():
        for speed in (0.8, 1.25):
            text = " ".join(sentences)
            made.append(Job(id=f"{language}-{speed}", text=text, language=language, speed=speed))
    return made


@pytest.mark.timeout(600)
def test_clean_stand_in_speech_passes_the_checks_first_time(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=60)
    bucket, sent = names["bucket"], jobs()
    with start_speech_server("espeak") as speech:
        worker = procs.add(
            start_worker(
                aws_env, SPEECH_URL=speech.url, VISIBILITY_TIMEOUT=60, HEARTBEAT_SECONDS=10,
                STOP_TIMEOUT_SECONDS=30, SPEECH_CHUNK_CHARS=120, **env_for(names),
            )
        )  # fmt: skip
        for job in sent:
            sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
        wait_for(
            lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 500, 1.0, "all jobs"
        )
        worker.terminate()
        assert worker.wait(60) == 0
    pieces = 0
    for job in sent:
        body = s3.get_object(Bucket=bucket, Key=manifest_key(job.job_id))["Body"].read()
        qa = Manifest.model_validate_json(body).qa
        assert qa is not None and qa.mode == "basic", job.job_id
        assert qa.passed and qa.rerenders == 0, (job.job_id, qa.reason)
        assert all(p.seeds == [seed_for(job.job_id, 0)] for p in qa.pieces)
        pieces += len(qa.pieces)
    assert pieces > len(sent)  # some jobs were several pieces
    lines = [json.loads(line) for line in worker.metrics().splitlines()]
    assert sum(line.get("PiecesChecked", 0) for line in lines) == pieces
    assert sum(line.get("PiecesRejected", 0) for line in lines) == 0
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
