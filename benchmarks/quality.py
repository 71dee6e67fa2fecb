"""What the output checks catch, and what they cost: QA_MODE off, basic and asr side by side.

    .venv/bin/python benchmarks/quality.py [--jobs 500] [--share 0.2] [--latency-ms 100]

One espeak speech stand-in makes `--share` of its pieces bad, split evenly across the five
faults of issue 21 (runaway, truncate, silence, drop, garble; tts_fleet/local/speech_faults.py)
and answers transcriptions with its ASR stand-in (tts_fleet/local/asr.py). For each mode the
same `--jobs` jobs go through `--workers` real `python -m worker` processes on moto (its own
process), and the script reads every manifest and failure record back:

- bad delivered as done: jobs stored as passed with a faulted piece in them, by fault kind
  (with checks on, from each piece's kept seed, `FaultPlan.pick`; with them off, from the
  request the worker sent, which has no seed, and the halves a runaway is re-split into);
- good rejected: renderings the plan left clean that a check rejected anyway;
- re-renders per job, quality failures (every attempt of a piece bad, QA_ON_FAIL=fail);
- throughput: jobs per second from the workers' first poll to the last outcome, and the cost
  against `off`. The ASR stand-in answers from memory, so `asr` here costs only its HTTP round
  trip; a real Whisper model adds its own time per piece (docs/worker.md).

Numbers depend on this machine's load (2 cores here, shared).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3

from tts_fleet.local import procs
from tts_fleet.local.asr import url_from_log
from tts_fleet.local.demo import TEXTS, VOICES
from tts_fleet.local.emulator import create_stack, emulator_env
from tts_fleet.local.speech_faults import KINDS, FaultAudit, FaultPlan
from worker.jobs import FailureRecord, Job, Manifest
from worker.speech import MAX_SPLITS, halves

MODES = ("off", "basic", "asr")
LOGS = Path(tempfile.mkdtemp(prefix="tts-quality-"))
FAULT_SEED = 21


@dataclasses.dataclass
class Outcome:
    mode: str
    seconds: float
    done: int
    quality_failed: int
    bad_delivered: Counter[str]
    clean_rejected: int
    clean_attempts: int
    rerenders: int
    faulted: int


def jobs(count: int) -> list[Job]:
    """Each text its own (a part number in front): with checks off the worker sends no seed,
    and the stand-in answers the same request the same way, so repeated texts would share
    their fault."""
    return [
        Job(id=f"q{i:05d}", text=f"Part {i + 1}. {TEXTS[i % len(TEXTS)]}",
            voice=VOICES[(i // 3) % len(VOICES)])
        for i in range(count)
    ]  # fmt: skip


def fault_spec(share: float) -> str:
    return ",".join(f"{kind}={share / len(KINDS):g}" for kind in KINDS)


def start_speech(env: dict[str, str], args: argparse.Namespace) -> tuple[Any, str, str]:
    log = LOGS / "speech.log"
    faults = fault_spec(args.share)
    extra = ("--faults", faults, "--fault-seed", str(FAULT_SEED), "--batch-exponent", "0.5")
    proc, url = procs.start_speech_server("espeak", args.latency_ms, env, log, 60, extra_args=extra)
    return proc, url, url_from_log(log, proc)


def settled(s3: Any, bucket: str) -> int:
    """Jobs with a manifest or a failure record."""
    count = 0
    for prefix in ("outputs/", "failures/"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            count += sum(1 for item in page.get("Contents", []) if item["Key"].endswith(".json"))
    return count


def run_mode(mode: str, batch: list[Job], env: dict[str, str], args: argparse.Namespace,
             speech_url: str, asr_url: str) -> tuple[float, list[Any]]:  # fmt: skip
    """The jobs through fresh workers in `mode`: (seconds, each job's manifest or record)."""
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    stack = create_stack(sqs, s3, f"quality-{mode}", max_receive_count=3, visibility_timeout=60)
    for start in range(0, len(batch), 10):
        entries = [{"Id": str(n), "MessageBody": job.body()}
                   for n, job in enumerate(batch[start : start + 10])]  # fmt: skip
        sqs.send_message_batch(QueueUrl=stack.queue_url, Entries=entries)
    settings = {
        "QUEUE_URL": stack.queue_url, "DLQ_URL": stack.dlq_url, "OUTPUT_BUCKET": stack.bucket,
        "SPEECH_URL": speech_url, "ASR_URL": asr_url, "QA_MODE": mode,
        "CONCURRENCY": str(args.concurrency), "VISIBILITY_TIMEOUT": "60",
        "HEARTBEAT_SECONDS": "20", "WAIT_TIME_SECONDS": "1", "HEALTH_TIMEOUT_SECONDS": "60",
        "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    logs = [LOGS / f"{mode}-worker-{n}.log" for n in range(args.workers)]
    workers = [
        procs.spawn(procs.python_module("worker"), {**env, **settings, "WORKER_ID": log.stem}, log)
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 60
        while not all("polling" in log.read_text(errors="replace") for log in logs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start; see {LOGS}")
            time.sleep(0.05)
        started = time.monotonic()
        while settled(s3, stack.bucket) < len(batch):
            if time.monotonic() - started > 1800:
                raise RuntimeError(f"{mode}: jobs not settled in 30 min; see {LOGS}")
            time.sleep(0.25)
        seconds = time.monotonic() - started
    finally:
        for worker in workers:
            procs.stop(worker, 30)
    return seconds, [record(s3, stack.bucket, job.job_id) for job in batch]


def record(s3: Any, bucket: str, job_id: str) -> Manifest | FailureRecord:
    try:
        body = s3.get_object(Bucket=bucket, Key=f"outputs/{job_id}.json")["Body"].read()
        return Manifest.model_validate_json(body)
    except s3.exceptions.NoSuchKey:
        body = s3.get_object(Bucket=bucket, Key=f"failures/{job_id}.json")["Body"].read()
        return FailureRecord.model_validate_json(body)


def unchecked_fault(plan: FaultPlan, text: str, voice: str, splits: int = 0) -> str | None:
    """With checks off: the fault in what was delivered. No seed is sent; a runaway fills the
    talker's context, which the worker takes for a cut and asks for in halves (worker/speech.py),
    each a fresh draw; any other fault is delivered."""
    fault = plan.pick(text, voice, None)
    two = halves(text)
    if fault != "runaway" or splits >= MAX_SPLITS or len(two) < 2:
        return fault
    found = [unchecked_fault(plan, half, voice, splits + 1) for half in two]
    return next((f for f in found if f is not None), None)


def outcome(mode: str, plan: FaultPlan, batch: list[Job], seconds: float,
            records: list[Any]) -> Outcome:  # fmt: skip
    done = sum(isinstance(r, Manifest) for r in records)
    if mode == "off":
        bad = Counter(f for job in batch if (f := unchecked_fault(plan, job.text, job.voice)))
        return Outcome(mode, seconds, done, 0, bad, 0, len(batch) - bad.total(), 0, bad.total())
    audit = FaultAudit()
    for job, found in zip(batch, records, strict=True):
        assert found.qa is not None, f"{job.job_id} has no qa in mode {mode}"
        audit.add(plan, job.text, job.voice, found.qa)
    return Outcome(
        mode, seconds, done, audit.quality_failed, audit.delivered_bad, audit.clean_rejected,
        audit.clean_attempts, audit.rerendered, audit.faulted_attempts.total(),
    )  # fmt: skip


def report(outcomes: list[Outcome], jobs_count: int) -> None:
    base = next(o for o in outcomes if o.mode == "off").seconds
    print(f"{'mode':<7}{'done':>6}{'quality':>9}{'bad as done':>13}{'good rejected':>15}"
          f"{'re-renders/job':>16}{'seconds':>9}{'jobs/s':>8}{'cost':>8}")  # fmt: skip
    for o in outcomes:
        rejected = "-" if o.mode == "off" else f"{o.clean_rejected}/{o.clean_attempts}"
        cost = "-" if o.mode == "off" else f"{o.seconds / base - 1:+.0%}"
        print(f"{o.mode:<7}{o.done:>6}{o.quality_failed:>9}{o.bad_delivered.total():>13}"
              f"{rejected:>15}{o.rerenders / jobs_count:>16.3f}{o.seconds:>9.1f}"
              f"{jobs_count / o.seconds:>8.2f}{cost:>8}")  # fmt: skip
    for o in outcomes:
        kinds = ", ".join(f"{k} {o.bad_delivered[k]}" for k in KINDS if o.bad_delivered[k])
        print(f"{o.mode}: bad delivered as done by kind: {kinds or 'none'}"
              + (f"; faulted renderings {o.faulted}" if o.mode != "off" else ""))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--share", type=float, default=0.2, help="share of pieces faulted")
    parser.add_argument("--latency-ms", type=float, default=100.0,
                        help="the speech stand-in's model time per request (fast)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    moto, endpoint = procs.start_moto_server(os.environ, LOGS / "moto.log")
    os.environ.update(emulator_env(endpoint))
    env = {k: v for k, v in os.environ.items() if k not in ("QA_MODE", "ASR_URL")}
    speech, speech_url, asr_url = start_speech(env, args)
    plan = FaultPlan.parse(fault_spec(args.share), FAULT_SEED)
    batch = jobs(args.jobs)
    try:
        print(f"{args.jobs} jobs, {args.share:.0%} of pieces faulted ({plan.describe()}, "
              f"fault seed {FAULT_SEED}), espeak + {args.latency_ms:g} ms, {args.workers} "
              f"workers x CONCURRENCY {args.concurrency}; logs in {LOGS}", flush=True)  # fmt: skip
        outcomes = []
        for mode in MODES:
            seconds, records = run_mode(mode, batch, env, args, speech_url, asr_url)
            outcomes.append(outcome(mode, plan, batch, seconds, records))
            print(f"{mode}: {seconds:.1f} s", flush=True)
        report(outcomes, args.jobs)
    finally:
        procs.stop(speech, 5)
        procs.stop(moto, 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
