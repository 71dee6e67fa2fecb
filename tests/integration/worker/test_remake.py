"""Edited jobs are made again (issue #12, item 5), in `Worker` threads against the emulator.

The manifest records the request's hash: the same request again is done without synthesis, an
edited one is synthesized and swapped in on the old manifest's ETag, its audio under a key of
its own, so at no moment does the manifest name audio of another request.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.lib.fake_worker import FakeSpeech, fake_audio, make_worker, put_outputs, run_until
from tests.lib.procs import make_queues_and_bucket, version_counts, visible_and_in_flight
from worker.jobs import Job, Manifest, audio_key, manifest_key
from worker.metrics import Metrics
from worker.settings import DEFAULT_MODEL

OLD = Job(id="c3", text="Chapter three, with a typo.")
NEW = Job(id="c3", text="Chapter three, fixed.")


def stored(s3: Any, bucket: str, job_id: str = "c3") -> Manifest:
    body = s3.get_object(Bucket=bucket, Key=manifest_key(job_id))["Body"].read()
    return Manifest.model_validate_json(body)


def audio_of(s3: Any, bucket: str, manifest: Manifest) -> bytes:
    return bytes(s3.get_object(Bucket=bucket, Key=manifest.audio_key)["Body"].read())


def completed(metrics: io.StringIO) -> int:
    return sum(json.loads(line).get("JobsCompleted", 0) for line in metrics.getvalue().split())


def run_one(names: dict[str, str], sqs: Any, s3: Any, job: Job, **worker: Any) -> FakeSpeech:
    speech = worker.pop("speech", None) or FakeSpeech(0.05)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    run_until(
        make_worker(names, sqs, s3, speech, **worker),
        lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0),
    )
    return speech


@pytest.fixture
def names(aws_env: dict[str, str], sqs: Any, s3: Any) -> dict[str, str]:
    return make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=30)


@pytest.mark.timeout(60)
def test_the_same_request_again_is_done_without_synthesis(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD)
    speech = run_one(names, sqs, s3, OLD)
    assert speech.calls == []
    assert stored(s3, names["bucket"]).worker == "peer"


@pytest.mark.timeout(60)
def test_an_edited_request_is_made_again_under_a_key_of_its_own(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD)
    metrics = io.StringIO()
    speech = run_one(names, sqs, s3, NEW, metrics=Metrics(metrics))
    assert speech.calls == [NEW.text]
    manifest = stored(s3, names["bucket"])
    assert manifest.request == NEW.request() and manifest.made_from(NEW.digest())
    new_key = audio_key("c3", "wav", "", NEW.request_hash(DEFAULT_MODEL))
    assert manifest.audio_key == new_key
    assert audio_of(s3, names["bucket"], manifest) == fake_audio(NEW)
    # The old audio was never overwritten: only the manifest has a second version.
    assert version_counts(s3, names["bucket"]) == {
        "outputs/c3.wav": 1, "outputs/c3.json": 2, new_key: 1,
    }  # fmt: skip
    assert completed(metrics) == 1


@pytest.mark.timeout(60)
def test_a_manifest_from_before_the_hash_counts_as_another_request(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD, request_hash=None)
    speech = run_one(names, sqs, s3, OLD)
    assert speech.calls == [OLD.text]
    assert stored(s3, names["bucket"]).made_from(OLD.digest())


@pytest.mark.timeout(60)
def test_another_model_makes_it_again(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD)
    speech = run_one(names, sqs, s3, OLD, speech_model="Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    assert speech.calls == [OLD.text]


@pytest.mark.timeout(60)
def test_an_older_message_never_replaces_a_newer_submit(names, sqs, s3) -> None:
    # A late redelivery of the typo version after the fix was made: the fix stays.
    put_outputs(s3, names["bucket"], NEW, sent_at_ms=2**62)
    speech = run_one(names, sqs, s3, OLD)
    assert speech.calls == []
    assert stored(s3, names["bucket"]).made_from(NEW.digest())


class ManifestAlwaysNamesItsOwnAudio:
    """S3 client checking, after every PUT, that the manifest names audio of its request."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket, self.checked = s3, bucket, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        result = self.s3.put_object(**kwargs)
        manifest = stored(self.s3, self.bucket)
        job = Job.model_validate(manifest.request)
        assert audio_of(self.s3, self.bucket, manifest) == fake_audio(job)
        self.checked += 1
        return result


