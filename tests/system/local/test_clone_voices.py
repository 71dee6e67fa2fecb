"""Issue 25 through real processes: a Base stack's worker (`python -m worker`, its start-up
probe included) and the speech stand-in serving the Base checkpoint, with two clone voices of
the library written by the client. Each job is spoken in its own voice's stand-in (the same
text in two voices comes out different), its manifest names the voice and its consent, and a
job naming no voice of the library is a failure after one receive."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
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
from tests.lib.voices import ADDED_BY, CONSENT, clip
from tts_fleet.client.voices import add_voice, read_reference
from tts_fleet.config.models import checkpoint_of
from tts_fleet.local.speech_server import stand_in_speaker
from worker.jobs import FailureRecord, Job, Manifest, failure_key, manifest_key

pytestmark = pytest.mark.processes
BASE = checkpoint_of("Base")


def two_clips_of_two_voices() -> tuple[bytes, bytes]:
    """Two reference clips whose stand-in voices differ (so their audio can)."""
    clips = [clip(hz=hz) for hz in range(150, 400, 10)]
    url = {c: "data:audio/wav;base64," + base64.b64encode(c).decode() for c in clips}
    first = clips[0]
    second = next(c for c in clips if stand_in_speaker(url[c]) != stand_in_speaker(url[first]))
    return first, second


def read(s3: Any, bucket: str, key: str) -> bytes:
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


@pytest.mark.timeout(90)
def test_clone_jobs_speak_in_their_voices_and_name_their_consent(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes, tmp_path: Path
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3)
    bucket = names["bucket"]
    for name, audio in zip(("ann", "bob"), two_clips_of_two_voices(), strict=True):
        (tmp_path / f"{name}.wav").write_bytes(audio)
        reference = read_reference(tmp_path / f"{name}.wav")
        add_voice(s3, bucket, "", name, added_by=ADDED_BY, reference=reference,
                  ref_text="A tone for a voice.", consent=CONSENT)  # fmt: skip
    text = "The same sentence, said by two voices."
    jobs = [Job(id="c-ann", text=text, voice="ann"), Job(id="c-bob", text=text, voice="bob"),
            Job(id="c-none", text=text, voice="nobody")]  # fmt: skip
    for job in jobs:
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    with start_speech_server("tone", extra_args=("--model", BASE)) as speech:
        procs.add(start_worker(aws_env, SPEECH_URL=speech.url, SPEECH_MODEL=BASE,
                               SPEECH_TASK_TYPE="Base", **env_for(names)))  # fmt: skip
        queue = names["queue_url"]
        wait_for(lambda: visible_and_in_flight(sqs, queue) == (0, 0), 60, 0.3, "jobs settled")
    manifests = {
        j.job_id: Manifest.model_validate_json(read(s3, bucket, manifest_key(j.job_id)))
        for j in jobs[:2]
    }
    said = {i: read(s3, bucket, m.audio_key) for i, m in manifests.items()}
    assert hashlib.sha256(said["c-ann"]).digest() != hashlib.sha256(said["c-bob"]).digest()
    for job_id, voice in (("c-ann", "ann"), ("c-bob", "bob")):
        used = manifests[job_id].voice_library
        assert used is not None and used.name == voice
        assert (used.consent, used.added_by) == (CONSENT, ADDED_BY)
    failure = FailureRecord.model_validate_json(read(s3, bucket, failure_key("c-none")))
    assert failure.attempts == 1 and "'nobody' is not in the library" in failure.detail
