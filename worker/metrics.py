"""CloudWatch Embedded Metric Format lines on stdout (DESIGN §5.7): no PutMetricData calls.

In ECS the awslogs driver ships stdout to CloudWatch Logs, which turns each line into metrics
in the `TtsFleet` namespace; the dashboard graphs them. Every metric carries one dimension,
`Stack` (STACK_NAME, written by the task definition), so two stacks in one account and region
keep separate series and each dashboard reads only its own.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

# The metric contract: the stack's dashboard (components/observability.py) graphs these.
NAMESPACE = "TtsFleet"
JOBS_COMPLETED = "JobsCompleted"
JOBS_FAILED = "JobsFailed"
SYNTH_SECONDS = "SynthSeconds"
AUDIO_SECONDS = "AudioSeconds"
QUEUE_WAIT_SECONDS = "QueueWaitSeconds"
UNITS = {
    JOBS_COMPLETED: "Count",
    JOBS_FAILED: "Count",
    SYNTH_SECONDS: "Seconds",
    AUDIO_SECONDS: "Seconds",
    QUEUE_WAIT_SECONDS: "Seconds",
}
METRIC_NAMES = frozenset(UNITS)
# The output checks (worker/qa/): renderings of a piece checked, those a check rejected (each
# line also names the checks, `rejected_by`), and jobs that failed on quality (also JobsFailed).
PIECES_CHECKED = "PiecesChecked"
PIECES_REJECTED = "PiecesRejected"
JOBS_FAILED_ON_QUALITY = "JobsFailedOnQuality"
UNITS.update({PIECES_CHECKED: "Count", PIECES_REJECTED: "Count", JOBS_FAILED_ON_QUALITY: "Count"})
QA_METRIC_NAMES = frozenset({PIECES_CHECKED, PIECES_REJECTED, JOBS_FAILED_ON_QUALITY})
STACK_DIMENSION = "Stack"
# A dimension value must be 1-1024 characters; a worker started outside a stack says so.
UNNAMED_STACK = "none"


class Metrics:
    """Thread-safe: one line per event, written whole."""

    def __init__(self, stream: TextIO | None = None, stack: str = "") -> None:
        self._stream = stream
        self._stack = stack or UNNAMED_STACK
        self._lock = threading.Lock()

    def emit(self, values: dict[str, float], **properties: Any) -> None:
        unknown = set(values) - set(UNITS)
        if unknown:
            raise ValueError(f"unknown metrics {sorted(unknown)}")
        record: dict[str, Any] = {
            "_aws": {
                "Timestamp": int(time.time() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": [[STACK_DIMENSION]],
                        "Metrics": [{"Name": name, "Unit": UNITS[name]} for name in values],
                    }
                ],
            },
            **properties,
            STACK_DIMENSION: self._stack,  # after the properties: no caller can relabel it
            **values,
        }
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            stream = self._stream or sys.stdout
            stream.write(line + "\n")
            stream.flush()

    def completed(
        self, synth_s: float, audio_s: float | None, queue_wait_s: float, **properties: Any
    ) -> None:
        values = {
            JOBS_COMPLETED: 1.0,
            SYNTH_SECONDS: round(synth_s, 3),
            QUEUE_WAIT_SECONDS: round(queue_wait_s, 3),
        }
        if audio_s is not None:
            values[AUDIO_SECONDS] = round(audio_s, 3)
        self.emit(values, **properties)

    def failed(self, **properties: Any) -> None:
        self.emit({JOBS_FAILED: 1.0}, **properties)

    def checked(
        self, checked: int, rejected: int, rejected_by: dict[str, int], **properties: Any
    ) -> None:
        """One job's output checks: renderings checked, those rejected and by which checks (a
        rendering failing two checks counts once in PiecesRejected, once under each check)."""
        values = {PIECES_CHECKED: float(checked), PIECES_REJECTED: float(rejected)}
        self.emit(values, rejected_by=rejected_by, **properties)

    def failed_on_quality(self, **properties: Any) -> None:
        """A job that failed its output checks: a failed job, counted in both series."""
        self.emit({JOBS_FAILED: 1.0, JOBS_FAILED_ON_QUALITY: 1.0}, **properties)


# ---- the cold start (worker/coldstart.py) --------------------------------------------
# One line per phase, so each carries its own `Phase` dimension beside `Stack` and the
# `InstanceType` (a figure that differs by GPU type is read per type). Read back by
# `tts-fleet coldstart` (tts_fleet/client/coldstart.py).
COLD_START_SECONDS = "ColdStartSeconds"
PHASE_DIMENSION = "Phase"
INSTANCE_TYPE_DIMENSION = "InstanceType"
COLD_START_DIMENSIONS = (STACK_DIMENSION, PHASE_DIMENSION, INSTANCE_TYPE_DIMENSION)
# The phases, in the order a cold start goes through them (worker/coldstart.py says what each
# spans); `total` is the whole of it, task created → first job done.
PROVISION = "provision"
PULL = "pull"
WEIGHTS = "weights"
CACHE = "cache"
SERVER = "server"
CANARY = "canary"
FIRST_JOB = "first-job"
TOTAL = "total"
COLD_START_PHASES = (PROVISION, PULL, WEIGHTS, CACHE, SERVER, CANARY, FIRST_JOB, TOTAL)


def cold_start_record(
    stack: str, phase: str, seconds: float, instance_type: str, timestamp_ms: int
) -> dict[str, Any]:
    """The EMF record of one phase (the writer below and the readers share this shape)."""
    return {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [list(COLD_START_DIMENSIONS)],
                    "Metrics": [{"Name": COLD_START_SECONDS, "Unit": "Seconds"}],
                }
            ],
        },
        STACK_DIMENSION: stack or UNNAMED_STACK,
        PHASE_DIMENSION: phase,
        INSTANCE_TYPE_DIMENSION: instance_type,
        COLD_START_SECONDS: round(seconds, 3),
    }


class ColdStartMetrics:
    """Writes `ColdStartSeconds` lines to the stream of a `Metrics` (one line, written whole)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def emit(self, phase: str, seconds: float, instance_type: str) -> None:
        m = self._metrics
        record = cold_start_record(m._stack, phase, seconds, instance_type, int(time.time() * 1000))
        line = json.dumps(record, separators=(",", ":"))
        with m._lock:
            stream = m._stream or sys.stdout
            stream.write(line + "\n")
            stream.flush()


