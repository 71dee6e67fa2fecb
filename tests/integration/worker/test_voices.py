"""Library voices as the worker reads them (worker/voices.py) from the emulator (moto in
process), written by the client's own `add_voice`: the request fields of each task type, one
read per voice for the task's life, and untrusted records refused with the reason; then a whole
job through the speech client, whose requests and Speech carry the voice and its consent."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws

from tests.lib.voices import ADDED_BY, CONSENT, clip
from tts_fleet.client.voices import add_voice, read_reference
from worker.jobs import Job, voice_audio_key, voice_record_key
from worker.speech import PCM_RATE, PermanentSpeechError, SpeechClient
from worker.voices import VoiceError, VoiceLibrary

BUCKET = "voices-bucket"


@pytest.fixture
def s3(in_process_aws: None, tmp_path: Path) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        (tmp_path / "ref.wav").write_bytes(clip())
        reference = read_reference(tmp_path / "ref.wav")
        add_voice(client, BUCKET, "", "narrator", added_by=ADDED_BY, reference=reference,
                  ref_text="Hello there.", consent=CONSENT)  # fmt: skip
        add_voice(client, BUCKET, "", "elder", added_by=ADDED_BY, description="An old man.")
        yield client


def test_a_clone_voice_is_its_reference_and_transcript_read_once(s3: Any) -> None:
    library = VoiceLibrary(s3, BUCKET, "", "Base")
    resolved = library.resolve("narrator")
    assert set(resolved.fields) == {"ref_audio", "ref_text"}
    data = resolved.fields["ref_audio"].removeprefix("data:audio/wav;base64,")
    assert base64.b64decode(data) == clip()
    assert resolved.fields["ref_text"] == "Hello there."
    assert (resolved.use.consent, resolved.use.added_by) == (CONSENT, ADDED_BY)
    # Cached for the task's life: gone from the bucket, still the same voice here.
    s3.delete_object(Bucket=BUCKET, Key=voice_audio_key("narrator"))
    s3.delete_object(Bucket=BUCKET, Key=voice_record_key("narrator"))
    assert library.resolve("narrator") == resolved
    with pytest.raises(VoiceError, match="not in the library") as raised:
        VoiceLibrary(s3, BUCKET, "", "Base").resolve("narrator")
    assert not raised.value.transient


def test_a_design_voice_is_its_description_before_the_jobs_instructions(s3: Any) -> None:
    library = VoiceLibrary(s3, BUCKET, "", "VoiceDesign")
    assert library.resolve("elder").fields == {"instructions": "An old man."}
    assert library.resolve("elder", "Slowly.").fields == {"instructions": "An old man. Slowly."}
    with pytest.raises(VoiceError, match="more than the server's 500"):
        library.resolve("elder", "x" * 490)


@pytest.mark.parametrize(
    ("task_type", "voice", "change", "reason"),
    [
        ("Base", "elder", None, "'elder' is a design voice; this stack \\(Base\\) takes clone"),
        ("VoiceDesign", "narrator", None, "is a clone voice; this stack \\(VoiceDesign\\)"),
        ("Base", "Vivian", None, "not in the library"),
        ("Base", "../x", None, "no library voice name"),
        ("Base", "narrator", ("voices/narrator.wav", b"RIFF other"), "does not match"),
        ("Base", "narrator", ("voices/narrator.json", b"{}"), "bad record"),
        ("Base", "narrator", ("voices/narrator.json", b"x" * 70_000), "larger than 65536"),
        (
            "Base", "narrator",
            ("voices/narrator.json", json.dumps({"name": "elder"}).encode()), "bad record",
        ),
    ],
)  # fmt: skip
def test_an_unusable_voice_is_refused_with_the_reason(
    s3: Any, task_type: str, voice: str, change: tuple[str, bytes] | None, reason: str
) -> None:
    if change is not None:
        s3.put_object(Bucket=BUCKET, Key=change[0], Body=change[1])
    with pytest.raises(VoiceError, match=reason) as raised:
        VoiceLibrary(s3, BUCKET, "", task_type).resolve(voice)
    assert not raised.value.transient


def test_a_job_in_a_clone_voice_sends_it_and_reports_its_consent(s3: Any) -> None:
    bodies: list[dict[str, Any]] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        seconds = 0.07 * len(body["input"])  # as long as speech of it lasts
        return httpx.Response(200, content=b"\x10\x00" * int(PCM_RATE * seconds))

    library = VoiceLibrary(s3, BUCKET, "", "Base")
    client = SpeechClient(
        "http://tts", task_type="Base", transport=httpx.MockTransport(server), voices=library
    )
    text = "One sentence here. " * 80  # two pieces at a 1,000-character budget
    speech = client.synthesize(Job(id="ch1", text=text, voice="narrator", seed=42))
    assert len(bodies) == 2 and speech.voice is not None
    assert (speech.voice.name, speech.voice.consent, speech.voice.added_by) == (
        "narrator", CONSENT, ADDED_BY,
    )  # fmt: skip
    assert {body["ref_text"] for body in bodies} == {"Hello there."}
    assert all("voice" not in body and body["task_type"] == "Base" for body in bodies)
    assert {body["seed"] for body in bodies} == {42}  # one voice across the pieces
    with pytest.raises(PermanentSpeechError, match="'stranger' is not in the library"):
        client.synthesize(Job(text="Hi.", voice="stranger"))


@pytest.mark.timeout(60)
def test_the_manifest_of_a_library_voices_job_names_its_consent(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    # A `Worker` in a thread of the test process on the emulator (moto over HTTP).
    from tests.lib.fake_worker import make_worker, run_until
    from tests.lib.procs import make_queues_and_bucket, visible_and_in_flight
    from worker.jobs import Manifest, manifest_key

    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=30)
    add_voice(s3, names["bucket"], "", "elder", added_by=ADDED_BY, description="An old man.",
              consent=CONSENT)  # fmt: skip

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"\x10\x00" * PCM_RATE)

    library = VoiceLibrary(s3, names["bucket"], "", "VoiceDesign")
    speech = SpeechClient("http://tts", task_type="VoiceDesign", voices=library,
                          transport=httpx.MockTransport(server))  # fmt: skip
    job = Job(id="designed-1", text="Good evening.", voice="elder")
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    run_until(
        make_worker(names, sqs, s3, speech, qa_mode="off"),
        lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0),
    )
    body = s3.get_object(Bucket=names["bucket"], Key=manifest_key("designed-1"))["Body"].read()
    manifest = Manifest.model_validate_json(body)
    assert manifest.voice_library is not None
    assert (manifest.voice_library.name, manifest.voice_library.kind) == ("elder", "design")
    assert (manifest.voice_library.consent, manifest.voice_library.added_by) == (
        CONSENT, ADDED_BY,
    )  # fmt: skip
