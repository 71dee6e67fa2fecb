"""The end of a local run: outputs downloaded into --out, unfinished jobs saved, the
timeline drawn and the summary computed."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Protocol

from tts_fleet.config.models import StackConfig
from tts_fleet.local import emulator
from tts_fleet.local.emulator import LocalAws
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.local.report import (
    Quality,
    Summary,
    audio_seconds,
    latency,
    read_manifests,
    write_timeline,
)
from tts_fleet.local.scaler import Tick
from tts_fleet.local.speech_faults import FaultAudit, FaultPlan
from tts_fleet.stats import percentile
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX, FailureRecord, Job, Manifest


class FinishedRun(Protocol):
    """What the end of a run reads of it (a LocalRun): declared here, so this module does not
    import the run that calls it."""

    aws: LocalAws
    cfg: StackConfig
    events: EventLog
    pool: WorkerPool
    jobs: list[Job]
    samples: list[Tick]
    submitted: list[str]
    submitted_at: float
    interrupted: bool

    @property
    def out_dir(self) -> Path: ...

    @property
    def fault_plan(self) -> FaultPlan | None: ...


UNFINISHED_FILE = "unfinished.jsonl"
TIMELINE_FILE = "timeline.png"


def _body_id(body: str) -> str | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    return str(data["id"]) if isinstance(data, dict) and "id" in data else None


def unfinished_bodies(jobs: list[Job], done: set[str], queued: list[str]) -> list[str]:
    """Our jobs without an outcome, then any other body still queued (e.g. sent by
    `tts-fleet submit` to a --keep-running fleet), each once."""
    bodies = [job.body() for job in jobs if job.job_id not in done]
    seen = {job.job_id for job in jobs} | done
    for body in queued:
        job_id = _body_id(body)
        if job_id is None or job_id not in seen:
            bodies.append(body)
            if job_id is not None:
                seen.add(job_id)
    return bodies


def write_unfinished(bodies: list[str], path: Path) -> int:
    """JSONL that the next run takes with --input; no file when nothing is left."""
    if bodies:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(body.rstrip("\n") + "\n" for body in bodies), encoding="utf-8")
    elif path.exists():
        path.unlink()  # a stale list from an earlier run would mislead
    return len(bodies)


def collect(run: FinishedRun) -> Summary:
    """Downloads the outputs, saves what is unfinished, draws the timeline, sums it up."""
    out = run.out_dir
    manifests, failed_ids = _download(run, out)
    done = {m.id for m in manifests}
    own = set(run.submitted)
    jobs = [job for job in run.jobs if job.job_id in own]
    bodies = unfinished_bodies(jobs, done | failed_ids, emulator.drain_bodies(run.aws))
    own_left = sum(1 for job in jobs if job.job_id not in done | failed_ids)
    # With --keep-running, jobs also come from `tts-fleet submit` elsewhere: count them too.
    submitted = len(own | done | failed_ids) + len(bodies) - own_left
    waits = [latency(m) for m in manifests]
    last_failed = run.samples[-1].failed if run.samples else 0
    summary = Summary(
        submitted=submitted,
        completed=len(done),
        failed=max(len(failed_ids), last_failed),
        invalid_lines=0,
        unfinished=write_unfinished(bodies, out / UNFINISHED_FILE),
        latency_p50_s=_round(percentile(waits, 0.50)),
        latency_p95_s=_round(percentile(waits, 0.95)),
        audio_s=round(audio_seconds(manifests), 3),
        worker_s=round(run.pool.worker_seconds(), 3),
        wall_s=round(run.events.elapsed(), 3),
        peak_workers=max((s.running for s in run.samples), default=0),
        ticks=len(run.samples),
        interrupted=run.interrupted,
        out_dir=str(out),
        timeline=_timeline(run, submitted, out),
        quality=quality(run, manifests, out / "failures"),
    )
    run.events.write("finished", **summary.to_json())
    return summary


def quality(run: FinishedRun, manifests: list[Manifest], failures: Path) -> Quality | None:
    """The output checks' figures (None when the workers ran without them), and with --faults
    what the checks made of each faulted piece."""
    records = [(m.id, m.qa) for m in manifests if m.qa is not None]
    for path in sorted(failures.glob("*.json")):
        with contextlib.suppress(ValueError, OSError):
            failure = FailureRecord.model_validate_json(path.read_bytes())
            if failure.qa is not None:
                records.append((failure.id, failure.qa))
    if not records:
        return None
    plan = run.fault_plan or FaultPlan()
    jobs = {job.job_id: job for job in run.jobs}
    audit = FaultAudit()
    for job_id, qa in records:
        job = jobs.get(job_id)  # a job sent from elsewhere (--keep-running): text unknown
        text, voice = (job.text, job.voice) if job is not None else ("", "")
        audit.add(plan, text, voice, qa)
    return Quality(
        mode=records[0][1].mode,
        pieces=audit.pieces,
        rerendered=audit.rerendered,
        failed_jobs=audit.quality_failed,
        injected=dict(audit.faulted_attempts) if plan.active else None,
        caught=audit.caught,
        delivered_bad=sum(audit.delivered_bad.values()),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _download(run: FinishedRun, out: Path) -> tuple[list[Manifest], set[str]]:
    """Audio and manifests into `out`, failure records into `out/failures`."""
    outputs = emulator.list_keys(run.aws, OUTPUTS_PREFIX)
    failures = emulator.list_keys(run.aws, FAILURES_PREFIX)
    manifests = [key for key in outputs if key.endswith(".json")]
    paths = emulator.download_outputs(run.aws, manifests, out)
    emulator.download(run.aws, failures, FAILURES_PREFIX, out / "failures")
    return read_manifests(paths), {Path(key).stem for key in failures}


def _timeline(run: FinishedRun, submitted: int, out: Path) -> str | None:
    if not run.samples:
        return None
    scaling = run.cfg.scaling
    title = (
        f"tts-fleet local: {submitted} jobs, maxWorkers {scaling.max_workers}, "
        f"jobsPerWorker {scaling.jobs_per_worker}, idle {scaling.idle_minutes} ticks"
    )
    return str(write_timeline(run.samples, out / TIMELINE_FILE, title))