# ---- measured throughput (worker/throughput.py) ------------------------------------------
# Audio seconds produced per wall second at the worker's concurrency, over its rolling window,
# one line per completed job; per `InstanceType` beside `Stack`, since eligible types differ in
# real throughput. A planner's drain-time estimate reads it back.
AUDIO_SECONDS_PER_SECOND = "AudioSecondsPerSecond"
THROUGHPUT_DIMENSIONS = (STACK_DIMENSION, INSTANCE_TYPE_DIMENSION)


def throughput_record(
    stack: str, instance_type: str, audio_s_per_s: float, timestamp_ms: int, **properties: Any
) -> dict[str, Any]:
    """The EMF record of one rate sample (the writer below and any reader share this shape)."""
    return {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [list(THROUGHPUT_DIMENSIONS)],
                    "Metrics": [{"Name": AUDIO_SECONDS_PER_SECOND, "Unit": "None"}],
                }
            ],
        },
        **properties,
        STACK_DIMENSION: stack or UNNAMED_STACK,
        INSTANCE_TYPE_DIMENSION: instance_type,
        AUDIO_SECONDS_PER_SECOND: round(audio_s_per_s, 3),
    }


class ThroughputMetrics:
    """Writes `AudioSecondsPerSecond` lines to the stream of a `Metrics` (one line, whole)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def emit(self, audio_s_per_s: float, instance_type: str, **properties: Any) -> None:
        m = self._metrics
        now = int(time.time() * 1000)
        record = throughput_record(m._stack, instance_type, audio_s_per_s, now, **properties)
        line = json.dumps(record, separators=(",", ":"))
        with m._lock:
            stream = m._stream or sys.stdout
            stream.write(line + "\n")
            stream.flush()
