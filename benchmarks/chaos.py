"""Chaos: ≥ 1,000 jobs through real worker processes while they and their dependencies fail.

    .venv/bin/python benchmarks/chaos.py --seed 1 [--jobs 1000] [--workers 4]

moto runs in its own process with a VERSIONED bucket, so every PUT of a key is one version
and an overwrite is counted, not hidden. The workers reach moto through the fault proxy
(tts_fleet/local/faults.py); the benchmark itself talks to moto directly. On a seeded schedule it:
- SIGKILLs a worker (its held messages come back after VISIBILITY_TIMEOUT);
- SIGTERMs a worker and times its exit against its STOP_TIMEOUT_SECONDS;
- SIGTERMs a worker 0.05-0.5 s after it was spawned (inside its imports);
- kills the speech server and starts it again on the same port seconds later, or freezes it
  (SIGSTOP/SIGCONT);
- browns out SQS and S3: for a few seconds most calls get a 503 (S3 SlowDown), a throttling
  error, a reset connection, or are carried out and then answered 500 (the write landed, the
  answer was lost); a worker is SIGKILLed at the start of each, so that its replacement
  starts inside it.
Like ECS, a worker that exits is replaced a second later; workers are started as
worker/entrypoint.sh starts them (SIGTERM ignored until Python installs its handlers, a stop
re-sent every second). Valid jobs are sent in waves (moto
slows as a queue grows), with late duplicates of finished ones and poison messages of many
kinds mixed in. It prints what the Done-when of issue #12 asks for: lost jobs, manifests and
audio written twice, poison handled, valid jobs in the DLQ, workers that exited on their own,
SIGTERMed workers out inside their budget, JobsCompleted against manifests, and throughput.
Exit 0 when every figure is as it must be, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import boto3

from tts_fleet.local import procs
from tts_fleet.local.emulator import (
    StackResources,
    create_stack,
    emulator_env,
    visible_and_in_flight,
)
from tts_fleet.local.faults import Brownout, FaultProxy
from worker.jobs import Job, manifest_key
from worker.settings import worker_env

REGION = "us-east-1"
MAX_RECEIVE_COUNT = 10
MAX_TEXT_CHARS = 2_000
# The workers' settings: faults resolve in seconds. STOP is each worker's stop budget.
STOP_TIMEOUT_SECONDS = 6.0
VISIBILITY_TIMEOUT = 8
WORKER = dict(
    concurrency=4,
    wait_time_seconds=2,
    visibility_timeout=VISIBILITY_TIMEOUT,
    heartbeat_seconds=2,
    stop_timeout_seconds=STOP_TIMEOUT_SECONDS,
    health_timeout_seconds=180,
    retry_base_seconds=1,
    retry_max_seconds=6,
    speech_retries=1,
    speech_timeout_seconds=15,
    max_text_chars=MAX_TEXT_CHARS,
)
RESPAWN_SECONDS = 1.0
SPEECH_LATENCY_MS = 150
FORMATS = ["wav"] * 6 + ["mp3", "flac", "pcm", "pcm"]
WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "bold",
)  # fmt: skip


# ---- processes ----------------------------------------------------------------------------


class Speech:
    """The tone stand-in on a fixed port, so it can be killed and started again."""

    def __init__(self, logs: Path) -> None:
        self.logs, self.port, self.restarts = logs, procs.free_port(), 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        argv = procs.python_module(
            "tts_fleet.local.speech_server", "--host", "127.0.0.1", "--port", str(self.port)
        )
        argv += ["--backend", "tone", "--latency-ms", str(SPEECH_LATENCY_MS)]
        log = self.logs / f"speech-{self.restarts}.log"
        proc = procs.spawn(argv, os.environ, log)
        procs.wait_for_line(log, "listening on ", proc, 60)
        return proc

    def down(self) -> None:
        procs.kill(self.proc)

    def up(self) -> None:
        self.restarts += 1
        self.proc = self._start()

    def freeze(self, on: bool) -> None:
        procs.signal_group(self.proc, signal.SIGSTOP if on else signal.SIGCONT)


@dataclass
class WorkerRun:
    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float
    extra: bool = False  # started to be stopped in its imports: not replaced
    signalled: str = ""  # "kill", "term" or "early term": what this benchmark did to it
    signalled_at: float = 0.0
    exited_at: float = 0.0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Fleet:
    """N worker slots; a worker that exits is replaced RESPAWN_SECONDS later, as ECS would."""

    def __init__(self, size: int, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.count = env, logs, 0
        self.live: list[WorkerRun] = []
        self.done: list[WorkerRun] = []
        self.respawn_at: list[float] = []
        self.lock = threading.Lock()
        self.calls: queue.Queue[tuple[Callable[[], Any], threading.Event]] = queue.Queue()

    def in_main_thread(self, call: Callable[[], Any]) -> None:
        """Runs `call` in the main thread's next tick and waits for it: procs.spawn's
        PDEATHSIG fires when the spawning thread ends, so only the main thread spawns."""
        done = threading.Event()
        self.calls.put((call, done))
        done.wait()

    def spawn(self, extra: bool = False) -> WorkerRun:
        self.count += 1
        worker_id = f"w{self.count:03d}"
        log = self.logs / f"{worker_id}.log"
        env = {**self.env, **worker_env(worker_id=worker_id)}
        # As worker/entrypoint.sh starts it: SIGTERM ignored until Python's handlers are in
        # (inherited across exec), so a stop inside the interpreter's start is not a -15.
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            proc = procs.spawn(procs.python_module("worker"), env, log)
        finally:
            signal.signal(signal.SIGTERM, previous)
        run = WorkerRun(worker_id, proc, log, time.monotonic(), extra)
        self.live.append(run)
        return run

    def tick(self) -> None:
        """Reaps exited workers and starts the replacements that are due."""
        while not self.calls.empty():
            call, done = self.calls.get()
            call()
            done.set()
        now = time.monotonic()
        with self.lock:
            for run in [r for r in self.live if r.proc.poll() is not None]:
                run.exited_at = run.exited_at or now
                self.live.remove(run)
                self.done.append(run)
                if not run.extra:
                    self.respawn_at.append(now + RESPAWN_SECONDS)
            due = [t for t in self.respawn_at if t <= now]
            for t in due:
                self.respawn_at.remove(t)
                self.spawn()

    def signal(self, run: WorkerRun, how: str) -> None:
        run.signalled, run.signalled_at = how, time.monotonic()
        sig = signal.SIGKILL if how == "kill" else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.proc.pid, sig)  # the worker alone: it has no children
        if how != "kill":
            threading.Thread(target=self._time_exit, args=(run,), daemon=True).start()

    @staticmethod
    def _time_exit(run: WorkerRun) -> None:
        """Waits for the exit, re-sending the SIGTERM every second as the entrypoint does."""
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(1.0)
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.proc.pid, signal.SIGTERM)
        run.exited_at = time.monotonic()

    def pick(self, rng: random.Random) -> WorkerRun | None:
        with self.lock:
            ready = [r for r in self.live if not r.signalled and "polling" in r.log()]
            return rng.choice(ready) if ready else None

    def stop_all(self) -> None:
        self.respawn_at.clear()  # the run is over: nothing is replaced any more
        for run in list(self.live):
            run.signalled = "end"  # the run is over: not a fault
            procs.stop(run.proc, STOP_TIMEOUT_SECONDS + 10)
        self.tick()


# ---- the jobs ---------------------------------------------------------------------------


def valid_job(rng: random.Random, index: int) -> Job:
    sentences = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
        for _ in range(rng.randint(1, 3))
    ]
    return Job(id=f"job-{index:05d}", text=" ".join(sentences), format=rng.choice(FORMATS))


def poison_bodies(count: int) -> list[str]:
    """Messages that can never succeed, each body unique (found again in the DLQ by it)."""
    kinds = [
        lambda n: f"not json {n}",
        lambda n: json.dumps([n, "a list"]),
        lambda n: json.dumps({"id": f"p{n}-notext"}),
        lambda n: json.dumps({"id": f"p{n}-extra", "text": "Hi.", "colour": "red"}),
        lambda n: json.dumps({"id": f"bad id {n}", "text": "Hi."}),
        lambda n: json.dumps({"id": f"p{n}-long", "text": "word " * (MAX_TEXT_CHARS // 4)}),
        lambda n: json.dumps({"id": f"p{n}-blank", "text": "   "}),
        lambda n: json.dumps({"id": f"p{n}-voice", "text": "Hi.", "voice": "Nobody"}),
        lambda n: json.dumps({"id": f"p{n}-lang", "text": "Hi.", "language": "Klingon"}),
        lambda n: json.dumps({"id": f"p{n}-speed", "text": "Hi.", "speed": 9}),
        lambda n: json.dumps({"id": f"p{n}-fmt", "text": "Hi.", "format": "ogg"}),
        lambda n: json.dumps({"id": f"p{n}-instr", "text": "Hi.", "instructions": "x" * 600}),
        lambda n: json.dumps({"id": f"p{n}-type", "text": 42}),
    ]
    return [kinds[n % len(kinds)](n) for n in range(count)]


class Feeder(threading.Thread):
    """Sends the jobs in waves, keeping at most `backlog` unfinished, with late duplicates."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        jobs: list[Job],
        poison: list[str],
        rng: random.Random,
        done: Any,
        backlog: int,
    ) -> None:
        super().__init__(daemon=True)
        self.sqs, self.queue_url, self.rng, self.done, self.backlog = (
            sqs,
            queue_url,
            rng,
            done,
            backlog,
        )
        bodies = [job.body() for job in jobs]
        for body in poison:  # spread through the run
            bodies.insert(rng.randrange(len(bodies) + 1), body)
        self.bodies, self.sent, self.duplicates = bodies, 0, 0
        self.finished = threading.Event()
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        while self.sent < len(self.bodies):
            room = self.backlog - (self.sent - self.done())
            if room <= 0:
                time.sleep(0.3)
                continue
            wave = self.bodies[self.sent : self.sent + min(room, 50)]
            self._send(wave + self._duplicates())
            self.sent += len(wave)
        self.finished.set()

    def _duplicates(self) -> list[str]:
        """A few jobs sent again after they were (probably) finished: must not be redone."""
        early = [
            b
            for b in self.bodies[: max(0, self.sent - self.backlog)]
            if b.startswith('{"id":"job-')
        ]
        picks = self.rng.sample(early, min(len(early), self.rng.randint(0, 2)))
        self.duplicates += len(picks)
        return picks

    def _send(self, bodies: list[str]) -> None:
        for start in range(0, len(bodies), 10):
            entries = [
                {"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])
            ]
            result = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            assert not result.get("Failed"), result["Failed"]


# ---- the schedule -----------------------------------------------------------------------


class Chaos(threading.Thread):
    """Every 1.5-4 s one fault, drawn from the seed."""

    WEIGHTS: ClassVar[dict[str, float]] = {
        "kill": 5,
        "term": 3,
        "early term": 1,
        "speech down": 1,
        "speech freeze": 1,
        "brownout": 1.5,
    }

    def __init__(
        self, rng: random.Random, fleet: Fleet, speech: Speech, brownout: Brownout
    ) -> None:
        super().__init__(daemon=True)
        self.rng, self.fleet, self.speech, self.brownout = rng, fleet, speech, brownout
        self.stop = threading.Event()
        self.events: Counter[str] = Counter()

    def run(self) -> None:
        names, weights = zip(*self.WEIGHTS.items(), strict=True)
        while not self.stop.wait(self.rng.uniform(1.5, 4.0)):
            event = self.rng.choices(names, weights)[0]
            if getattr(self, "_" + event.replace(" ", "_"))():
                self.events[event] += 1

    def _kill(self) -> bool:
        return self._signal("kill")

    def _term(self) -> bool:
        return self._signal("term")

    def _signal(self, how: str) -> bool:
        run = self.fleet.pick(self.rng)
        if run is not None:
            self.fleet.signal(run, how)
        return run is not None

    def _early_term(self) -> bool:
        started: list[WorkerRun] = []

        def spawn() -> None:
            with self.fleet.lock:
                started.append(self.fleet.spawn(extra=True))

        self.fleet.in_main_thread(spawn)  # one extra worker, stopped inside its imports
        run = started[0]
        self.stop.wait(self.rng.uniform(0.05, 0.5))
        self.fleet.signal(run, "early term")
        return True

    def _speech_down(self) -> bool:
        self.speech.down()
        self.stop.wait(self.rng.uniform(3, 8))
        self.fleet.in_main_thread(self.speech.up)
        return True

    def _speech_freeze(self) -> bool:
        self.speech.freeze(True)
        self.stop.wait(self.rng.uniform(2, 5))
        self.speech.freeze(False)
        return True

    def _brownout(self) -> bool:
        self.brownout.start(self.rng.uniform(4, 9))
        self._kill()  # its replacement starts inside the brownout
        return True


# ---- the run and its figures ------------------------------------------------------------


def aws_env(endpoint: str) -> dict[str, str]:
    return {**os.environ, **emulator_env(endpoint), "PYTHONUNBUFFERED": "1"}


def versions(s3: Any, bucket: str, prefix: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for version in page.get("Versions", []):
            counts[version["Key"]] += 1
    return counts


def drain_dlq(sqs: Any, dlq_url: str) -> list[dict[str, Any]]:
    """Every message in the DLQ (received and deleted: the run is over)."""
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"]
    ).get("Messages", []):
        messages.extend(batch)
        sqs.delete_message_batch(
            QueueUrl=dlq_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )
    return messages


def completed_lines(runs: list[WorkerRun]) -> dict[str, list[str]]:
    """The workers whose EMF lines counted each job id (JobsCompleted), in log order."""
    counts: dict[str, list[str]] = {}
    for run in runs:
        for line in run.log().splitlines():
            if line.startswith("{") and '"JobsCompleted"' in line:
                with contextlib.suppress(ValueError):
                    counts.setdefault(json.loads(line).get("job_id", "?"), []).append(run.worker_id)
    return counts


def manifests_done(s3: Any, bucket: str) -> set[str]:
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="outputs/"):
        keys.update(
            item["Key"] for item in page.get("Contents", []) if item["Key"].endswith(".json")
        )
    return keys


