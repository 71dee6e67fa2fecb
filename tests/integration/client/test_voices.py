"""`tts-fleet voices add|list|rm|preview` and `submit`'s voice check against the emulator (moto
over HTTP): what lands in the bucket, what reads it back, and what is refused before anything
is written or sent."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import soundfile  # type: ignore[import-untyped]
from click.testing import CliRunner

from tests.lib.fake_worker import put_outputs
from tts_fleet.cli.main import cli
from worker.jobs import VoiceRecord, parse_job

BUCKET = "tts-voices"


@pytest.fixture
def aws(aws_env: dict[str, str]) -> tuple[Any, Any, str]:
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    s3.create_bucket(Bucket=BUCKET)
    queue_url = sqs.create_queue(QueueName="voices-jobs")["QueueUrl"]
    return s3, sqs, queue_url


def wav(path: Path, seconds: float, rate: int = 16_000, fmt: str = "WAV") -> Path:
    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(path, 0.3 * np.sin(2 * np.pi * 180 * t), rate, format=fmt)
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["voices", *args, "--bucket", BUCKET], catch_exceptions=False)


def test_add_list_rm_round_trip(aws: tuple[Any, Any, str], tmp_path: Path) -> None:
    s3 = aws[0]
    clip = wav(tmp_path / "ref.wav", 2.5)
    added = run(
        "add", "narrator", "--audio", str(clip), "--text", "Hello there.", "--consent",
        "Recorded by Ann Lee, who agreed to its use for this book.", "--json",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    record = VoiceRecord.model_validate_json(
        s3.get_object(Bucket=BUCKET, Key="voices/narrator.json")["Body"].read()
    )
    audio = s3.get_object(Bucket=BUCKET, Key="voices/narrator.wav")["Body"].read()
    assert audio == clip.read_bytes()
    assert (record.kind, record.ref_text, record.audio_key) == (
        "clone", "Hello there.", "voices/narrator.wav",
    )  # fmt: skip
    assert record.sha256 == hashlib.sha256(audio).hexdigest()
    assert (record.duration_s, record.sample_rate) == (2.5, 16_000)
    assert record.consent.startswith("Recorded by Ann Lee")
    assert record.added_by == boto3.client("sts").get_caller_identity()["Arn"]
    assert json.loads(added.output) == record.model_dump()
    designed = run("add", "elder", "--description", "An old man, slow and warm.")
    assert designed.exit_code == 0, designed.output
    listed = json.loads(run("list", "--json").output)
    assert [(v["name"], v["kind"]) for v in listed["voices"]] == [
        ("elder", "design"), ("narrator", "clone"),
    ]  # fmt: skip
    assert listed["unreadable"] == []
    again = run("add", "narrator", "--description", "Another.")
    assert again.exit_code == 2 and "already in the library" in again.output
    removed = run("rm", "narrator")
    assert removed.exit_code == 0 and removed.output == "removed clone voice narrator\n"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys == ["voices/elder.json"]
    assert run("rm", "narrator").exit_code == 2


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["Vivian", "--description", "x"], "is a speaker of the CustomVoice checkpoint"),
        (["a.b", "--description", "x"], "voice name 'a.b'"),
        (["v", "--description", "x" * 501], "--description: 501 characters"),
        (["v"], "either a reference clip"),
        (["v", "--audio", "{long}", "--text", "Hi."], "31.00 s of audio"),
        (["v", "--audio", "{short}", "--text", "Hi."], "0.50 s of audio"),
        (["v", "--audio", "{flac}", "--text", "Hi."], "a FLAC file"),
        (["v", "--audio", "{junk}", "--text", "Hi."], "not readable audio"),
        (["v", "--audio", "{ok}"], "--text: the transcript"),
    ],
)
def test_a_bad_voice_is_refused_before_anything_is_written(
    aws: tuple[Any, Any, str], tmp_path: Path, args: list[str], reason: str
) -> None:
    files = {
        "{long}": wav(tmp_path / "long.wav", 31.0, rate=8_000),
        "{short}": wav(tmp_path / "short.wav", 0.5),
        "{flac}": wav(tmp_path / "a.flac", 2.0, fmt="FLAC"),
        "{ok}": wav(tmp_path / "ok.wav", 2.0),
    }
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really")
    files["{junk}"] = tmp_path / "junk.wav"
    result = run("add", *[str(files.get(a, a)) for a in args])
    assert result.exit_code == 2 and reason in result.output, result.output
    assert "Contents" not in aws[0].list_objects_v2(Bucket=BUCKET)


def test_preview_sends_one_job_in_the_voice_and_writes_its_audio(
    aws: tuple[Any, Any, str], tmp_path: Path
) -> None:
    s3, sqs, queue_url = aws
    assert run("add", "elder", "--description", "An old man.").exit_code == 0
    seen: list[str] = []

    def worker() -> None:  # a stand-in worker: takes the one job, leaves its outputs
        for _ in range(100):
            answer = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)
            for message in answer.get("Messages", []):
                job = parse_job(message["Body"])
                seen.append(job.voice)
                put_outputs(s3, BUCKET, job)
                return

    thread = threading.Thread(target=worker)
    thread.start()
    out = tmp_path / "elder.wav"
    result = CliRunner().invoke(
        cli,
        ["voices", "preview", "elder", "Good evening.", "--out", str(out), "--bucket", BUCKET,
         "--queue-url", queue_url, "--interval", "0.2", "--timeout", "60", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    thread.join()
    assert result.exit_code == 0, result.output
    assert seen == ["elder"]
    report = json.loads(result.output)
    assert report["voice"] == "elder" and report["job_id"].startswith("voice-preview-elder-")
    assert out.read_bytes()  # the audio the manifest names
    missing = CliRunner().invoke(
        cli, ["voices", "preview", "nobody", "--bucket", BUCKET, "--queue-url", queue_url]
    )
    assert missing.exit_code == 2 and "no voice 'nobody'" in missing.output
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)


def test_submit_rejects_a_voice_neither_a_speaker_nor_in_the_library(
    aws: tuple[Any, Any, str], tmp_path: Path
) -> None:
    _, sqs, queue_url = aws
    assert run("add", "elder", "--description", "An old man.").exit_code == 0
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": "a", "text": "Hi.", "voice": "elder"},
        {"id": "b", "text": "Hi.", "voice": "Ryan"},
        {"id": "c", "text": "Hi.", "voice": "stranger"},
    ]
    jobs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["submit", str(jobs), "--bucket", BUCKET, "--queue-url", queue_url]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2
    invalid = [line for line in refused.output.splitlines() if line.startswith("invalid:")]
    assert len(invalid) == 1 and ":3: voice:" in invalid[0] and "'stranger'" in invalid[0]
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)
    sent = CliRunner().invoke(cli, [*args, "--skip-invalid", "--json"])
    assert json.loads(sent.stdout)["sent"] == 2


def test_an_unreadable_record_is_named_by_list(aws: tuple[Any, Any, str]) -> None:
    s3 = aws[0]
    s3.put_object(Bucket=BUCKET, Key="voices/bad.json", Body=b'{"name": "bad"}')
    s3.put_object(Bucket=BUCKET, Key="voices/huge.json", Body=io.BytesIO(b" " * 70_000))
    listed = json.loads(run("list", "--json").stdout)
    assert listed["voices"] == []
    assert len(listed["unreadable"]) == 2


def test_a_library_that_cannot_be_listed_is_named_when_a_voice_is_refused(
    aws: tuple[Any, Any, str], tmp_path: Path
) -> None:
    queue_url = aws[2]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"id": "a", "text": "Hi.", "voice": "elder"}) + "\n")
    args = ["submit", str(jobs), "--bucket", "no-such-bucket", "--queue-url", queue_url]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2
    assert "warning: the voice library cannot be listed: " in refused.output
    assert "NoSuchBucket" in refused.output and "unknown voice 'elder'" in refused.output
