"""`wait` and `results` and the workers' output checks (issue 21): a quality failure is shown
with its reason, a job kept although its checks failed is said to be, `results --json` carries
each manifest's `qa`."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from tests.lib.client_stack import Stack, finish, run, run_json
from tts_fleet.exit_codes import ExitCode
from worker.jobs import FailureRecord, Job, Manifest, PieceQa, QaRecord, failure_key, manifest_key

REASON = (
    "piece 1 (30 characters, 'It was a bright cold day in…') failed every attempt (3, seeds "
    "11, 12, 13): silence: internal silence of 3.10s (at most 2.00s)"
)


def qa_record(passed: bool) -> QaRecord:
    piece = PieceQa(
        characters=30, seconds=4.2, expected_seconds=2.0, longest_silence_s=3.1, attempts=3,
        seeds=[11, 12, 13], passed=passed, failed=[] if passed else ["silence: 3.10s"],
    )  # fmt: skip
    return QaRecord(
        mode="basic", passed=passed, rerenders=2, reason=None if passed else REASON,
        pieces=[piece],
    )  # fmt: skip


def with_qa(stack: Stack, job_id: str, passed: bool) -> None:
    """A done job whose manifest carries the checks (stored as passed, or kept failing)."""
    finish(stack, job_id)
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket=stack.bucket, Key=manifest_key(job_id))["Body"].read()
    manifest = Manifest.model_validate_json(body).model_copy(update={"qa": qa_record(passed)})
    s3.put_object(Bucket=stack.bucket, Key=manifest_key(job_id), Body=manifest.to_json())


def failed_on_quality(stack: Stack, job_id: str) -> None:
    record = FailureRecord(
        id=job_id, error="quality", detail=REASON, attempts=1, message_id="m", worker="w",
        failed_at="2026-01-01T00:00:00Z", request_digest=Job(id=job_id, text="t").digest(),
        qa=qa_record(False),
    )  # fmt: skip
    boto3.client("s3").put_object(
        Bucket=stack.bucket, Key=failure_key(job_id), Body=record.to_json()
    )


def jobs(path: Path, *ids: str) -> str:
    path.write_text("".join(json.dumps({"id": i, "text": "t"}) + "\n" for i in ids))
    return str(path)


def test_wait_shows_a_quality_failure_and_a_job_kept_failing(stack: Stack, tmp_path: Path) -> None:
    source = jobs(tmp_path / "jobs.jsonl", "q-ok", "q-bad", "q-kept")
    with_qa(stack, "q-ok", passed=True)
    failed_on_quality(stack, "q-bad")
    with_qa(stack, "q-kept", passed=False)
    code, waited = run_json("wait", source, "--interval", "0.1")
    assert code == ExitCode.FAILED
    assert waited["failed"] == {"q-bad": f"quality: {REASON}"}
    assert waited["checks_failed"] == {"q-kept": REASON}
    text = run("wait", source, "--interval", "0.1").stdout
    assert f"failed: q-bad: quality: {REASON}" in " ".join(text.split())
    assert f"stored with qa.passed false: q-kept: {REASON}" in " ".join(text.split())


def test_results_json_carries_qa_and_the_quality_failures(stack: Stack, tmp_path: Path) -> None:
    source = jobs(tmp_path / "jobs.jsonl", "r-ok", "r-bad", "r-kept")
    with_qa(stack, "r-ok", passed=True)
    failed_on_quality(stack, "r-bad")
    with_qa(stack, "r-kept", passed=False)
    code, listed = run_json("results", source, "--out", str(tmp_path / "out"))
    assert code == ExitCode.FAILED  # r-bad has no output
    assert listed["qa"] == {
        "r-ok": qa_record(True).model_dump(),
        "r-kept": qa_record(False).model_dump(),
    }
    assert listed["quality_failed"] == {"r-bad": f"quality: {REASON}"}
    assert listed["checks_failed"] == {"r-kept": REASON}
    assert listed["missing"] == ["r-bad"]
    shown = " ".join(run("results", source, "--out", str(tmp_path / "out")).stderr.split())
    assert f"failed: r-bad: quality: {REASON}" in shown


def test_results_by_prefix_lists_quality_failures_too(stack: Stack, tmp_path: Path) -> None:
    failed_on_quality(stack, "p-bad")
    finish(stack, "p-plain")  # a manifest without checks (QA_MODE=off) has no `qa`
    code, listed = run_json("results", "--prefix", "p-", "--out", str(tmp_path / "out"))
    assert code == ExitCode.OK
    assert listed["quality_failed"] == {"p-bad": f"quality: {REASON}"}
    assert listed["qa"] == {} and listed["downloaded"] == 2
