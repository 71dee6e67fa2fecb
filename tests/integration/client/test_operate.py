"""status, wait, results and dlq list|redrive against the emulator (outputs written directly,
as a worker would, so these run in seconds; tests/system/client/test_flows.py uses real workers)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.lib.client_stack import Stack, depth, finish, queued_bodies, run, run_json
from tts_fleet.client.dlq import redrive
from tts_fleet.exit_codes import ExitCode
from worker.jobs import (
    DLQ_ERROR_ATTRIBUTE,
    FailureRecord,
    Job,
    audio_key,
    failure_key,
)

STATUS_KEYS = {"at", "queue_url", "visible", "in_flight", "delayed", "outstanding", "dlq_url",
               "dlq_depth", "oldest_age_s", "ecs", "batches"}  # fmt: skip
WAIT_KEYS = {"total", "done", "failed", "pending", "timed_out", "elapsed_s", "untrusted",
             "checks_failed", "batches"}  # fmt: skip
RESULTS_KEYS = {"dir", "downloaded", "skipped", "failed", "missing", "bytes", "untrusted",
                "qa", "quality_failed", "checks_failed"}  # fmt: skip
DLQ_LIST_KEYS = {"dlq_url", "count", "messages"}
DEAD_LETTER_KEYS = {"message_id", "job_id", "error", "receive_count", "sent_at", "body",
                    "failure"}  # fmt: skip
REDRIVE_KEYS = {"dlq_url", "queue_url", "method", "moved", "skipped", "arrived_later", "failed",
                "duplicated", "fallback_reason", "task_handle"}  # fmt: skip


def fail(
    stack: Stack, job_id: str, error: str = "rejected by the speech server", text: str = "t"
) -> None:
    record = FailureRecord(
        id=job_id, error=error, detail="Unknown voice 'Nobody'", attempts=1, message_id="m",
        worker="w", failed_at="2026-01-01T00:00:00Z",
        request_digest=Job(id=job_id, text=text).digest(),
    )  # fmt: skip
    boto3.client("s3").put_object(
        Bucket=stack.bucket, Key=failure_key(job_id), Body=record.to_json()
    )


def dead_letter(stack: Stack, job_id: str, error: str | None) -> None:
    attributes = (
        {DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": error}} if error else {}
    )
    attributes["origin"] = {"DataType": "String", "StringValue": "test"}
    boto3.client("sqs").send_message(
        QueueUrl=stack.dlq_url,
        MessageBody=json.dumps({"id": job_id, "text": "t"}),
        MessageAttributes=attributes,
    )


def test_status_counts_visible_in_flight_delayed_and_dlq(stack: Stack) -> None:
    sqs = boto3.client("sqs")
    for n in range(4):
        sqs.send_message(QueueUrl=stack.queue_url, MessageBody=f'{{"text": "{n}"}}')
    sqs.send_message(QueueUrl=stack.queue_url, MessageBody='{"text": "later"}', DelaySeconds=600)
    sqs.receive_message(QueueUrl=stack.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=600)
    dead_letter(stack, "d1", "boom")
    code, snapshot = run_json("status")
    assert code == 0 and set(snapshot) == STATUS_KEYS
    counts = {key: snapshot[key] for key in ("visible", "in_flight", "delayed", "outstanding")}
    assert counts == {"visible": 3, "in_flight": 1, "delayed": 1, "outstanding": 4}
    assert snapshot["dlq_url"] == stack.dlq_url and snapshot["dlq_depth"] == 1
    assert snapshot["oldest_age_s"] is None  # the emulator publishes no SQS metrics
    assert snapshot["ecs"] is None
    text = run("status").stdout
    assert "in flight" in text and "DLQ" in text and " - " in text  # '-' for unknown age


def test_status_shows_the_ecs_service_and_watch_refreshes(stack: Stack) -> None:
    ecs = boto3.client("ecs")
    ecs.create_cluster(clusterName="tts")
    ecs.register_task_definition(
        family="worker", containerDefinitions=[{"name": "w", "image": "w", "memory": 512}]
    )
    ecs.create_service(cluster="tts", serviceName="workers", taskDefinition="worker",
                       desiredCount=2)  # fmt: skip
    result = run("status", "--cluster", "tts", "--service", "workers", "--watch", "0.1",
                 "--count", "2", "--json")  # fmt: skip
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and len(lines) == 2
    assert lines[0]["ecs"]["desired"] == 2 and isinstance(lines[0]["ecs"]["running"], int)


def test_wait_exits_0_when_all_done_1_when_some_failed_4_on_timeout(
    stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text("".join(json.dumps({"id": f"w{n}", "text": "t"}) + "\n" for n in range(4)))
    for job_id in ("w0", "w1"):
        finish(stack, job_id)
    fail(stack, "w2")
    code, timed_out = run_json("wait", str(source), "--timeout", "0.5", "--interval", "0.1")
    assert code == ExitCode.TIMED_OUT and int(ExitCode.TIMED_OUT) == 4
    assert set(timed_out) == WAIT_KEYS
    assert timed_out["pending"] == ["w3"] and timed_out["timed_out"] is True
    fail(stack, "w3")
    finish(stack, "w3")  # a redriven job that then succeeded: its manifest wins
    code, failed = run_json("wait", str(source), "--timeout", "30", "--interval", "0.1")
    assert code == 1 and failed["done"] == 3
    assert failed["failed"] == {"w2": "rejected by the speech server: Unknown voice 'Nobody'"}
    text = run("wait", str(source), "--interval", "0.1").stdout
    assert "failed: w2: rejected by the speech server" in text
    summary = tmp_path / "submitted.json"
    summary.write_text(json.dumps({"ids": ["w0", "w1", "w3"]}))
    code, done = run_json("wait", str(summary), "--interval", "0.1")
    assert code == 0 and done["done"] == 3 and done["failed"] == {} and done["pending"] == []


def jobs_file(path: Path, texts: dict[str, str]) -> str:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    return str(path)


def test_wait_and_results_never_report_an_edited_jobs_old_audio(
    stack: Stack, tmp_path: Path
) -> None:
    finish(stack, "e1", b"old audio", text="Typo.")
    fail(stack, "e2", text="Bad voice.")  # the first version failed; the fix is pending
    edited = jobs_file(tmp_path / "edited.jsonl", {"e1": "Fixed.", "e2": "Good voice."})
    code, waited = run_json("wait", edited, "--timeout", "0.3", "--interval", "0.1")
    assert code == ExitCode.TIMED_OUT and waited["pending"] == ["e1", "e2"]
    assert waited["failed"] == {}
    code, got = run_json("results", edited, "--out", str(tmp_path / "a"))
    assert got["missing"] == ["e1", "e2"] and got["downloaded"] == 0
    # The re-made job's audio lands under a key of its own; the manifest names it.
    finish(stack, "e1", b"new audio", text="Fixed.", key=audio_key("e1", "wav", "", "ab" * 8))
    code, waited = run_json("wait", edited, "--timeout", "0.3", "--interval", "0.1")
    assert waited["done"] == 1 and waited["pending"] == ["e2"]
    code, got = run_json("results", edited, "--out", str(tmp_path / "b"))
    assert got["downloaded"] == 2 and got["missing"] == ["e2"]
    assert (tmp_path / "b" / "e1.wav").read_bytes() == b"new audio"  # its own name, new audio
    # The old input (or ids given by hand) still finds e1 done, with the audio there is.
    old = jobs_file(tmp_path / "old.jsonl", {"e1": "Typo."})
    assert run_json("wait", old, "--timeout", "0.3", "--interval", "0.1")[1]["pending"] == ["e1"]
    code, got = run_json("results", "--id", "e1", "--out", str(tmp_path / "c"))
    assert code == 0 and (tmp_path / "c" / "e1.wav").read_bytes() == b"new audio"


def test_results_download_in_parallel_and_skip_what_is_present(
    stack: Stack, tmp_path: Path
) -> None:
    for n in range(5):
        finish(stack, f"r{n}", audio=f"audio {n}".encode())
    boto3.client("s3").put_object(Bucket=stack.bucket, Key=audio_key("r9", "wav"), Body=b"half")
    out = tmp_path / "out"
    code, first = run_json("results", "--out", str(out), "--threads", "4")
    assert code == 0 and set(first) == RESULTS_KEYS
    assert first["downloaded"] == 10 and first["skipped"] == 0  # r9 has no manifest: not done
    assert (out / "r3.wav").read_bytes() == b"audio 3" and not (out / "r9.wav").exists()
    code, second = run_json("results", "--out", str(out))
    assert (second["downloaded"], second["skipped"]) == (0, 10)
    # Without the sidecar, a single-part ETag is the MD5 of the content.
    (out / ".tts-fleet-etags.json").unlink()
    (out / "r1.wav").write_bytes(b"edited locally")
    code, third = run_json("results", "--out", str(out))
    assert (third["downloaded"], third["skipped"]) == (1, 9)
    assert (
        hashlib.md5((out / "r1.wav").read_bytes()).hexdigest()
        == hashlib.md5(b"audio 1").hexdigest()
    )


def test_results_for_given_ids_or_a_prefix(stack: Stack, tmp_path: Path) -> None:
    for job_id in ("ch1-a", "ch1-b", "ch2-a"):
        finish(stack, job_id)
    code, by_prefix = run_json("results", "--out", str(tmp_path / "p"), "--prefix", "ch1-")
    assert code == 0 and by_prefix["downloaded"] == 4
    assert sorted(p.name for p in (tmp_path / "p").glob("*.wav")) == ["ch1-a.wav", "ch1-b.wav"]
    code, by_id = run_json("results", "--out", str(tmp_path / "i"), "--id", "ch2-a", "--id", "ch3")
    # an id with no output (unknown, pending or failed) is named, and the exit is not 0
    assert code == ExitCode.FAILED and by_id["downloaded"] == 2 and by_id["missing"] == ["ch3"]


def test_dlq_list_shows_errors_without_consuming(stack: Stack) -> None:
    dead_letter(stack, "bad1", "rejected by the speech server: Unknown voice")
    dead_letter(stack, "bad2", None)  # moved by maxReceiveCount: no error attribute
    code, listed = run_json("dlq", "list")
    assert code == 0 and set(listed) == DLQ_LIST_KEYS and listed["count"] == 2
    assert set(listed["messages"][0]) == DEAD_LETTER_KEYS
    errors = {m["job_id"]: m["error"] for m in listed["messages"]}
    assert errors == {"bad1": "rejected by the speech server: Unknown voice", "bad2": None}
    assert all(m["receive_count"] >= 1 for m in listed["messages"])
    visible = boto3.client("sqs").get_queue_attributes(
        QueueUrl=stack.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]["ApproximateNumberOfMessages"]
    assert visible == "2"  # visibility restored at once, nothing deleted
    assert "bad1" in run("dlq", "list").stdout


@pytest.mark.timeout(120)
def test_dlq_list_shows_a_deeply_nested_body_without_an_id(stack: Stack) -> None:
    nested = "[" * 100_000 + "]" * 100_000  # a producer's body, copied to the DLQ as it came
    boto3.client("sqs").send_message(QueueUrl=stack.dlq_url, MessageBody=nested)
    code, listed = run_json("dlq", "list")
    assert code == 0 and listed["count"] == 1
    assert listed["messages"][0]["job_id"] is None


def test_dlq_redrive_moves_messages_back_and_filters_on_the_error(stack: Stack) -> None:
    for n in range(12):
        dead_letter(stack, f"speech{n}", "speech server unavailable" if n % 3 else "invalid job")
    fail(stack, "speech0", "invalid job")
    fail(stack, "speech1", "speech server unavailable")
    code, filtered = run_json("dlq", "redrive", "--filter", "UNAVAILABLE")
    assert code == 0 and set(filtered) == REDRIVE_KEYS
    assert filtered["method"] == "receive-send-delete"
    assert (filtered["moved"], filtered["skipped"]) == (8, 4)
    moved = queued_bodies(stack.queue_url)
    assert sorted(b["id"] for b in moved) == sorted(f"speech{n}" for n in range(12) if n % 3)
    assert depth(stack.dlq_url) == 4
    # A redriven job is pending again: its old failure record goes, a skipped one's stays.
    failures = boto3.client("s3").list_objects_v2(Bucket=stack.bucket, Prefix="failures/")
    assert [item["Key"] for item in failures["Contents"]] == [failure_key("speech0")]
    code, rest = run_json("dlq", "redrive")
    assert code == 0 and rest["moved"] == 4 and depth(stack.dlq_url) == 0
    assert rest["method"] == "receive-send-delete"  # the emulator has no StartMessageMoveTask
    assert rest["fallback_reason"] == "the local emulator has no StartMessageMoveTask"
    message = boto3.client("sqs").receive_message(
        QueueUrl=stack.queue_url, MaxNumberOfMessages=1, MessageAttributeNames=["All"]
    )["Messages"][0]
    assert set(message["MessageAttributes"]) == {"origin"}  # the old error is not carried over


class InstantPoison:
    """The real client, plus a stand-in worker that dead-letters every redriven job again at
    once (a new DLQ message, as `python -m worker` does for a job that can never succeed)."""

    def __init__(self, real: Any, dlq_url: str) -> None:
        self.real, self.dlq_url = real, dlq_url

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        answer: dict[str, Any] = self.real.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)
        if QueueUrl != self.dlq_url:
            again = [{**entry, "MessageAttributes": {"error": {"DataType": "String",
                      "StringValue": "rejected again"}}} for entry in Entries]  # fmt: skip
            self.real.send_message_batch(QueueUrl=self.dlq_url, Entries=again)
        return answer


@pytest.mark.timeout(120)
def test_redriving_poison_jobs_ends_instead_of_looping(stack: Stack) -> None:
    for n in range(15):
        dead_letter(stack, f"poison{n}", "rejected by the speech server")
    time.sleep(0.01)  # SentTimestamp has millisecond resolution
    sqs = InstantPoison(boto3.client("sqs"), stack.dlq_url)
    report = redrive(sqs, stack.dlq_url, stack.queue_url, error_filter="rejected")
    assert report.moved == 15 and report.failed == {}
    assert report.arrived_later <= 15  # the copies it saw were left alone, not moved again
    assert depth(stack.queue_url) == 15 and depth(stack.dlq_url) == 15


class MoveTaskSqs:
    """The real client plus StartMessageMoveTask/ListMessageMoveTasks, which moto lacks:
    the task is run at once by moving the messages through the real emulator."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.tasks: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def start_message_move_task(self, SourceArn: str, DestinationArn: str) -> dict[str, Any]:
        source = self.real.get_queue_url(QueueName=SourceArn.rsplit(":", 1)[-1])["QueueUrl"]
        target = self.real.get_queue_url(QueueName=DestinationArn.rsplit(":", 1)[-1])["QueueUrl"]
        moved = 0
        while messages := self.real.receive_message(QueueUrl=source, MaxNumberOfMessages=10).get(
            "Messages", []
        ):
            for message in messages:
                self.real.send_message(QueueUrl=target, MessageBody=message["Body"])
                self.real.delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
                moved += 1
        self.tasks.insert(0, {"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": moved,
                              "SourceArn": SourceArn})  # fmt: skip
        return {"TaskHandle": f"task-{len(self.tasks)}"}

    def list_message_move_tasks(self, SourceArn: str, MaxResults: int) -> dict[str, Any]:
        return {"Results": [t for t in self.tasks if t["SourceArn"] == SourceArn][:MaxResults]}


def test_redrive_uses_start_message_move_task_where_sqs_has_it(stack: Stack) -> None:
    for n in range(4):
        dead_letter(stack, f"m{n}", "speech server unavailable")
    sqs = MoveTaskSqs(boto3.client("sqs"))
    report = redrive(sqs, stack.dlq_url, stack.queue_url, move_task=True)
    assert (report.method, report.moved, report.task_handle) == ("start_message_move_task", 4,
                                                                 "task-1")  # fmt: skip
    assert report.fallback_reason is None
    assert depth(stack.dlq_url) == 0 and depth(stack.queue_url) == 4


def test_redrive_on_the_emulator_never_asks_it_for_a_move_task(stack: Stack) -> None:
    dead_letter(stack, "m0", "speech server unavailable")
    sqs = boto3.client("sqs")
    asked: list[str] = []
    sqs.meta.events.register("before-call.sqs", lambda model, **_: asked.append(model.name))
    report = redrive(sqs, stack.dlq_url, stack.queue_url)
    assert report.method == "receive-send-delete" and report.moved == 1
    assert "StartMessageMoveTask" not in asked and "ReceiveMessage" in asked
