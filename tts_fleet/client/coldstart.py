"""What a stack's cold starts took, phase by phase: the `ColdStartSeconds` lines its workers
write (worker/coldstart.py), read back as p50 and p95 per phase and instance type, and turned
into a timing profile for the simulator (`simulate --timing measured`).

Three sources of the same figures:

- `metrics` (the default): CloudWatch's own percentiles, `GetMetricStatistics` with the
  extended statistics p50 and p95 over the whole window as one period, for every
  (Phase, InstanceType) series `ListMetrics` finds under the stack's `Stack` dimension.
- `logs`: the EMF lines themselves from the worker's log group (`FilterLogEvents`), the
  percentiles computed here (tts_fleet/stats.py). Also what works on an emulator: moto keeps
  log events but does not aggregate percentiles.
- `file`: EMF lines saved from a worker's stdout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from tts_fleet.scaling.physics import DEFAULT_PROFILE, Profile
from tts_fleet.stats import percentile
from worker.metrics import (
    CACHE,
    CANARY,
    COLD_START_DIMENSIONS,
    COLD_START_PHASES,
    COLD_START_SECONDS,
    INSTANCE_TYPE_DIMENSION,
    NAMESPACE,
    PHASE_DIMENSION,
    PROVISION,
    PULL,
    SERVER,
    STACK_DIMENSION,
    WEIGHTS,
)

DAY_S = 86_400
# GetMetricStatistics: a window starting more than 63 days ago needs a period that is a
# multiple of 3600 s; whole days are. CloudWatch keeps hourly data for 455 days.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricStatistics.html
MAX_DAYS = 455
MEASURED = "measured"  # the timing profile `simulate --timing measured` builds from these


class ColdStartError(Exception):
    """Nothing to report, or a source that cannot be read; `str(error)` is one line."""


@dataclass(frozen=True)
class PhaseFigures:
    phase: str
    instance_type: str
    count: int
    p50: float
    p95: float

    def as_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "instanceType": self.instance_type,
            "count": self.count,
            "p50": round(self.p50, 3),
            "p95": round(self.p95, 3),
        }


def _order(figures: Iterable[PhaseFigures]) -> list[PhaseFigures]:
    rank = {phase: i for i, phase in enumerate(COLD_START_PHASES)}
    return sorted(figures, key=lambda f: (rank.get(f.phase, len(rank)), f.phase, f.instance_type))


# ---- EMF lines (logs, files) ----------------------------------------------------------------


def samples(lines: Iterable[str], stack: str) -> Iterator[tuple[str, str, float]]:
    """(phase, instance type, seconds) of each ColdStartSeconds line of `stack`. Anything else
    (other metrics, other stacks, log lines, malformed JSON) is skipped: a log is untrusted
    text, and one bad line must not hide the rest."""
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get(STACK_DIMENSION) != stack:
            continue
        seconds, phase = record.get(COLD_START_SECONDS), record.get(PHASE_DIMENSION)
        kind = record.get(INSTANCE_TYPE_DIMENSION)
        if isinstance(phase, str) and isinstance(kind, str) and _finite(seconds):
            yield phase, kind, float(seconds)


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def summarize(found: Iterable[tuple[str, str, float]]) -> list[PhaseFigures]:
    """p50 and p95 (nearest rank) per phase and instance type."""
    series: dict[tuple[str, str], list[float]] = {}
    for phase, kind, seconds in found:
        series.setdefault((phase, kind), []).append(seconds)
    figures = []
    for (phase, kind), values in series.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        assert p50 is not None and p95 is not None  # every series has a value
        figures.append(PhaseFigures(phase, kind, len(values), p50, p95))
    return _order(figures)


def from_lines(lines: Iterable[str], stack: str) -> list[PhaseFigures]:
    return summarize(samples(lines, stack))


def from_logs(logs: Any, log_group: str, stack: str, days: float, now: float) -> list[PhaseFigures]:
    """The stack's ColdStartSeconds lines in `log_group` over the last `days`."""
    pages = logs.get_paginator("filter_log_events").paginate(
        logGroupName=log_group,
        startTime=int((now - days * DAY_S) * 1000),
        endTime=int(now * 1000),
        filterPattern=f'"{COLD_START_SECONDS}"',
    )
    lines = (event["message"] for page in pages for event in page.get("events", []))
    return from_lines(lines, stack)


# ---- CloudWatch metrics ---------------------------------------------------------------------


