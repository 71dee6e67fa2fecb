"""Races between workers, and between a job's thread and the drain, against the emulator.

These run `Worker` in threads of the test process with a stand-in speech client, so each
race can be forced at the exact step it needs (a peer's manifest appearing mid-job, an S3
PUT that hangs). The queue, bucket and all S3/SQS calls are the real emulator's.
"""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

from tests.lib.fake_worker import (
    BlockingSpeech,
    FakeSpeech,
    fake_audio,
    make_worker,
    manifest_of,
    put_outputs,
    run_until,
)
from tests.lib.procs import make_queues_and_bucket, version_counts, visible_and_in_flight, wait_for
from worker.jobs import MANIFEST_DIGEST_METADATA, Job
from worker.metrics import Metrics
from worker.settings import DEFAULT_MODEL

MANIFEST = "outputs/r1.json"
AUDIO = "outputs/r1.wav"
R1 = Job(id="r1", text="Hi.")


def peer_manifest(s3: Any, bucket: str) -> None:
    """What another worker that finished the same job first leaves behind."""
    put_outputs(s3, bucket, R1)


def manifest_worker(s3: Any, bucket: str) -> str:
    return json.loads(s3.get_object(Bucket=bucket, Key=MANIFEST)["Body"].read())["worker"]


@pytest.mark.timeout(60)
def test_manifest_appearing_during_synthesis_means_no_second_write(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="r1", text="Hi.").body())
    speech = FakeSpeech(during=lambda job: peer_manifest(s3, names["bucket"]))
    worker = make_worker(names, sqs, s3, speech)
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    # The peer's PUTs only: this worker saw the manifest and wrote nothing.
    assert version_counts(s3, names["bucket"]) == {AUDIO: 1, MANIFEST: 1}
    assert manifest_worker(s3, names["bucket"]) == "peer"


