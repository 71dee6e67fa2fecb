"""The cold start of one GPU task, phase by phase (issue 24): what each phase took, emitted as
`ColdStartSeconds` EMF lines (worker/metrics.py) with the `Phase` and `InstanceType`.

Where each boundary comes from:

- ECS, through the task metadata endpoint v4 (`${ECS_CONTAINER_METADATA_URI_V4}/task`):
  the task's `PullStartedAt` and `PullStoppedAt` and the container's `StartedAt`. The
  endpoint has no task creation time, so `createdAt` comes from `ecs:DescribeTasks` on the
  task's own ARN when the task role may call it; without it `provision` is left out.
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-managed-instances-response.html
  https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html
- worker/entrypoint.sh, which appends `<mark> <epoch seconds>` lines to the file named by
  COLDSTART_MARKS as it fetches the weights, restores the compile cache and starts vLLM.
- This process: the canary synthesis (worker/startup.py check_model) and the first job done.

Phases: provision (task created → container started: host, ENI, image pull), pull
(PullStartedAt → PullStoppedAt, inside provision), weights (the S3 fetch), cache (the
compile-cache restore), server (vLLM start → /health), canary (the test synthesis),
first-job (worker ready → first job done) and total (task created, else the pull's start,
else the container's start → first job done). A phase whose boundaries are unknown is not
emitted rather than guessed.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from worker.metrics import (
    CACHE,
    CANARY,
    COLD_START_PHASES,
    FIRST_JOB,
    PROVISION,
    PULL,
    SERVER,
    TOTAL,
    WEIGHTS,
)

log = logging.getLogger("worker")

PHASES = COLD_START_PHASES
STARTUP_PHASES = (PROVISION, PULL, WEIGHTS, CACHE, SERVER, CANARY)

# The marks worker/entrypoint.sh writes, as (start, end) per phase it times.
ENTRYPOINT_MARKS = {
    WEIGHTS: ("weights-start", "weights-end"),
    CACHE: ("cache-start", "cache-end"),
    SERVER: ("server-start", "server-healthy"),
}
MARKS_ENV = "COLDSTART_MARKS"
METADATA_ENV = "ECS_CONTAINER_METADATA_URI_V4"
# The instance type: INSTANCE_TYPE when set (a test, a host without IMDS), else IMDSv2.
INSTANCE_TYPE_ENV = "INSTANCE_TYPE"
IMDS_ENV = "IMDS_URL"
IMDS_URL = "http://169.254.169.254"
UNKNOWN_INSTANCE_TYPE = "unknown"
HTTP_TIMEOUT_SECONDS = 2.0
# ISO 8601 as the agent writes it: up to nine fractional digits, which datetime does not read.
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?$")


def parse_time(text: str) -> float:
    """Epoch seconds of an ECS agent timestamp (`2025-10-02T00:43:06.202617438Z`)."""
    match = _ISO.match(text.strip())
    if not match:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}")
    whole, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(whole + (zone or "Z").replace("Z", "+00:00"))
    return stamp.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


@dataclass(frozen=True)
class TaskTimes:
    """What ECS says about this task, in epoch seconds (None: not known)."""

    created: float | None = None
    pull_started: float | None = None
    pull_stopped: float | None = None
    container_started: float | None = None


def task_times(metadata: Mapping[str, Any], created: float | None = None) -> TaskTimes:
    """The boundaries in a v4 `/task` answer. The container start is the earliest `StartedAt`
    of the task's containers (the worker task has one; agent-internal ones carry none)."""

    def stamp(value: object) -> float | None:
        try:
            return parse_time(value) if isinstance(value, str) else None
        except ValueError:
            return None

    containers = metadata.get("Containers")
    starts = [
        s
        for c in (containers if isinstance(containers, list) else [])
        if isinstance(c, dict) and (s := stamp(c.get("StartedAt"))) is not None
    ]
    return TaskTimes(
        created=created,
        pull_started=stamp(metadata.get("PullStartedAt")),
        pull_stopped=stamp(metadata.get("PullStoppedAt")),
        container_started=min(starts) if starts else None,
    )


def read_marks(path: str | Path | None) -> dict[str, float]:
    """The entrypoint's marks (`name epoch` per line; the last of a name wins). A missing file
    or a malformed line is no mark: timing never stops a worker."""
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    marks: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        try:
            marks[name] = float(value)
        except ValueError:
            continue
    return marks


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return round(end - start, 3)


def startup_phases(
    times: TaskTimes, marks: Mapping[str, float], canary: tuple[float, float] | None
) -> dict[str, float]:
    """The phases known once the worker is ready, in order; unknown ones left out."""
    found: dict[str, float | None] = {
        PROVISION: _span(times.created, times.container_started),
        PULL: _span(times.pull_started, times.pull_stopped),
    }
    for phase, (start, end) in ENTRYPOINT_MARKS.items():
        found[phase] = _span(marks.get(start), marks.get(end))
    found[CANARY] = _span(*canary) if canary else None
    return {phase: value for phase, value in found.items() if value is not None}


