"""submit against the emulator: batching, validation before sending, partial failures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.lib.client_stack import Stack, depth, drain_bodies, queued_bodies, run, run_json
from tts_fleet.client.aws import Target
from tts_fleet.client.submit import (
    SEND_BATCH_MAX_BYTES,
    batches,
    existing_outputs,
    preflight_queue,
    submit_jobs,
)
from tts_fleet.exit_codes import ExitCode
from worker.jobs import MANIFEST_DIGEST_METADATA, Job, manifest_key, validate_job

SUBMIT_KEYS = {"queue_url", "total", "sent", "failed", "invalid", "duplicates", "calls", "ids",
               "digests", "replaces", "already_done", "elapsed_s", "batch"}  # fmt: skip


def write_jobs(path: Path, count: int) -> Path:
    path.write_text(
        "".join(json.dumps({"text": f"Sentence number {n}."}) + "\n" for n in range(count))
    )
    return path


@pytest.mark.timeout(180)
def test_1000_jobs_are_1000_messages_in_at_most_100_batch_calls(
    stack: Stack, tmp_path: Path, count_calls: dict[str, int]
) -> None:
    code, summary = run_json("submit", str(write_jobs(tmp_path / "jobs.jsonl", 1000)))
    assert code == 0
    assert set(summary) == SUBMIT_KEYS
    assert summary["sent"] == summary["total"] == len(summary["ids"]) == 1000
    assert count_calls.get("SendMessageBatch", 0) <= 100  # counted at the client, not reported
    assert count_calls.get("SendMessage", 0) == 0
    assert summary["calls"] == count_calls["SendMessageBatch"]
    assert depth(stack.queue_url) == 1000
    bodies = queued_bodies(stack.queue_url)
    assert sorted(body["id"] for body in bodies) == sorted(summary["ids"])


def test_three_invalid_lines_among_20_send_nothing_unless_skipped(
    stack: Stack, tmp_path: Path
) -> None:
    lines = [json.dumps({"id": f"j{n}", "text": f"line {n}"}) for n in range(1, 21)]
    lines[2], lines[10], lines[18] = '{"text": ""}', "nope", '{"text": "x", "speed": 9}'
    source = tmp_path / "jobs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    refused = run("submit", str(source))
    assert refused.exit_code == ExitCode.BAD_INPUT
    for number in (3, 11, 19):
        assert f"jobs.jsonl:{number}:" in refused.stderr
    assert "nothing sent" in refused.stderr
    assert depth(stack.queue_url) == 0
    code, summary = run_json("submit", str(source), "--skip-invalid")
    assert code == 0
    assert summary["sent"] == 17 and depth(stack.queue_url) == 17
    assert [bad["line"] for bad in summary["invalid"]] == [3, 11, 19]
    assert set(summary["invalid"][0]) == {"line", "source", "reason"}


def test_invalid_json_summary_still_parses(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"text": "ok"}\n{"bad": 1}\n')
    code, summary = run_json("submit", str(source))
    assert code == ExitCode.BAD_INPUT and summary["sent"] == 0 and summary["ids"] == []
    assert set(summary) == SUBMIT_KEYS


def test_a_directory_and_stdin_are_inputs_too(stack: Stack, tmp_path: Path) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "Chapter 1.txt").write_text("It was a dark and stormy night.")
    (texts / "intro.txt").write_text("Hello.")
    code, summary = run_json("submit", str(texts), "--voice", "Ryan")
    assert code == 0 and summary["sent"] == 2 and "intro" in summary["ids"]
    code, piped = run_json("submit", input='{"id": "piped", "text": "From stdin."}\n')
    assert code == 0 and piped["ids"] == ["piped"]
    bodies = {body["id"]: body for body in drain_bodies(stack.queue_url)}
    assert set(bodies) == {*summary["ids"], "piped"}
    assert bodies["intro"]["voice"] == "Ryan" and bodies["piped"]["voice"] == "Vivian"


def test_missing_queue_is_one_clear_line(aws_env: dict[str, str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("TTS_FLEET_QUEUE_URL", raising=False)
    result = run("submit", str(write_jobs(tmp_path / "jobs.jsonl", 1)))
    assert result.exit_code == 2
    assert "pass --queue-url, set TTS_FLEET_QUEUE_URL, or --stack S" in result.stderr
    assert "Traceback" not in result.output


def test_a_queue_that_does_not_exist_is_one_clear_line(stack: Stack, tmp_path: Path) -> None:
    url = stack.queue_url.rsplit("/", 1)[0] + "/no-such-queue"
    result = run("submit", str(write_jobs(tmp_path / "jobs.jsonl", 3)), "--queue-url", url)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: AWS:") and "NonExistentQueue" in result.stderr


def test_batches_stay_within_the_byte_limit() -> None:
    big = [validate_job({"text": "y" * 100_000, "id": f"b{n}"}, 200_000) for n in range(5)]
    small = [validate_job({"text": "z", "id": f"s{n}"}) for n in range(23)]
    sizes = [len(batch) for batch in batches(big + small)]
    assert sizes == [2, 2, 10, 10, 4]  # 100 KB bodies: two fit in 256 KiB; the fifth leads 9 small
    for batch in batches(big):
        assert sum(len(body.encode()) for _, body in batch) <= SEND_BATCH_MAX_BYTES


class FlakySqs:
    """The real client, except each batch's odd entries fail (retryably) on first sight."""

    def __init__(self, real: Any, sender_fault_ids: frozenset[str] = frozenset()) -> None:
        self.real = real
        self.seen: set[str] = set()
        self.sender_fault_ids = sender_fault_ids
        self.calls = 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        keep, failed = [], []
        for index, entry in enumerate(Entries):
            job_id = json.loads(entry["MessageBody"])["id"]
            if job_id in self.sender_fault_ids:
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": "InvalidMessage",
                               "Message": "rejected"})  # fmt: skip
            elif index % 2 and job_id not in self.seen:
                self.seen.add(job_id)
                failed.append(
                    {"Id": entry["Id"], "SenderFault": False, "Code": "ServiceUnavailable"}
                )
            else:
                keep.append(entry)
        answer = self.real.send_message_batch(QueueUrl=QueueUrl, Entries=keep) if keep else {}
        return {"Successful": answer.get("Successful", []), "Failed": failed}


