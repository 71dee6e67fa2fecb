"""Issue #12's Done-when, end to end: real worker processes, the faithful stand-in, moto.

A 20,000-character English job and a 3,000-character Chinese job each come out whole in wav,
pcm, flac and mp3 (an mp3 decoded by libsndfile to its full length); then a resubmitted id
with changed text yields the new audio, and the same text resubmitted does no synthesis
(counted in the stand-in's request log and the worker's JobsCompleted).
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np
import pytest
import soundfile

from tests.lib.procs import (
    Processes,
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    visible_and_in_flight,
    wait_for,
)
from tests.system.worker.test_speech_long import CHINESE, ENGLISH
from tts_fleet.local.speech_backends import spoken_seconds
from worker.jobs import Job, Manifest, manifest_key

pytestmark = pytest.mark.processes
FORMATS = ("wav", "pcm", "flac", "mp3")
TEXTS = {"en": (ENGLISH, "English"), "zh": (CHINESE, "Chinese")}
SPEECH_POSTS = r'"POST /v1/audio/speech HTTP/1\.1" 200'


def long_jobs() -> list[Job]:
    return [
        Job(id=f"{name}-{fmt}", text=text, language=language, format=fmt)
        for name, (text, language) in TEXTS.items()
        for fmt in FORMATS
    ]


def read_manifest(s3: Any, bucket: str, job_id: str) -> Manifest | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=manifest_key(job_id))["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return Manifest.model_validate_json(body)


def made(s3: Any, bucket: str, jobs: list[Job]) -> dict[str, Manifest] | None:
    """Every job's manifest once each is made from that very request, else None."""
    found = {job.job_id: read_manifest(s3, bucket, job.job_id) for job in jobs}
    done = all(
        m is not None and m.made_from(j.digest()) for j, m in zip(jobs, found.values(), strict=True)
    )
    return {k: m for k, m in found.items() if m is not None} if done else None


def decoded_seconds(audio: bytes, fmt: str) -> float:
    """The length a player gets: every sample decoded (libsndfile for all but raw PCM)."""
    if fmt == "pcm":
        return len(audio) / 2 / 24_000
    samples, rate = soundfile.read(io.BytesIO(audio), dtype="int16")
    assert rate == 24_000 and isinstance(samples, np.ndarray)
    return len(samples) / rate


def completed(workers: list[Any]) -> int:
    lines = [json.loads(line) for w in workers for line in w.metrics().splitlines()]
    return sum(int(line.get("JobsCompleted", 0)) for line in lines)


def send(sqs: Any, queue_url: str, jobs: list[Job]) -> None:
    for job in jobs:
        sqs.send_message(QueueUrl=queue_url, MessageBody=job.body())


@pytest.mark.timeout(900)
def test_long_text_whole_in_every_format_and_edits_made_again(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=60)
    bucket, jobs = names["bucket"], long_jobs()
    with start_speech_server("tone", extra_args=("--log-level", "DEBUG")) as speech:
        worker = procs.add(
            start_worker(
                aws_env, SPEECH_URL=speech.url, VISIBILITY_TIMEOUT=60, HEARTBEAT_SECONDS=10,
                STOP_TIMEOUT_SECONDS=30, **env_for(names),
            )
        )  # fmt: skip
        send(sqs, names["queue_url"], jobs)
        manifests = wait_for(lambda: made(s3, bucket, jobs), 780, 2.0, "8 long jobs")
        for job in jobs:
            manifest = manifests[job.job_id]
            audio = s3.get_object(Bucket=bucket, Key=manifest.audio_key)["Body"].read()
            seconds = decoded_seconds(audio, job.format)
            assert seconds >= 0.95 * spoken_seconds(job.text), job.job_id
            assert manifest.duration_s == pytest.approx(seconds, abs=0.2), job.job_id
        # Every piece was a request (plus the worker's start-up probe, and any re-split).
        posts = len(re.findall(SPEECH_POSTS, speech.log()))
        assert posts >= sum(m.pieces for m in manifests.values())

        # The same id with changed text, and another id with its text unchanged.
        edited = Job(id="en-wav", text="The committee met again. The harbour was saved.")
        again = next(job for job in jobs if job.job_id == "zh-mp3")
        send(sqs, names["queue_url"], [edited, again])
        remade = wait_for(lambda: made(s3, bucket, [edited]), 120, 0.5, "the edited job")
        wait_for(
            lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60, 0.5, "no messages"
        )
        worker.terminate()
        assert worker.wait(60) == 0
    new = remade["en-wav"]
    audio = s3.get_object(Bucket=bucket, Key=new.audio_key)["Body"].read()
    assert new.request == edited.request() and new.audio_key != manifests["en-wav"].audio_key
    assert decoded_seconds(audio, "wav") == pytest.approx(spoken_seconds(edited.text), abs=0.3)
    # One more synthesis (the edited job's pieces), none for the unchanged resubmit.
    assert len(re.findall(SPEECH_POSTS, speech.log())) == posts + new.pieces
    assert read_manifest(s3, bucket, "zh-mp3") == manifests["zh-mp3"]
    assert completed([worker]) == len(jobs) + 1
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