def first_job_phases(times: TaskTimes, ready_at: float | None, done_at: float) -> dict[str, float]:
    """first-job (worker ready → first job done) and total (task start → first job done)."""
    origin = next(
        (t for t in (times.created, times.pull_started, times.container_started) if t), None
    )
    found = {FIRST_JOB: _span(ready_at, done_at), TOTAL: _span(origin, done_at)}
    return {phase: value for phase, value in found.items() if value is not None}


# ---- where the figures come from in a task ------------------------------------------------


def _get_json(url: str, headers: Mapping[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as answer:
        return json.loads(answer.read())


def fetch_task_times(
    environ: Mapping[str, str], describe_tasks: Callable[[str, str], Any] | None
) -> TaskTimes:
    """The task's boundaries from the metadata endpoint (none outside ECS), and its creation
    time from DescribeTasks when `describe_tasks(cluster, task_arn)` is given and answers."""
    base = environ.get(METADATA_ENV)
    if not base:
        return TaskTimes()
    try:
        metadata = _get_json(f"{base}/task")
    except (OSError, ValueError) as error:
        log.warning("cold start: no task metadata from %s: %s", base, error)
        return TaskTimes()
    created = None
    if describe_tasks is not None:
        try:
            answer = describe_tasks(str(metadata.get("Cluster", "")), str(metadata["TaskARN"]))
            value = answer["tasks"][0]["createdAt"]
            created = value.timestamp() if isinstance(value, datetime) else float(value)
        except Exception as error:  # denied, throttled, absent: provision is left out
            log.warning("cold start: no task creation time (ecs:DescribeTasks): %s", error)
    return task_times(metadata, created)


def instance_type(environ: Mapping[str, str]) -> str:
    """INSTANCE_TYPE, else the instance metadata service (IMDSv2), else `unknown`."""
    return instance_metadata(environ, "instance-type", INSTANCE_TYPE_ENV)


def instance_metadata(environ: Mapping[str, str], name: str, override_env: str) -> str:
    """`override_env` when set, else IMDSv2's `meta-data/<name>`, else `unknown`."""
    if environ.get(override_env):
        return environ[override_env]
    base = environ.get(IMDS_ENV, IMDS_URL)
    try:
        token_request = urllib.request.Request(
            f"{base}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        )
        with urllib.request.urlopen(token_request, timeout=HTTP_TIMEOUT_SECONDS) as answer:
            token = answer.read().decode()
        request = urllib.request.Request(
            f"{base}/latest/meta-data/{name}",
            headers={"X-aws-ec2-metadata-token": token},
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as answer:
            return answer.read().decode().strip() or UNKNOWN_INSTANCE_TYPE
    except OSError:
        return UNKNOWN_INSTANCE_TYPE


class ColdStart:
    """This task's record. Three things arrive in any order, on any thread: the context
    (`known(...)`: what ECS and the entrypoint say, fetched off the start-up path), the
    canary (`ready(...)`) and the first job done (`job_done()`, called for every job; only
    the first counts). Each phase is emitted once, as soon as its boundaries are known."""

    def __init__(
        self, emit: Callable[[str, float, str], None], clock: Callable[[], float] = time.time
    ) -> None:
        self._emit, self._clock = emit, clock
        self._lock = threading.Lock()
        self._context: tuple[TaskTimes, dict[str, float], str] | None = None
        self._canary: tuple[float, float] | None = None
        self._done_at: float | None = None
        self.emitted: dict[str, float] = {}

    def known(self, times: TaskTimes, marks: Mapping[str, float], instance: str) -> None:
        with self._lock:
            self._context = (times, dict(marks), instance)
            self._flush()

    def ready(self, canary_started: float, canary_ended: float) -> None:
        with self._lock:
            self._canary = (canary_started, canary_ended)
            self._flush()

    def job_done(self) -> None:
        with self._lock:
            if self._done_at is None:
                self._done_at = self._clock()
                self._flush()

    def _flush(self) -> None:
        if self._context is None:
            return
        times, marks, instance = self._context
        phases: dict[str, float] = {}
        if self._canary is not None:
            phases.update(startup_phases(times, marks, self._canary))
        if self._done_at is not None:
            ready_at = self._canary[1] if self._canary else None
            phases.update(first_job_phases(times, ready_at, self._done_at))
        new = {p: s for p, s in phases.items() if p not in self.emitted}
        for phase, seconds in new.items():
            self._emit(phase, seconds, instance)
        self.emitted.update(new)
        if new:
            log.info(
                "cold start on %s: %s", instance, ", ".join(f"{p} {s:.1f}s" for p, s in new.items())
            )


def gather(
    record: ColdStart,
    environ: Mapping[str, str],
    describe_tasks: Callable[[str, str], Any] | None,
) -> None:
    """Reads what ECS, the host and the entrypoint say, and hands it to `record`. Outside
    ECS (no metadata endpoint) the instance metadata service is not asked either: a laptop or
    a test would wait out its timeouts for nothing."""
    in_ecs = bool(environ.get(METADATA_ENV))
    times = fetch_task_times(environ, describe_tasks)
    instance = (
        instance_type(environ)
        if in_ecs or environ.get(INSTANCE_TYPE_ENV)
        else UNKNOWN_INSTANCE_TYPE
    )
    record.known(times, read_marks(environ.get(MARKS_ENV)), instance)
