"""Output checks end to end in `Worker` threads against the emulator (issue 21): the real
speech client and guard, a speech server answering faults by seed (tests/lib/fake_worker.py
FaultyTts). A bad piece is rendered again; a job that never passes is a `quality:` failure in
the DLQ after one receive (QA_ON_FAIL=fail) or a manifest with `qa.passed: false` (keep); no
job is ever stored as passed with a piece that failed a check."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from tests.lib.fake_worker import (
    FaultyTts,
    clean,
    long_pause,
    make_worker,
    reading,
    run_until,
    runaway,
    truncate,
)
from tests.lib.procs import list_keys, make_queues_and_bucket, visible_and_in_flight
from worker.jobs import DLQ_ERROR_ATTRIBUTE, FailureRecord, Job, Manifest, failure_key, manifest_key
from worker.metrics import Metrics
from worker.qa.checks import expected_seconds
from worker.qa.guard import Guard, seed_for

SENTENCE = "The lighthouse keeper climbed the stairs every evening at dusk."
TEXT = f"{SENTENCE} {SENTENCE} {SENTENCE}"  # three pieces at 80 characters


@pytest.fixture
def names(aws_env: dict[str, str], sqs: Any, s3: Any) -> dict[str, str]:
    return make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=30)


def run_jobs(
    names: dict[str, str], sqs: Any, s3: Any, jobs: list[Job], server: FaultyTts, **qa: Any
) -> list[dict[str, Any]]:
    """Sends `jobs`, runs a worker with checks (`qa`: the Guard's arguments) until the queue is
    empty; returns its metric lines."""
    for job in jobs:
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    stream = io.StringIO()
    on_fail = qa.get("on_fail", "fail")
    worker = make_worker(
        names, sqs, s3, server.client(Guard(**qa)), metrics=Metrics(stream, stack="dev"),
        qa_on_fail=on_fail,
    )  # fmt: skip
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def manifest(s3: Any, bucket: str, job_id: str) -> Manifest:
    body = s3.get_object(Bucket=bucket, Key=manifest_key(job_id))["Body"].read()
    return Manifest.model_validate_json(body)


def dead_letters(sqs: Any, dlq_url: str) -> list[dict[str, Any]]:
    answer = sqs.receive_message(
        QueueUrl=dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return list(answer.get("Messages", []))


def total(lines: list[dict[str, Any]], metric: str) -> float:
    return float(sum(line.get(metric, 0) for line in lines))


@pytest.mark.timeout(90)
def test_a_bad_piece_is_rendered_again_and_the_manifest_says_so(
    names: dict[str, str], sqs: Any, s3: Any
) -> None:
    job = Job(id="ch01", text=TEXT)
    first, second = seed_for("ch01", 0), seed_for("ch01", 1)
    server = FaultyTts({first: runaway})  # every piece's first attempt runs away
    lines = run_jobs(names, sqs, s3, [job], server)
    qa = manifest(s3, names["bucket"], "ch01").qa
    assert qa is not None and qa.mode == "basic" and qa.passed and qa.rerenders == 3
    assert [(p.attempts, p.seeds, p.passed) for p in qa.pieces] == [(2, [first, second], True)] * 3
    piece = qa.pieces[0]
    assert piece.characters == len(SENTENCE)
    assert piece.seconds == pytest.approx(expected_seconds(SENTENCE), abs=0.01)
    assert piece.expected_seconds == pytest.approx(expected_seconds(SENTENCE), abs=0.001)
    assert piece.longest_silence_s < 0.2 and piece.wer is None
    assert total(lines, "PiecesChecked") == 6 and total(lines, "PiecesRejected") == 3
    [checked] = [line for line in lines if "PiecesChecked" in line]
    assert checked["rejected_by"] == {"runaway": 3} and checked["Stack"] == "dev"
    assert total(lines, "JobsCompleted") == 1


@pytest.mark.timeout(90)
def test_a_job_that_never_passes_is_a_quality_failure_after_one_receive(
    names: dict[str, str], sqs: Any, s3: Any
) -> None:
    job = Job(id="ch02", text=TEXT)
    lines = run_jobs(names, sqs, s3, [job], FaultyTts(default=truncate), retries=2)
    assert list_keys(s3, names["bucket"], "outputs/") == []  # no audio, no manifest
    body = s3.get_object(Bucket=names["bucket"], Key=failure_key("ch02"))["Body"].read()
    record = FailureRecord.model_validate_json(body)
    assert record.reason().startswith("quality: piece 1 (63 characters, ")
    assert "every attempt (3, seeds " in record.reason() and "too_short: " in record.reason()
    assert record.attempts == 1  # the message's first receive
    assert record.qa is not None and not record.qa.passed and record.qa.rerenders == 2
    [copy] = dead_letters(sqs, names["dlq_url"])
    reason = copy["MessageAttributes"][DLQ_ERROR_ATTRIBUTE]["StringValue"]
    assert reason.startswith("quality: piece 1") and "too_short" in reason
    assert total(lines, "JobsFailedOnQuality") == 1 and total(lines, "JobsFailed") == 1
    assert total(lines, "JobsCompleted") == 0
    assert total(lines, "PiecesChecked") == 3 == total(lines, "PiecesRejected")


@pytest.mark.timeout(90)
def test_keep_stores_the_output_with_qa_passed_false(
    names: dict[str, str], sqs: Any, s3: Any
) -> None:
    job = Job(id="ch03", text=TEXT)
    server = FaultyTts({seed_for("ch03", 0): long_pause, seed_for("ch03", 1): long_pause})
    lines = run_jobs(names, sqs, s3, [job], server, retries=1, on_fail="keep")
    stored = manifest(s3, names["bucket"], "ch03")
    assert stored.qa is not None and not stored.qa.passed
    assert stored.qa.reason is not None
    assert "silence: internal silence of 3.9" in stored.qa.reason  # the 4-s gap, to a frame
    assert all(not p.passed and p.attempts == 2 for p in stored.qa.pieces)
    assert list_keys(s3, names["bucket"], "failures/") == []
    assert total(lines, "JobsCompleted") == 1 and total(lines, "JobsFailedOnQuality") == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("on_fail", ["fail", "keep"])
def test_no_job_is_stored_as_passed_with_a_failed_piece(
    names: dict[str, str], sqs: Any, s3: Any, on_fail: str
) -> None:
    # Faults drawn at random per seed: some pieces recover on a later seed, some never do.
    rng = random.Random(21)
    jobs = [Job(id=f"j{n}", text=TEXT) for n in range(8)]
    faults = {
        seed_for(job.job_id, attempt): rng.choice([runaway, truncate, long_pause, clean, clean])
        for job in jobs
        for attempt in range(2)
    }
    server = FaultyTts(faults)  # type: ignore[arg-type]
    run_jobs(names, sqs, s3, jobs, server, retries=1, on_fail=on_fail)
    outcomes = {"passed": 0, "kept": 0, "failed": 0}
    for job in jobs:
        bad_for_good = all(faults[seed_for(job.job_id, a)] is not clean for a in range(2))
        keys = list_keys(s3, names["bucket"], f"outputs/{job.job_id}.json")
        if keys:
            qa = manifest(s3, names["bucket"], job.job_id).qa
            assert qa is not None
            assert qa.passed == all(p.passed for p in qa.pieces)
            assert qa.passed is not bad_for_good  # every piece got the same faulted seeds
            outcomes["passed" if qa.passed else "kept"] += 1
        else:
            assert on_fail == "fail" and bad_for_good
            assert list_keys(s3, names["bucket"], f"failures/{job.job_id}.json")
            outcomes["failed"] += 1
    assert outcomes["passed"] > 0 and outcomes["kept" if on_fail == "keep" else "failed"] > 0


@pytest.mark.timeout(90)
def test_a_clean_job_renders_once(names: dict[str, str], sqs: Any, s3: Any) -> None:
    server = FaultyTts()
    run_jobs(names, sqs, s3, [Job(id="ok", text=TEXT, format="pcm")], server)
    stored = manifest(s3, names["bucket"], "ok")
    assert stored.qa is not None and stored.qa.passed and stored.qa.rerenders == 0
    audio = s3.get_object(Bucket=names["bucket"], Key=stored.audio_key)["Body"].read()
    assert audio == reading(expected_seconds(SENTENCE)).tobytes() * 3
    assert len(server.bodies) == 3
