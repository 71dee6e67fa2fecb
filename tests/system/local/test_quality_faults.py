"""Issue 21 through real worker processes and the faulting speech stand-in: a fifth of the
pieces come out bad (all five kinds); the workers' checks keep every faulted piece out of the
jobs stored as passed (asr mode), or the ones a signal check can see (basic mode), reject
almost no clean piece, and lose no job. A job whose every attempt fails becomes a `quality:`
failure after one receive (QA_ON_FAIL=fail) or a manifest with `qa.passed: false` (keep)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    list_keys,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    visible_and_in_flight,
    wait_for,
)
from tts_fleet.local import asr
from tts_fleet.local.demo import TEXTS, VOICES
from tts_fleet.local.speech_faults import KINDS, FaultAudit, FaultPlan
from worker.jobs import FailureRecord, Job, Manifest

pytestmark = pytest.mark.processes

FAULTS = "runaway=0.04,truncate=0.04,silence=0.04,drop=0.04,garble=0.04"
# A fault seed under which both modes' jobs below meet every kind of fault (checked below).
FAULT_SEED = 80
JOBS = 24
# What a duration or silence check can see; drop and garble keep a plausible duration.
SIGNAL_FAULTS = ("runaway", "truncate", "silence")


def jobs(prefix: str, count: int = JOBS) -> list[Job]:
    return [
        Job(id=f"{prefix}-{i:03d}", text=TEXTS[i % len(TEXTS)], voice=VOICES[i % len(VOICES)])
        for i in range(count)
    ]


def send(sqs: Any, queue_url: str, batch: list[Job]) -> None:
    for start in range(0, len(batch), 10):
        entries = [{"Id": str(n), "MessageBody": j.body()} for n, j in
                   enumerate(batch[start : start + 10])]  # fmt: skip
        sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)


Outcomes = tuple[dict[str, Manifest], dict[str, FailureRecord]]


def outcomes(s3: Any, bucket: str, batch: list[Job]) -> Outcomes:
    """Every job's manifest or failure record, once each job has one."""
    wanted = {j.job_id for j in batch}

    def settled() -> bool:
        keys = list_keys(s3, bucket)
        have = {k.split("/")[1].removesuffix(".json") for k in keys if k.endswith(".json")}
        return wanted <= have

    wait_for(settled, 45, 0.3, f"an outcome for each of {len(wanted)} jobs")
    manifests: dict[str, Manifest] = {}
    failures: dict[str, FailureRecord] = {}
    for job in batch:
        key = f"outputs/{job.job_id}.json"
        if key in list_keys(s3, bucket, key):
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            manifests[job.job_id] = Manifest.model_validate_json(body)
        key = f"failures/{job.job_id}.json"
        if key in list_keys(s3, bucket, key):
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            failures[job.job_id] = FailureRecord.model_validate_json(body)
    return manifests, failures


def audit_of(plan: FaultPlan, batch: list[Job], found: Outcomes) -> FaultAudit:
    manifests, failures = found
    audit = FaultAudit()
    for job in batch:
        record: Manifest | FailureRecord = manifests.get(job.job_id) or failures[job.job_id]
        assert record.qa is not None, job.job_id
        audit.add(plan, job.text, job.voice, record.qa)
    return audit


def run_fleet(
    aws_env: dict[str, str],
    sqs: Any,
    s3: Any,
    procs: Processes,
    speech_args: tuple[str, ...],
    batches: dict[str, tuple[list[Job], dict[str, str]]],
) -> dict[str, Outcomes]:
    """One speech server (with its ASR stand-in); per batch its own queue and one worker."""
    found = {}
    with start_speech_server("espeak", extra_args=speech_args) as speech:
        asr_url = asr.url_from_log(speech.log_path, speech.proc)
        started = []
        for name, (batch, qa_env) in batches.items():
            names = make_queues_and_bucket(sqs, s3, max_receive_count=3, name=name)
            send(sqs, names["queue_url"], batch)
            procs.add(start_worker(aws_env, SPEECH_URL=speech.url, ASR_URL=asr_url,
                                   WORKER_ID=name, **qa_env, **env_for(names)))  # fmt: skip
            started.append((name, names))
        for name, names in started:
            found[name] = outcomes(s3, names["bucket"], batches[name][0])
            # No job lost: nothing left in the queue, each job settled exactly once.
            queue = names["queue_url"]
            wait_for(lambda: visible_and_in_flight(sqs, queue) == (0, 0), 15)  # noqa: B023
    return found


@pytest.mark.timeout(120)
def test_faulted_pieces_are_caught_in_asr_mode_and_by_signal_in_basic(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    plan = FaultPlan.parse(FAULTS, FAULT_SEED)
    batches = {
        "asr": (jobs("a"), {"QA_MODE": "asr"}),
        "basic": (jobs("b"), {"QA_MODE": "basic"}),
    }
    found = run_fleet(aws_env, sqs, s3, procs, ("--faults", FAULTS, "--fault-seed",
                                                 str(FAULT_SEED)), batches)  # fmt: skip
    for mode, (batch, _) in batches.items():
        manifests, failures = found[mode]
        assert set(manifests) | set(failures) == {j.job_id for j in batch}
        assert all(f.error == "quality" and f.attempts == 1 for f in failures.values())
        audit = audit_of(plan, batch, found[mode])
        assert set(audit.faulted_attempts) == set(KINDS), (mode, audit.faulted_attempts)
        assert audit.clean_rejected <= 0.01 * audit.clean_attempts, (mode, audit)
        assert all(m.qa is not None and m.qa.passed for m in manifests.values())
        if mode == "asr":
            assert sum(audit.delivered_bad.values()) == 0, audit.delivered_bad
        else:
            assert not set(audit.delivered_bad) & set(SIGNAL_FAULTS), audit.delivered_bad
        # Every rejected attempt was rendered again, but the last of a piece that never passed.
        assert audit.rerendered == audit.caught + audit.clean_rejected - len(failures)


@pytest.mark.timeout(120)
def test_a_piece_that_fails_every_attempt_fails_the_job_or_is_kept_flagged(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    batches = {
        "fail": (jobs("f", 2), {"QA_MODE": "basic", "QA_ON_FAIL": "fail"}),
        "keep": (jobs("k", 2), {"QA_MODE": "basic", "QA_ON_FAIL": "keep"}),
    }
    found = run_fleet(aws_env, sqs, s3, procs, ("--faults", "silence=1"), batches)
    manifests, failures = found["fail"]
    assert manifests == {} and set(failures) == {"f-000", "f-001"}
    for record in failures.values():
        assert record.error == "quality" and record.attempts == 1  # after one receive
        assert record.reason().startswith("quality: piece 1 (")
        assert "silence" in record.reason()
        assert record.qa is not None and record.qa.pieces[0].attempts == 3  # 1 + QA_RETRIES
    manifests, failures = found["keep"]
    assert failures == {} and set(manifests) == {"k-000", "k-001"}
    for manifest in manifests.values():
        assert manifest.qa is not None and manifest.qa.passed is False
        assert manifest.qa.reason is not None and "silence" in manifest.qa.reason