def test_partial_batch_failures_are_retried_and_nothing_is_sent_twice(stack: Stack) -> None:
    jobs = [validate_job({"id": f"p{n:02d}", "text": f"t{n}"}) for n in range(50)]
    flaky = FlakySqs(boto3.client("sqs"), sender_fault_ids=frozenset({"p07"}))
    advanced: list[int] = []
    report = submit_jobs(flaky, stack.queue_url, jobs, threads=4, progress=advanced.append)
    assert sorted(report.sent) == [job.id for job in jobs if job.id != "p07"]
    assert list(report.failed) == ["p07"] and "InvalidMessage" in report.failed["p07"]
    assert report.calls == flaky.calls == 10  # 5 batches, each retried once for its odd entries
    assert sum(advanced) == 50
    received = Counter(body["id"] for body in drain_bodies(stack.queue_url))
    assert set(received) == set(report.sent) and max(received.values()) == 1


class DeniedAttributes:
    """A producer role: SendMessage allowed, GetQueueAttributes denied (the stack's policy)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "AccessDenied", "Message": "not allowed"}}
        raise ClientError(error, "GetQueueAttributes")


def test_a_producer_that_may_not_read_attributes_can_still_submit(stack: Stack) -> None:
    preflight_queue(DeniedAttributes(boto3.client("sqs")), stack.queue_url)  # does not raise
    with pytest.raises(ClientError, match="NonExistentQueue"):
        preflight_queue(boto3.client("sqs"), stack.queue_url + "-missing")


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ({"text": "x", "voice": "Nobody"}, "voice: Value error, unknown voice 'Nobody'"),
        ({"text": "x", "language": "Klingon"}, "language: Value error, unknown language"),
        ({"text": "x", "instructions": "y" * 501}, "instructions: String should have at most 500"),
        ({"text": "x", "speed": 4.5}, "speed: Input should be less than or equal to 4"),
        ({"text": "x", "format": "opus"}, "format: Input should be"),
    ],
)
def test_what_the_server_would_reject_is_rejected_before_sending(
    stack: Stack, tmp_path: Path, job: dict, reason: str
) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"text": "fine", "voice": "ryan"}) + "\n" + json.dumps(job))
    code, summary = run_json("submit", str(source))
    assert code == ExitCode.BAD_INPUT and depth(stack.queue_url) == 0
    assert [(line["line"], line["reason"][: len(reason)]) for line in summary["invalid"]] == [
        (2, reason)
    ]


def put_manifest(stack: Stack, job: Job, digest: str | None) -> None:
    metadata = {MANIFEST_DIGEST_METADATA: digest} if digest else {}
    boto3.client("s3").put_object(
        Bucket=stack.bucket, Key=manifest_key(job.job_id), Body=b"{}", Metadata=metadata
    )


def test_submit_says_how_many_jobs_replace_an_existing_output(stack: Stack, tmp_path: Path) -> None:
    jobs = [Job(id=f"c{n}", text=f"Chapter {n}, edited.") for n in range(4)]
    put_manifest(stack, jobs[0], jobs[0].digest())  # this very request: done already
    put_manifest(stack, jobs[1], Job(id="c1", text="Chapter 1.").digest())  # another request
    put_manifest(stack, jobs[2], None)  # a manifest from before the digest: another request
    source = tmp_path / "jobs.jsonl"
    source.write_text("".join(job.body() + "\n" for job in jobs))
    code, summary = run_json("submit", str(source))
    assert code == 0 and (summary["replaces"], summary["already_done"]) == (2, 1)
    assert summary["digests"] == {job.job_id: job.digest() for job in jobs}
    text = run("submit", str(source)).stdout
    assert "2 job(s) replace an existing output" in text and "1 job(s) already done" in text


class DeniedHeads:
    def head_object(self, **_: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject")


def test_a_producer_that_may_not_read_the_bucket_gets_no_count_not_an_error() -> None:
    assert existing_outputs(DeniedHeads(), Target(None, None, "b"), [Job(text="x")]) is None
