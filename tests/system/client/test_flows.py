"""End to end with real processes: `python -m worker` and the speech server (tests/lib/procs.py)
against the emulator, driven by the real commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.lib.client_stack import depth, queued_bodies, run, run_json
from tests.lib.procs import (
    ROOT,
    Processes,
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    version_counts,
    wait_for,
)

pytestmark = pytest.mark.processes

FAST_WORKER = {"CONCURRENCY": "16", "VISIBILITY_TIMEOUT": "30", "HEARTBEAT_SECONDS": "10"}
# Enough that three workers race over both copies of each id; batching a file of 1,000 lines
# into SQS is test_submit's job, not this one's.
TWICE_JOBS = 100


@pytest.fixture
def names(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Queues and a versioned bucket (each PUT is a version), named in the CLI's env vars."""
    created = make_queues_and_bucket(boto3.client("sqs"), boto3.client("s3"), visibility_timeout=30)
    monkeypatch.setenv("TTS_FLEET_QUEUE_URL", created["queue_url"])
    monkeypatch.setenv("TTS_FLEET_BUCKET", created["bucket"])
    monkeypatch.delenv("TTS_FLEET_DLQ_URL", raising=False)
    yield created


def jobs_file(path: Path, count: int, prefix: str = "j", **fields: str) -> Path:
    lines = (
        json.dumps({"id": f"{prefix}{n:04d}", "text": f"Line {n}.", **fields}) for n in range(count)
    )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.timeout(400)
def test_the_same_file_twice_is_n_outputs_not_2n_syntheses(
    aws_env: dict[str, str], names: dict[str, str], tmp_path: Path
) -> None:
    source = jobs_file(tmp_path / "jobs.jsonl", TWICE_JOBS)
    code, first = run_json("submit", str(source))
    code_again, second = run_json("submit", str(source))  # e.g. a re-run after a crash
    assert (code, code_again) == (0, 0) and first["ids"] == second["ids"]
    assert depth(names["queue_url"]) == 2 * TWICE_JOBS
    with start_speech_server("tone", latency_ms=0) as speech, Processes() as procs:
        for _ in range(3):
            procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **FAST_WORKER, **env_for(names)))
        code, waited = run_json("wait", str(source), "--timeout", "300", "--interval", "1")
        assert code == 0 and waited["done"] == TWICE_JOBS
        wait_for(lambda: depth(names["queue_url"]) == 0, 300, 1, "the duplicates deleted")
    puts = version_counts(boto3.client("s3"), names["bucket"], "outputs/")
    audio = {key: count for key, count in puts.items() if key.endswith(".wav")}
    assert len(audio) == TWICE_JOBS
    assert sum(audio.values()) == TWICE_JOBS  # one audio PUT per id: the copies were skipped


@pytest.mark.timeout(300)
def test_wait_on_good_and_poison_jobs_exits_1_and_lists_the_failed(
    aws_env: dict[str, str], names: dict[str, str], tmp_path: Path
) -> None:
    good = jobs_file(tmp_path / "good.jsonl", 6, "good")
    submitted = run("submit", str(good), "--json")
    assert submitted.exit_code == 0
    # `submit` refuses a voice the server rejects; another producer may send one anyway.
    poison = [{"id": f"poison{n:04d}", "text": "Hi.", "voice": "Nobody"} for n in range(2)]
    for body in poison:
        boto3.client("sqs").send_message(QueueUrl=names["queue_url"], MessageBody=json.dumps(body))
    summary = tmp_path / "submitted.json"
    ids = json.loads(submitted.stdout)["ids"] + [body["id"] for body in poison]
    summary.write_text(json.dumps({"ids": ids}))
    with start_speech_server("tone", latency_ms=0) as speech, Processes() as procs:
        procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
        waited = run("wait", str(summary), "--timeout", "240", "--interval", "0.5")
        code, as_json = run_json("wait", str(summary), "--timeout", "30", "--interval", "0.5")
    assert waited.exit_code == 1
    assert "6 of 8 done, 2 failed, 0 pending" in waited.stdout
    for job_id in ("poison0000", "poison0001"):
        assert f"failed: {job_id}: rejected by the speech server" in waited.stdout
    assert code == 1 and sorted(as_json["failed"]) == ["poison0000", "poison0001"]
    assert "Invalid voice 'nobody'" in as_json["failed"]["poison0000"]
    assert as_json["done"] == 6 and as_json["pending"] == [] and as_json["timed_out"] is False


@pytest.mark.timeout(400)
def test_redrive_after_a_speech_outage_completes_the_jobs(
    aws_env: dict[str, str], names: dict[str, str], tmp_path: Path
) -> None:
    source = jobs_file(tmp_path / "jobs.jsonl", 6, "outage")
    warmup = jobs_file(tmp_path / "warmup.jsonl", 1, "warmup")
    with Processes() as procs:
        speech = start_speech_server("tone", latency_ms=0)
        try:
            procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
            assert run("submit", str(warmup)).exit_code == 0
            assert run("wait", str(warmup), "--timeout", "120", "--interval", "0.5").exit_code == 0
        finally:
            speech.stop()  # the outage: every attempt now fails, until maxReceiveCount
        assert run("submit", str(source)).exit_code == 0
        wait_for(lambda: depth(names["dlq_url"]) == 6, 240, 1, "6 jobs dead-lettered")
        code, during = run_json("wait", str(source), "--timeout", "5", "--interval", "0.5")
        assert code == 1 and len(during["failed"]) == 6  # visible as failed, with the reason
        assert all("transient failures" in reason for reason in during["failed"].values())
        with start_speech_server("tone", port=speech.port, latency_ms=0):  # service restored
            code, redriven = run_json("dlq", "redrive")
            assert code == 0 and redriven["moved"] == 6
            assert redriven["method"] == "receive-send-delete"
            code, after = run_json("wait", str(source), "--timeout", "240", "--interval", "0.5")
    assert code == 0 and after["done"] == 6 and after["failed"] == {}
    assert depth(names["dlq_url"]) == 0


@pytest.mark.timeout(300)
def test_a_redrive_killed_midway_loses_nothing(
    aws_env: dict[str, str], names: dict[str, str]
) -> None:
    sqs = boto3.client("sqs")
    ids = [f"k{n:03d}" for n in range(300)]
    for start in range(0, len(ids), 10):
        entries = [{"Id": str(i), "MessageBody": json.dumps({"id": job_id, "text": "t"}),
                    "MessageAttributes": {"error": {"DataType": "String", "StringValue": "x"}}}
                   for i, job_id in enumerate(ids[start : start + 10])]  # fmt: skip
        sqs.send_message_batch(QueueUrl=names["dlq_url"], Entries=entries)
    env = {**aws_env, "TTS_FLEET_QUEUE_URL": names["queue_url"], "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tts_fleet", "dlq", "redrive", "--json"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: depth(names["queue_url"]) >= 40, 120, 0.05, "the redrive under way")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL  # killed mid-way, not finished
    in_queue = Counter(body["id"] for body in queued_bodies(names["queue_url"]))
    in_dlq = Counter(body["id"] for body in queued_bodies(names["dlq_url"]))  # incl. held ones
    assert set(in_queue) | set(in_dlq) == set(ids)  # nothing lost
    assert max(in_queue.values()) == 1 and max(in_dlq.values()) == 1  # no copy within a queue
    assert 40 <= len(in_queue) < 300
    # At-least-once: only the one batch that was sent but not yet deleted when the kill came
    # can be in both queues; the worker's manifest check makes that copy harmless.
    assert len(set(in_queue) & set(in_dlq)) <= 10