@dataclass
class Rig:
    """Everything one run starts, so that it can all be stopped."""

    logs: Path
    moto: subprocess.Popen[bytes]
    endpoint: str
    sqs: Any
    s3: Any
    stack: StackResources
    brownout: Brownout
    proxy: FaultProxy
    speech: Speech
    fleet: Fleet


def start_rig(seed: int, workers: int) -> Rig:
    logs = Path(tempfile.mkdtemp(prefix=f"tts-chaos-{seed}-"))
    moto, endpoint = procs.start_moto_server(os.environ, logs / "moto.log")
    os.environ.update(aws_env(endpoint))
    sqs, s3 = boto3.client("sqs", region_name=REGION), boto3.client("s3", region_name=REGION)
    stack = create_stack(
        sqs,
        s3,
        "chaos",
        max_receive_count=MAX_RECEIVE_COUNT,
        visibility_timeout=VISIBILITY_TIMEOUT,
        versioned=True,
    )
    brownout = Brownout(random.Random(seed + 1))
    proxy = FaultProxy(endpoint, brownout)
    proxy_url = proxy.start()
    speech = Speech(logs)
    contract = worker_env(
        queue_url=stack.queue_url.replace(endpoint, proxy_url),
        dlq_url=stack.dlq_url.replace(endpoint, proxy_url),
        output_bucket=stack.bucket,
        speech_url=speech.url,
        aws_region=REGION,
        **WORKER,
    )
    fleet = Fleet(workers, {**aws_env(proxy_url), **contract}, logs)
    with fleet.lock:
        for _ in range(workers):
            fleet.spawn()
    return Rig(logs, moto, endpoint, sqs, s3, stack, brownout, proxy, speech, fleet)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    rig = start_rig(args.seed, args.workers)
    jobs = [valid_job(rng, i) for i in range(args.jobs)]
    poison = poison_bodies(args.poison)
    valid_keys = {manifest_key(job.job_id) for job in jobs}
    done = [0]
    feeder = Feeder(rig.sqs, rig.stack.queue_url, jobs, poison, rng, lambda: done[0], args.backlog)
    chaos = Chaos(random.Random(args.seed + 2), rig.fleet, rig.speech, rig.brownout)
    print(f"seed {args.seed}: {len(jobs)} jobs + {len(poison)} poison; logs in {rig.logs}")
    try:
        feeder.start()
        chaos.start()
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            done[0] = len(manifests_done(rig.s3, rig.stack.bucket) & valid_keys)
            print(
                f"  {time.monotonic() - feeder.started_at:5.0f}s {done[0]:5d} done, "
                f"{len(rig.fleet.live)} workers, {dict(chaos.events)}",
                flush=True,
            )
            if feeder.finished.is_set() and done[0] == len(valid_keys):
                break
            tick_for(rig.fleet, 3.0)
        elapsed = time.monotonic() - feeder.started_at
        chaos.stop.set()
        while chaos.is_alive():  # it may be waiting on a main-thread call
            tick_for(rig.fleet, 0.2)
        rig.speech.freeze(False)
        rig.brownout.stop()
        settle(rig)
    finally:
        rig.fleet.stop_all()
        rig.speech.down()
        rig.proxy.stop()
    figures = measure(rig, jobs, poison, feeder, chaos, elapsed)
    procs.stop(rig.moto, 10)
    return figures


