"""The job message contract (DESIGN §3.2) and the output keys (§3.3)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from tests.lib.procs import ROOT
from worker.jobs import (
    FailureRecord,
    InvalidJob,
    Job,
    Manifest,
    audio_key,
    derive_id,
    failure_key,
    manifest_key,
    parse_job,
)


def test_only_text_is_required_and_defaults_apply() -> None:
    job = parse_job('{"text": "Hello."}')
    assert job.request() == {
        "text": "Hello.",
        "voice": "Vivian",
        "language": "English",
        "instructions": "",
        "format": "wav",
        "speed": 1.0,
    }


def test_derived_id_is_the_sha256_of_the_canonical_request() -> None:
    job = parse_job('{"text": "Hello.", "voice": "Ryan"}')
    same = parse_job('{"voice": "Ryan", "text": "Hello."}')  # key order does not matter
    canonical = json.dumps(job.request(), sort_keys=True, separators=(",", ":"))
    assert job.job_id == same.job_id == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert derive_id(job.request()) == job.job_id
    assert parse_job('{"text": "Hello.", "voice": "Eric"}').job_id != job.job_id
    assert json.loads(job.body())["id"] == job.job_id  # the body makes the id explicit


@pytest.mark.parametrize(
    ("body", "reason", "job_id"),
    [
        ("[1, 2]", "body must be a JSON object, got list", None),
        ("{", "body is not JSON", None),
        ('{"id": "a b", "text": "x"}', "id: String should match pattern", None),
        ('{"id": "' + "a" * 129 + '", "text": "x"}', "id: String should match pattern", None),
        ('{"id": "ok", "text": "   "}', "text: Value error, text is blank", "ok"),
        ('{"id": "ok", "text": "x", "format": "ogg"}', "format: Input should be", "ok"),
        ('{"id": "ok", "text": "x", "speed": 5}', "speed: Input should be less", "ok"),
        ('{"id": "ok", "text": "x", "extra": 1}', "extra: unknown field", "ok"),
        ('{"id": "ok", "text": "' + "x" * 11 + '"}', "more than the limit of 10", "ok"),
    ],
)
def test_invalid_jobs_say_why(body: str, reason: str, job_id: str | None) -> None:
    with pytest.raises(InvalidJob) as error:
        parse_job(body, max_text_chars=10)
    assert reason in error.value.reason
    assert error.value.job_id == job_id


def test_every_format_is_accepted() -> None:
    assert [Job(text="x", format=f).format for f in ("wav", "flac", "mp3", "pcm")] == [
        "wav",
        "flac",
        "mp3",
        "pcm",
    ]


def test_output_keys() -> None:
    assert audio_key("a1", "wav") == "outputs/a1.wav"
    assert manifest_key("a1") == "outputs/a1.json"
    assert failure_key("a1") == "failures/a1.json"
    assert audio_key("a1", "mp3", "team/") == "team/outputs/a1.mp3"


@pytest.mark.processes
def test_jobs_module_does_not_import_boto3() -> None:
    code = "import sys, worker.jobs; print('boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


# As worker/loop.py wrote them before the models: existing outputs must parse, and a new
# worker must write the same bytes (field order, floats, non-ASCII kept).
MANIFEST_BEFORE = {
    "id": "j1",
    "request": {"text": "Grüße", "voice": "Vivian", "language": "German", "instructions": "",
                "format": "wav", "speed": 1.0},
    "audio_key": "team/outputs/j1.wav",
    "duration_s": 2.5,
    "sample_rate": 24000,
    "model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
    "voice": "Vivian",
    "synth_s": 1.234,
    "queue_wait_s": 0.5,
    "attempts": 2,
    "pieces": 1,
    "worker": "w-1",
    "finished_at": "2026-01-01T00:00:00.123+00:00",
}  # fmt: skip
FAILURE_BEFORE = {
    "id": "j2",
    "error": "invalid job",
    "detail": "text: Field required",
    "attempts": 1,
    "message_id": "m-2",
    "worker": "w-1",
    "failed_at": "2026-01-01T00:00:00.123+00:00",
}


@pytest.mark.parametrize(
    ("model", "before"),
    [
        (Manifest, MANIFEST_BEFORE),
        (Manifest, {**MANIFEST_BEFORE, "duration_s": None, "sample_rate": None}),
        (FailureRecord, FAILURE_BEFORE),
    ],
)
def test_records_keep_the_json_workers_already_wrote(
    model: type[Manifest | FailureRecord], before: dict
) -> None:
    body = json.dumps(before, ensure_ascii=False).encode()
    assert model.model_validate_json(body).to_json() == body


def test_records_ignore_a_field_a_newer_worker_adds() -> None:
    body = json.dumps({**FAILURE_BEFORE, "trace_id": "t"})
    assert FailureRecord.model_validate_json(body).reason() == "invalid job: text: Field required"
