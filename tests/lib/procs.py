"""Shared process helpers for integration tests: speech server, workers, queues, waits.

    with start_speech_server("tone", latency_ms=200) as speech:
        names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=5)
        with Processes() as procs:
            worker = procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
            wait_for(lambda: len(list_keys(s3, names["bucket"], "outputs/")) == 2, 60)

Every process writes its stdout/stderr to files (never pipes, so nothing blocks); `.log()`
reads them. Always stop what you start: use the context managers or `Processes`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tts_fleet.local import procs as local_procs
from tts_fleet.local.emulator import create_stack

# The emulator's one queue-counts reader, named here for the tests that import it from here.
from tts_fleet.local.emulator import visible_and_in_flight as visible_and_in_flight
from worker.settings import ENV_NAMES
from worker.settings import worker_env as settings_env

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

# Worker settings that make faults resolve in seconds instead of minutes.
WORKER_TEST_DEFAULTS = settings_env(
    wait_time_seconds=1,
    visibility_timeout=5,
    heartbeat_seconds=1,
    stop_timeout_seconds=10,
    health_timeout_seconds=30,
    retry_base_seconds=1,
    retry_max_seconds=4,
    speech_retries=1,
    concurrency=4,
)


def _logfile(prefix: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=f"tts-{prefix}-", suffix=".log")
    os.close(handle)
    return Path(name)


def wait_for(
    predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.2, what: str = ""
) -> T:
    """Polls until predicate() is truthy and returns its value; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after timeout; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


@dataclass
class SpeechServer:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int

    def stop(self) -> None:
        stop_process(self.proc, 5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> SpeechServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_speech_server(
    backend: str = "espeak",
    port: int = 0,
    host: str = "127.0.0.1",
    latency_ms: float | None = None,
    batch_exponent: float | None = None,
    timeout: float = 30.0,
    extra_args: tuple[str, ...] = (),
) -> SpeechServer:
    """The local fleet's own start (`tts_fleet.local.procs.start_speech_server`), with the
    test-only knobs passed through as its flags."""
    assert host == "127.0.0.1", "the speech stand-in listens on loopback only"
    extra = [*extra_args]
    if batch_exponent is not None:
        extra += ["--batch-exponent", str(batch_exponent)]
    log_path = _logfile(f"speech-{backend}")
    proc, url = local_procs.start_speech_server(
        backend, latency_ms or 0.0, os.environ, log_path, timeout, port=port,
        extra_args=tuple(extra),
    )  # fmt: skip
    return SpeechServer(url, proc, log_path, int(url.rsplit(":", 1)[1]))


class WorkerProcess(subprocess.Popen[bytes]):
    """A `python -m worker` subprocess; stdout (EMF metrics) and stderr (logs) go to files."""

    stdout_path: Path
    stderr_path: Path
    worker_id: str

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def metrics(self) -> str:
        return self.stdout_path.read_text(errors="replace")


def worker_env(env: dict[str, str], **overrides: Any) -> dict[str, str]:
    """Test defaults, then `env`, then `overrides`: worker variables, each one it reads (so a
    test cannot set a renamed variable that the worker would silently ignore)."""
    unknown = sorted(set(overrides) - ENV_NAMES)
    if unknown:
        raise TypeError(f"the worker reads no {', '.join(unknown)}")
    merged = {
        **settings_env(worker_id=f"test-worker-{time.monotonic_ns() % 10**9}"),
        **WORKER_TEST_DEFAULTS,
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    merged.update({key: str(value) for key, value in overrides.items()})
    return merged


def start_worker(env: dict[str, str], **overrides: Any) -> WorkerProcess:
    """Starts `python -m worker` with test defaults (WAIT_TIME_SECONDS=1, visibility 5 s, …).

    `env` is usually the `aws_env` fixture; overrides are env variables (QUEUE_URL=…)."""
    full = worker_env(env, **overrides)
    out, err = _logfile("worker-out"), _logfile("worker-err")
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = WorkerProcess(
            [sys.executable, "-m", "worker"], cwd=ROOT, env=full, stdout=stdout, stderr=stderr
        )
    proc.stdout_path, proc.stderr_path, proc.worker_id = out, err, full["WORKER_ID"]
    return proc


def env_for(names: dict[str, str]) -> dict[str, str]:
    """Worker env variables for the dict that make_queues_and_bucket returns."""
    return settings_env(
        queue_url=names["queue_url"], dlq_url=names["dlq_url"], output_bucket=names["bucket"]
    )


@dataclass
class Processes:
    """Kills everything added to it on exit (SIGTERM, then SIGKILL)."""

    procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    def add(self, proc: subprocess.Popen[Any]) -> Any:
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(10)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- AWS (emulator) helpers -----------------------------------------------------------


def make_queues_and_bucket(
    sqs: Any,
    s3: Any,
    max_receive_count: int = 3,
    visibility_timeout: int = 5,
    name: str = "jobs",
    versioning: bool = True,
) -> dict[str, str]:
    """`create_stack` with the tests' defaults (versioned, so PUTs can be counted), as the
    dict `env_for` takes."""
    created = create_stack(
        sqs,
        s3,
        name,
        max_receive_count=max_receive_count,
        visibility_timeout=visibility_timeout,
        versioned=versioning,
    )
    return dataclasses.asdict(created)


def list_keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return sorted(keys)


def version_counts(s3: Any, bucket: str, prefix: str = "") -> dict[str, int]:
    """PUTs per key in a versioned bucket (each PUT is one version)."""
    counts: dict[str, int] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for version in page.get("Versions", []):
            counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    return counts


def wait_for_keys(s3: Any, bucket: str, keys: set[str], timeout: float = 60.0) -> None:
    def present() -> bool:
        return keys <= set(list_keys(s3, bucket))

    wait_for(present, timeout, 0.3, f"{len(keys)} keys in s3://{bucket}")


def receive_all(sqs: Any, queue_url: str, expected: int, timeout: float = 30.0) -> list[dict]:
    """Receives (without deleting) until `expected` distinct messages were seen."""
    seen: dict[str, dict] = {}

    def enough() -> bool:
        for message in sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=60,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", []):
            seen[message["MessageId"]] = message
        return len(seen) >= expected

    wait_for(enough, timeout, 0.1, f"{expected} messages in {queue_url}")
    return list(seen.values())


def wait_for_log(proc: WorkerProcess, pattern: str, count: int = 1, timeout: float = 60.0) -> str:
    """Waits until the worker's log matches `pattern` at least `count` times."""

    def matched() -> str:
        text = proc.log()
        return text if len(re.findall(pattern, text)) >= count else ""

    return wait_for(matched, timeout, 0.2, f"{count}× /{pattern}/ in the worker log")