def tick_for(fleet: Fleet, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fleet.tick()
        time.sleep(0.1)


def settle(rig: Rig) -> None:
    """After the last manifest: let the workers empty the queue (late duplicates, poison)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(visible_and_in_flight(rig.sqs, rig.stack.queue_url)):
        tick_for(rig.fleet, 1.0)


def measure(
    rig: Rig, jobs: list[Job], poison: list[str], feeder: Feeder, chaos: Chaos, elapsed: float
) -> dict[str, Any]:
    valid = {job.job_id for job in jobs}
    figures = {"jobs": len(jobs), **storage_figures(rig, valid)}
    figures.update(dlq_figures(rig, jobs, poison, valid))
    figures.update(worker_figures(rig.fleet))
    figures.update(metric_figures(rig))
    figures["late duplicates sent"] = feeder.duplicates
    figures["seconds"] = round(elapsed, 1)
    figures["jobs/s"] = round(len(valid) / elapsed, 2) if not figures["lost"] else "-"
    figures["workers started"] = rig.fleet.count
    figures["chaos"] = dict(chaos.events)
    figures["faults injected"] = dict(rig.brownout.injected)
    return figures


def storage_figures(rig: Rig, valid: set[str]) -> dict[str, Any]:
    outputs = versions(rig.s3, rig.stack.bucket, "outputs/")
    manifests = {k: n for k, n in outputs.items() if k.endswith(".json")}
    failures = versions(rig.s3, rig.stack.bucket, "failures/")
    return {
        "lost": len(valid - {job_id(key) for key in manifests}),
        "manifests written twice": sum(1 for n in manifests.values() if n > 1),
        "audio written twice": sum(1 for k, n in outputs.items() if n > 1 and k not in manifests),
        "valid jobs with a failure record": sum(1 for k in failures if job_id(k) in valid),
    }


def dlq_figures(rig: Rig, jobs: list[Job], poison: list[str], valid: set[str]) -> dict[str, Any]:
    bodies = Counter(m["Body"] for m in drain_dlq(rig.sqs, rig.stack.dlq_url))
    valid_bodies = {job.body() for job in jobs}
    failures = versions(rig.s3, rig.stack.bucket, "failures/")
    twice = [body[:40] for body in poison if bodies[body] > 1]
    return {
        "poison in the DLQ": f"{sum(1 for body in poison if bodies[body])}/{len(poison)}",
        "poison failure records": len([k for k in failures if job_id(k) not in valid]),
        "poison in the DLQ twice": f"{len(twice)} {twice if twice else ''}".strip(),
        "valid jobs in the DLQ": sum(n for body, n in bodies.items() if body in valid_bodies),
    }


def worker_figures(fleet: Fleet) -> dict[str, Any]:
    runs = fleet.done + fleet.live
    own = [r for r in fleet.done if not r.signalled]
    termed = [r for r in runs if r.signalled in ("term", "early term")]
    took = [r.exited_at - r.signalled_at for r in termed if r.exited_at]
    inside = [
        r
        for r in termed
        if r.exited_at
        and r.exited_at - r.signalled_at <= STOP_TIMEOUT_SECONDS
        and r.proc.returncode == 0
    ]
    return {
        "workers that exited on their own": len(own),
        "their exit codes": dict(Counter(r.proc.returncode for r in own)),
        "their last error lines": [last_error(r) for r in own][:5],
        "SIGKILLed workers": sum(1 for r in runs if r.signalled == "kill"),
        "SIGTERMed workers out inside their budget": f"{len(inside)}/{len(termed)}",
        "SIGTERM exit codes": dict(Counter(r.proc.returncode for r in termed)),
        "slowest SIGTERM exit (s)": round(max(took, default=0.0), 2),
    }


def metric_figures(rig: Rig) -> dict[str, Any]:
    runs = rig.fleet.done + rig.fleet.live
    by_id = {r.worker_id: r for r in runs}
    completed = completed_lines(runs)
    manifests = {job_id(k) for k in manifests_done(rig.s3, rig.stack.bucket)}
    missing = Counter(why_uncounted(rig, by_id, job) for job in manifests - set(completed))
    twice = Counter(why_twice(by_id, workers) for workers in completed.values() if len(workers) > 1)
    return {
        "JobsCompleted": sum(len(workers) for workers in completed.values()),
        "manifests": len(manifests),
        "JobsCompleted twice for a job": dict(twice) or 0,
        "manifests without JobsCompleted": dict(missing) or 0,
    }


def why_twice(runs: dict[str, WorkerRun], workers: list[str]) -> str:
    """Why a job has two JobsCompleted lines: the first worker's delete never landed. It is
    retried until it does while the worker lives, so that worker was SIGKILLed meanwhile."""
    first = runs.get(workers[0])
    if first is not None and first.signalled == "kill":
        return "first counter SIGKILLed before its delete landed"
    return "other"


def why_uncounted(rig: Rig, runs: dict[str, WorkerRun], job: str) -> str:
    """Why no worker emitted JobsCompleted for this manifest: the line goes out before the
    delete, and a redelivery of the message that made the manifest counts it, so this should
    not happen; the writer's log tells what did."""
    run = runs.get(writer(rig.s3, rig.stack.bucket, job))
    if run is None:
        return "writer unknown"
    return f"writer {run.worker_id} ({run.signalled or 'not signalled'})"


def job_id(key: str) -> str:
    return key.rpartition("/")[2].removesuffix(".json")


def last_error(run: WorkerRun) -> str:
    errors = [line for line in run.log().splitlines() if " ERROR " in line]
    return f"{run.worker_id}: {errors[-1][24:140] if errors else '(no ERROR line)'}"


def writer(s3: Any, bucket: str, job: str) -> str:
    body = s3.get_object(Bucket=bucket, Key=manifest_key(job))["Body"].read()
    return str(json.loads(body).get("worker", ""))


DONE_WHEN = {
    "lost": 0,
    "manifests written twice": 0,
    "valid jobs in the DLQ": 0,
    "workers that exited on their own": 0,
}


def verdict(figures: dict[str, Any]) -> list[str]:
    """The Done-when figures of issue #12 that this run missed."""
    missed = [
        f"{name} = {figures[name]}" for name, want in DONE_WHEN.items() if figures[name] != want
    ]
    inside, termed = figures["SIGTERMed workers out inside their budget"].split("/")
    if inside != termed:
        missed.append(f"SIGTERMed workers out inside their budget = {inside}/{termed}")
    if figures["JobsCompleted"] != figures["manifests"]:
        missed.append(
            f"JobsCompleted {figures['JobsCompleted']} != manifests {figures['manifests']}"
        )
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--poison", type=int, default=39, help="poison messages (13 kinds)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=150, help="most jobs queued at a time")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    figures = run(args)
    width = max(map(len, figures))
    for name, value in figures.items():
        print(f"{name:<{width}}  {value}")
    missed = verdict(figures)
    print("PASS" if not missed else "FAIL: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