def series(cloudwatch: Any, stack: str) -> list[tuple[str, str]]:
    """(phase, instance type) of every ColdStartSeconds series of `stack`."""
    found = set()
    pages = cloudwatch.get_paginator("list_metrics").paginate(
        Namespace=NAMESPACE,
        MetricName=COLD_START_SECONDS,
        Dimensions=[{"Name": STACK_DIMENSION, "Value": stack}],
    )
    for page in pages:
        for metric in page.get("Metrics", []):
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            if set(dims) == set(COLD_START_DIMENSIONS):
                found.add((dims[PHASE_DIMENSION], dims[INSTANCE_TYPE_DIMENSION]))
    return sorted(found)


def from_metrics(cloudwatch: Any, stack: str, days: int, now: float) -> list[PhaseFigures]:
    """CloudWatch's p50 and p95 of each series over the window, as one period."""
    figures = []
    for phase, kind in series(cloudwatch, stack):
        answer = cloudwatch.get_metric_statistics(
            Namespace=NAMESPACE,
            MetricName=COLD_START_SECONDS,
            Dimensions=[
                {"Name": STACK_DIMENSION, "Value": stack},
                {"Name": PHASE_DIMENSION, "Value": phase},
                {"Name": INSTANCE_TYPE_DIMENSION, "Value": kind},
            ],
            StartTime=now - days * DAY_S,
            EndTime=now,
            Period=days * DAY_S,
            Statistics=["SampleCount"],
            ExtendedStatistics=["p50", "p95"],
            Unit="Seconds",
        )
        for point in answer.get("Datapoints", []):
            extended = point.get("ExtendedStatistics", {})
            if "p50" in extended and "p95" in extended:
                count = int(point.get("SampleCount", 0))
                figures.append(PhaseFigures(phase, kind, count, extended["p50"], extended["p95"]))
    return _order(figures)


# ---- the simulator's profile ----------------------------------------------------------------


def pooled_p50(figures: Iterable[PhaseFigures], phase: str) -> float | None:
    """One phase's p50 over every instance type, weighted by its sample count."""
    chosen = [f for f in figures if f.phase == phase and f.count > 0]
    total = sum(f.count for f in chosen)
    return sum(f.p50 * f.count for f in chosen) / total if total else None


def measured_profile(figures: list[PhaseFigures], base: Profile = DEFAULT_PROFILE) -> Profile:
    """`base` with its cold path replaced by what the stack measured (p50s over all instance
    types, weighted by their counts); a phase never measured keeps `base`'s figure.

    - pull: the pull seconds at the base's image size (pull_mb_per_s = image / pull);
    - provision (task created → container started) less placement and pull: the host's
      provisioning; its spread (p95 − p50) sets the jitter, since the model draws
      base + uniform(0, jitter) and a uniform's p95 − p50 is 0.45 of its width;
    - weights + cache + server: the model load; canary: the warm-up before the first job.
    """
    if not figures:
        raise ColdStartError("no ColdStartSeconds figures to build a timing profile from")
    p50 = {phase: pooled_p50(figures, phase) for phase in COLD_START_PHASES}
    profile = replace(base, name=MEASURED)
    pull = p50[PULL]
    if pull is not None and pull > 0:
        profile = replace(profile, pull_mb_per_s=base.image_gb * 1000.0 / pull)
    provision = p50[PROVISION]
    if provision is not None:
        spread = [f.p95 - f.p50 for f in figures if f.phase == PROVISION]
        jitter = max(0.0, max(spread) / 0.45) if spread else 0.0
        host = provision - profile.task_placement_s - profile.pull_s - jitter / 2
        profile = replace(
            profile, host_provisioning_s=max(0.0, host), host_provisioning_jitter_s=jitter
        )
    load = [p50[phase] for phase in (WEIGHTS, CACHE, SERVER) if p50[phase] is not None]
    if load:
        profile = replace(profile, model_load_s=sum(v for v in load if v is not None))
    canary = p50[CANARY]
    if canary is not None:
        profile = replace(profile, warmup_s=canary)
    return profile


def window_days(days: float) -> int:
    """--days as whole days (the metrics period), 1..MAX_DAYS."""
    whole = math.ceil(days)
    if not 1 <= whole <= MAX_DAYS:
        raise ColdStartError(f"--days must be between 1 and {MAX_DAYS} (got {days:g})")
    return whole


def read_figures(
    stack: str,
    days: float,
    *,
    cloudwatch: Any = None,
    logs: Any = None,
    log_group: str | None = None,
    lines: Iterable[str] | None = None,
    now: float,
) -> tuple[str, list[PhaseFigures]]:
    """(source, figures) from the one source given: recorded `lines`, a `log_group` read with
    `logs`, else CloudWatch's metrics with `cloudwatch`."""
    if lines is not None:
        return "file", from_lines(lines, stack)
    if log_group is not None:
        return "logs", from_logs(logs, log_group, stack, days, now)
    return "metrics", from_metrics(cloudwatch, stack, window_days(days), now)