class PeerWinsDuringAudio:
    """S3 client whose audio PUT lets a peer's manifest land right after it (the last window)."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        result = self.s3.put_object(**kwargs)
        if kwargs["Key"] == AUDIO:
            body = manifest_of(R1).to_json()
            self.s3.put_object(Bucket=self.bucket, Key=MANIFEST, Body=body)
        return result


@pytest.mark.timeout(60)
def test_manifest_put_is_conditional_and_the_loser_deletes(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="r1", text="Hi.").body())
    racing_s3 = PeerWinsDuringAudio(s3, names["bucket"])
    worker = make_worker(names, sqs, racing_s3, FakeSpeech())
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    assert version_counts(s3, names["bucket"]) == {AUDIO: 1, MANIFEST: 1}
    assert manifest_worker(s3, names["bucket"]) == "peer"
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)


@pytest.mark.timeout(60)
def test_this_requests_audio_already_in_place_is_used_not_copied(aws_env, sqs, s3):
    # The duplicate-message race (or this job's own earlier attempt, killed between its audio
    # and its manifest): outputs/r1.wav holds this request's audio, the manifest is not there
    # yet when this worker's conditional audio PUT finds the key taken.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=R1.body())
    manifest = manifest_of(R1, "peer")

    def peer_between_synthesis_and_audio(job: Job) -> None:
        s3.put_object(Bucket=names["bucket"], Key=manifest.audio_key, Body=fake_audio(R1),
                      Metadata={MANIFEST_DIGEST_METADATA: R1.digest()})  # fmt: skip

    worker = make_worker(names, sqs, s3, FakeSpeech(during=peer_between_synthesis_and_audio))
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    # The audio in place is the manifest's: no copy under a key of this worker's own.
    assert version_counts(s3, names["bucket"]) == {AUDIO: 1, MANIFEST: 1}
    stored = json.loads(s3.get_object(Bucket=names["bucket"], Key=MANIFEST)["Body"].read())
    assert stored["audio_key"] == AUDIO


def test_another_requests_audio_in_place_is_not_used(aws_env, sqs, s3) -> None:
    # outputs/r1.wav of an older version of r1, killed before its manifest: not this audio.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=R1.body())
    old = Job(id="r1", text="An older text.")
    s3.put_object(Bucket=names["bucket"], Key=AUDIO, Body=fake_audio(old),
                  Metadata={MANIFEST_DIGEST_METADATA: old.digest()})  # fmt: skip
    worker = make_worker(names, sqs, s3, FakeSpeech())
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    stored = json.loads(s3.get_object(Bucket=names["bucket"], Key=MANIFEST)["Body"].read())
    assert stored["audio_key"] == f"outputs/r1.{R1.request_hash(DEFAULT_MODEL)[:16]}.wav"


def test_two_workers_same_job_one_manifest(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    for _ in range(2):  # the same request twice: the same job id (DESIGN §3.2)
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="r1", text="Hi.").body())
    workers = [
        make_worker(names, sqs, s3, FakeSpeech(1.0), worker_id=f"w{i}", concurrency=1, prefetch=0)
        for i in range(2)
    ]
    threads = [threading.Thread(target=w.run) for w in workers]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
    finally:
        for worker in workers:
            worker.request_stop()
        for thread in threads:
            thread.join(60)
    counts = version_counts(s3, names["bucket"])
    # The manifest is written once. Both may synthesize (they raced past the re-check), but
    # outputs/r1.wav is written only if free: the loser's copy, if any, went to a key of its
    # own that no manifest names.
    assert counts.pop(MANIFEST) == 1 and counts.pop(AUDIO) == 1
    assert counts in ({}, {f"outputs/r1.{R1.request_hash(DEFAULT_MODEL)[:16]}.wav": 1})
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)


class HeartbeatBlockedUntilRelease:
    """SQS client: once a stop is requested, a heartbeat extension waits (up to 3 s) until a
    release (visibility 0) has been sent, so the tick always straddles the release."""

    def __init__(self, sqs: Any) -> None:
        self.sqs, self.worker = sqs, None
        self.released = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)

    def change_message_visibility_batch(self, **kwargs: Any) -> Any:
        seconds = kwargs["Entries"][0]["VisibilityTimeout"]
        if seconds and self.worker is not None and self.worker.consumer.stop_requested.is_set():
            self.released.wait(3)
        result = self.sqs.change_message_visibility_batch(**kwargs)
        if seconds == 0:
            self.released.set()
        return result


@pytest.mark.timeout(60)
def test_heartbeat_tick_cannot_rehide_a_released_message(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="r1", text="Hi.").body())
    racing_sqs = HeartbeatBlockedUntilRelease(sqs)
    speech = BlockingSpeech({"r1"})
    worker = make_worker(
        names, racing_sqs, s3, speech, heartbeat_seconds=0.5, stop_timeout_seconds=2
    )
    racing_sqs.worker = worker
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 1), 30)
        time.sleep(1)  # the job is running and the heartbeat ticking
        worker.request_stop()
        thread.join(60)
        # Released at the drain and not re-hidden for the 30 s extension by a late tick.
        got = sqs.receive_message(QueueUrl=names["queue_url"], WaitTimeSeconds=2)
        assert [json.loads(m["Body"])["id"] for m in got.get("Messages", [])] == ["r1"]
    finally:
        speech.go.set()


class CrashingMetrics(Metrics):
    def completed(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metrics broke after the manifest")


@pytest.mark.timeout(60)
def test_a_metrics_crash_after_the_manifest_does_not_fail_a_finished_job(aws_env, sqs, s3) -> None:
    # maxReceiveCount 1: retrying a crash on the first receive means recording a failure.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=1, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="r1", text="Hi.").body())
    worker = make_worker(names, sqs, s3, FakeSpeech(), metrics=CrashingMetrics(io.StringIO()))
    run_until(
        worker,
        lambda: version_counts(s3, names["bucket"]) and not len(worker.consumer.inflight),
    )
    assert version_counts(s3, names["bucket"]) == {AUDIO: 1, MANIFEST: 1}
    assert visible_and_in_flight(sqs, names["queue_url"]) == (0, 0)
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)  # no DLQ copy of a finished job


class AudioPutHangs:
    """S3 client whose PUT of `outputs/w1.wav` hangs until `go` is set."""

    def __init__(self, s3: Any) -> None:
        self.s3, self.started, self.go = s3, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"] == "outputs/w1.wav":
            self.started.set()
            self.go.wait(60)
        return self.s3.put_object(**kwargs)


@pytest.mark.timeout(90)
def test_drain_does_not_wait_past_the_stop_timeout_for_a_hung_write(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    for job_id in ("w1", "s1"):
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id=job_id, text="Hi.").body())
    hanging_s3, speech = AudioPutHangs(s3), BlockingSpeech({"s1"})
    worker = make_worker(names, sqs, hanging_s3, speech, stop_timeout_seconds=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(hanging_s3.started.is_set, 30)  # w1 writing (hung), s1 synthesizing
        worker.request_stop()
        thread.join(20)  # the stop timeout (2 s) plus slack; the write hangs for 60 s
        assert not thread.is_alive()
        # s1 was released for other workers although w1's write never finished.
        got = sqs.receive_message(QueueUrl=names["queue_url"], WaitTimeSeconds=2)
        assert [json.loads(m["Body"])["id"] for m in got.get("Messages", [])] == ["s1"]
    finally:
        hanging_s3.go.set()
        speech.go.set()
        thread.join(60)
    # w1 was left to finish its write: its outputs exist and its message is deleted.
    wait_for(lambda: version_counts(s3, names["bucket"]).get("outputs/w1.json") == 1, 30)
