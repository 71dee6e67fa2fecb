"""`submit --deadline/--within` against the emulator: the batch record before the messages,
each message marked, the receipt naming the batch; `status` and `wait` showing it."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from tests.lib.client_stack import Stack, depth, run, run_json
from tts_fleet.client.batches import read_open_batches
from tts_fleet.config import outputs
from tts_fleet.scaling.batches import BATCH_ATTRIBUTE, BATCHES_PREFIX

BATCH_KEYS = {"batch_id", "jobs", "done", "remaining", "submitted_at", "deadline",
              "predicted_finish", "on_track"}  # fmt: skip


def jobs_file(path: Path, count: int) -> str:
    path.write_text("".join(json.dumps({"text": f"Line {n}."}) + "\n" for n in range(count)))
    return str(path)


def records(stack: Stack) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket, Prefix=BATCHES_PREFIX)
    return [item["Key"] for item in listed.get("Contents", [])]


def test_submit_within_records_the_batch_and_marks_every_message(
    stack: Stack, tmp_path: Path
) -> None:
    code, receipt = run_json("submit", jobs_file(tmp_path / "jobs.jsonl", 12), "--within", "6h")
    assert code == 0 and receipt["sent"] == 12
    batch_id = receipt["batch"]["batch_id"]
    [record] = read_open_batches(boto3.client("s3"), stack.bucket).records
    assert record.batch_id == batch_id and record.digests == receipt["digests"]
    assert record.deadline - record.submitted_at == 6 * 3600
    assert receipt["batch"]["deadline"].endswith("Z")
    sqs, marked = boto3.client("sqs"), []
    while answer := sqs.receive_message(
        QueueUrl=stack.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    ).get("Messages"):
        marked += [m["MessageAttributes"][BATCH_ATTRIBUTE]["StringValue"] for m in answer]
    assert marked == [batch_id] * 12
    # Before the controller has planned for it, status shows the batch with no forecast.
    code, status = run_json("status")
    [shown] = status["batches"]
    assert set(shown) == BATCH_KEYS and (shown["batch_id"], shown["jobs"]) == (batch_id, 12)
    assert (shown["done"], shown["on_track"]) == (None, None)
    text = run("status").stdout
    assert batch_id in text and "not planned yet" in text


def test_wait_on_a_receipt_shows_its_batch(stack: Stack, tmp_path: Path) -> None:
    source = jobs_file(tmp_path / "jobs.jsonl", 2)
    receipt = tmp_path / "receipt.json"
    receipt.write_text(run("submit", source, "--within", "1h", "--json").stdout)
    batch_id = json.loads(receipt.read_text())["batch"]["batch_id"]
    waited = run("wait", str(receipt), "--timeout", "0", "--json")
    assert waited.exit_code == 4
    assert [b["batch_id"] for b in json.loads(waited.stdout)["batches"]] == [batch_id]
    text = run("wait", str(receipt), "--timeout", "0").stdout
    assert f"batch {batch_id}: - of 2 done" in text
    # A wait on the job file itself (no receipt, so no batch named) reads no batches.
    assert json.loads(run("wait", source, "--timeout", "0", "--json").stdout)["batches"] is None


def test_a_past_or_malformed_deadline_sends_nothing(stack: Stack, tmp_path: Path) -> None:
    source = jobs_file(tmp_path / "jobs.jsonl", 3)
    for flags, problem in [
        (["--deadline", "2020-01-01T00:00Z"], "has already passed"),
        (["--deadline", "2030-01-01 06:00"], "give a UTC time"),
        (["--within", "soon"], "give a duration"),
        (["--within", "1h", "--deadline", "2030-01-01T00:00Z"], "not both"),
    ]:
        result = run("submit", source, *flags)
        assert result.exit_code == 2 and problem in result.stderr
    assert depth(stack.queue_url) == 0 and records(stack) == []


def test_the_stack_default_gives_a_batch_a_deadline_and_zero_gives_none(
    stack: Stack, tmp_path: Path
) -> None:
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps({outputs.DEADLINE_MINUTES: 30}))
    source = jobs_file(tmp_path / "jobs.jsonl", 2)
    _, receipt = run_json("submit", source, "--outputs-file", str(saved))
    [record] = read_open_batches(boto3.client("s3"), stack.bucket).records
    assert receipt["batch"]["batch_id"] == record.batch_id
    assert record.deadline - record.submitted_at == 1800
    saved.write_text(json.dumps({outputs.DEADLINE_MINUTES: 0}))
    _, plain = run_json("submit", source, "--outputs-file", str(saved))
    assert plain["batch"] is None and len(records(stack)) == 1


def test_no_message_is_sent_when_the_record_cannot_be_written(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTS_FLEET_BUCKET", "no-such-bucket")
    result = run("submit", jobs_file(tmp_path / "jobs.jsonl", 2), "--within", "1h")
    assert result.exit_code != 0 and "NoSuchBucket" in result.stderr
    assert depth(stack.queue_url) == 0