@pytest.mark.timeout(60)
def test_no_moment_where_the_manifest_names_the_wrong_audio(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD)
    checking = ManifestAlwaysNamesItsOwnAudio(s3, names["bucket"])
    run_one(names, sqs, checking, NEW)
    assert checking.checked == 2  # the new audio, then the manifest
    assert stored(s3, names["bucket"]).made_from(NEW.digest())


class PeerSwapsFirst:
    """S3 client: right after our audio PUT, a peer swaps in its own edit of the job."""

    def __init__(self, s3: Any, bucket: str, peer: Job) -> None:
        self.s3, self.bucket, self.peer, self.done = s3, bucket, peer, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        result = self.s3.put_object(**kwargs)
        if not self.done and not kwargs["Key"].endswith(".json"):
            self.done = True
            put_outputs(self.s3, self.bucket, self.peer, sent_at_ms=2**62)
        return result


@pytest.mark.timeout(60)
def test_the_swap_is_conditional_on_the_manifest_it_judged(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], OLD)
    newest = Job(id="c3", text="Chapter three, rewritten by a later submit.")
    run_one(names, sqs, PeerSwapsFirst(s3, names["bucket"], newest), NEW)
    # Our If-Match on OLD's ETag failed; read again, the peer's newer submit stands.
    assert stored(s3, names["bucket"]).made_from(newest.digest())
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)


class ManifestLands:
    """S3 client: the manifest PUT lands and its answer is lost. Then botocore's retry of it
    gets S3's 412 (`retry_answers`), or every try answers 500, as in a brownout."""

    def __init__(self, s3: Any, retry_answers: bool) -> None:
        self.s3, self.retry_answers = s3, retry_answers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        result = self.s3.put_object(**kwargs)
        if not kwargs["Key"].endswith(".json"):
            return result
        if self.retry_answers:
            return self.s3.put_object(**kwargs)  # the retry: raises PreconditionFailed
        error = {"Error": {"Code": "InternalError", "Message": "landed, answer lost"}}
        raise ClientError(error, "PutObject")


@pytest.mark.timeout(60)
def test_a_412_on_a_retried_put_of_our_own_manifest_is_our_success(names, sqs, s3) -> None:
    metrics = io.StringIO()
    run_one(names, sqs, ManifestLands(s3, retry_answers=True), NEW, metrics=Metrics(metrics))
    assert completed(metrics) == 1
    assert stored(s3, names["bucket"]).worker == "w"
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)


@pytest.mark.timeout(60)
def test_a_landed_write_on_the_last_receive_is_done_not_dead_lettered(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=1, visibility_timeout=30)
    metrics = io.StringIO()
    run_one(names, sqs, ManifestLands(s3, retry_answers=False), NEW, metrics=Metrics(metrics))
    assert completed(metrics) == 1  # this worker's write, counted once
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
    assert not s3.list_objects_v2(Bucket=names["bucket"], Prefix="failures/").get("Contents")
    assert stored(s3, names["bucket"]).worker == "w"


class RejectedWhileAPeerFinishes(FakeSpeech):
    """Speech that rejects the job, after a peer has stored the same request's outputs."""

    def __init__(self, s3: Any, bucket: str) -> None:
        super().__init__(0.05)
        self.s3, self.bucket = s3, bucket

    def synthesize(self, job: Job) -> Any:
        from worker.speech import PermanentSpeechError

        put_outputs(self.s3, self.bucket, job)
        raise PermanentSpeechError("HTTP 400: a bad day")


@pytest.mark.timeout(60)
def test_a_manifest_found_before_recording_a_failure_means_done(names, sqs, s3) -> None:
    metrics = io.StringIO()
    speech = RejectedWhileAPeerFinishes(s3, names["bucket"])
    run_one(names, sqs, s3, NEW, speech=speech, metrics=Metrics(metrics))
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
    assert not s3.list_objects_v2(Bucket=names["bucket"], Prefix="failures/").get("Contents")
    assert completed(metrics) == 0  # the peer's completion, not this worker's
