"""Workload traces for the simulator: sorted arrival times in seconds from t = 0.

Specs: `burst:N`, `bursts:N:every_hours:hours` (N jobs at once, repeatedly),
`poisson:rate_per_min:hours`, `sparse:gap_minutes:hours`,
`diurnal:peak_per_min:days`, a path to a CSV of timestamps, or CloudWatch history of the
stack's queue (`cloudwatch_arrivals`). Each returns a `Trace`; bad specs raise TraceError with
one readable line.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# CloudWatch keeps 1-minute datapoints for 15 days, 5-minute ones for 63 days, hourly ones for
# 455 days. https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html
_RETENTION_BY_PERIOD = ((15, 60), (63, 300), (455, 3600))
# GetMetricData returns at most 100,800 datapoints per call; longer ranges page with NextToken.
SQS_NAMESPACE = "AWS/SQS"
SENT_METRIC = "NumberOfMessagesSent"


class TraceError(ValueError):
    """A trace spec or file that cannot be read; the message is one line."""


@dataclass(frozen=True)
class Trace:
    name: str
    arrivals: tuple[float, ...]  # seconds from t = 0, sorted
    horizon_s: float  # how long the trace covers (≥ the last arrival)


def parse_trace(spec: str, seed: int = 0) -> Trace:
    """A trace from its spec; random traces are drawn from `random.Random(seed)`."""
    kind, _, rest = spec.partition(":")
    args = rest.split(":") if rest else []
    builders = {
        "burst": _burst,
        "bursts": _bursts,
        "poisson": _poisson,
        "sparse": _sparse,
        "diurnal": _diurnal,
    }
    if kind in builders:
        return builders[kind](spec, args, random.Random(seed))
    if Path(spec).suffix.lower() == ".csv" or Path(spec).exists():
        return csv_trace(Path(spec))
    raise TraceError(
        f"unknown trace {spec!r}: use burst:N, bursts:N:EVERY_HOURS:HOURS, "
        "poisson:RATE_PER_MIN:HOURS, sparse:GAP_MINUTES:HOURS, diurnal:PEAK_PER_MIN:DAYS, "
        "a .csv of timestamps, or cloudwatch"
    )


def _numbers(spec: str, args: list[str], names: tuple[str, ...]) -> list[float]:
    if len(args) != len(names):
        raise TraceError(f"{spec!r}: expected {len(names)} values ({':'.join(names)})")
    try:
        values = [float(a) for a in args]
    except ValueError:
        raise TraceError(f"{spec!r}: {':'.join(names)} must be numbers") from None
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise TraceError(f"{spec!r}: {':'.join(names)} must be positive")
    return values


def _burst(spec: str, args: list[str], rng: random.Random) -> Trace:
    (count,) = _numbers(spec, args, ("N",))
    if count != int(count):
        raise TraceError(f"{spec!r}: N must be a whole number")
    return Trace(spec, (0.0,) * int(count), 0.0)


def _bursts(spec: str, args: list[str], rng: random.Random) -> Trace:
    """N jobs at t = 0, every, 2·every, … while before the horizon (a batch job's day)."""
    count, every, hours = _numbers(spec, args, ("N", "every_hours", "hours"))
    if count != int(count):
        raise TraceError(f"{spec!r}: N must be a whole number")
    horizon = hours * 3600.0
    starts = [k * every * 3600.0 for k in range(math.ceil(hours / every))]
    return Trace(spec, tuple(t for t in starts if t < horizon for _ in range(int(count))), horizon)


def _poisson(spec: str, args: list[str], rng: random.Random) -> Trace:
    rate, hours = _numbers(spec, args, ("rate_per_min", "hours"))
    horizon = hours * 3600.0
    times: list[float] = []
    t = rng.expovariate(rate / 60.0)
    while t < horizon:
        times.append(t)
        t += rng.expovariate(rate / 60.0)
    return Trace(spec, tuple(times), horizon)


def _sparse(spec: str, args: list[str], rng: random.Random) -> Trace:
    gap, hours = _numbers(spec, args, ("gap_minutes", "hours"))
    horizon = hours * 3600.0
    count = math.ceil(horizon / (gap * 60.0))  # k·gap < horizon for k = 0 .. count-1
    return Trace(spec, tuple(k * gap * 60.0 for k in range(count)), horizon)


def _diurnal(spec: str, args: list[str], rng: random.Random) -> Trace:
    """A non-homogeneous Poisson process peaking at 14:00, zero at 02:00 (thinning)."""
    peak, days = _numbers(spec, args, ("peak_per_min", "days"))
    horizon = days * 86400.0
    peak_per_s = peak / 60.0
    times: list[float] = []
    t = rng.expovariate(peak_per_s)
    while t < horizon:
        phase = 2 * math.pi * ((t / 3600.0 - 14.0) / 24.0)
        if rng.random() < (1 + math.cos(phase)) / 2:
            times.append(t)
        t += rng.expovariate(peak_per_s)
    return Trace(spec, tuple(times), horizon)


def csv_trace(path: Path) -> Trace:
    """First column of each row: seconds (a number) or an ISO 8601 time; a header is skipped."""
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except OSError as error:
        raise TraceError(f"{path}: cannot read ({error.strerror})") from None
    stamps: list[float] = []
    for number, row in enumerate(rows, start=1):
        if not row or not row[0].strip():
            continue
        try:
            stamps.append(_timestamp(row[0].strip()))
        except ValueError:
            if number == 1:
                continue  # header
            raise TraceError(f"{path}:{number}: {row[0]!r} is not seconds or an ISO time") from None
    if not stamps:
        raise TraceError(f"{path}: no timestamps")
    start = min(stamps)
    arrivals = tuple(sorted(s - start for s in stamps))
    return Trace(str(path), arrivals, arrivals[-1])


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp()


def metric_period(days: float) -> int:
    """The finest period CloudWatch still keeps for a look-back of `days`."""
    for max_days, period in _RETENTION_BY_PERIOD:
        if days <= max_days:
            return period
    raise TraceError(f"--days {days:g}: CloudWatch keeps SQS metrics for at most 455 days")


def cloudwatch_arrivals(
    cloudwatch: Any, queue_name: str, days: float, end: dt.datetime | None = None
) -> Trace:
    """NumberOfMessagesSent (Sum per period) of `queue_name`, spread evenly inside each period."""
    period = metric_period(days)
    end = end or dt.datetime.now(dt.UTC)
    end = end.replace(second=0, microsecond=0)
    start = end - dt.timedelta(days=days)
    query = {
        "Id": "sent",
        "MetricStat": {
            "Metric": {
                "Namespace": SQS_NAMESPACE,
                "MetricName": SENT_METRIC,
                "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
            },
            "Period": period,
            "Stat": "Sum",
        },
        "ReturnData": True,
    }
    counts: dict[float, float] = {}
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"NextToken": token} if token else {}
        page = cloudwatch.get_metric_data(
            MetricDataQueries=[query], StartTime=start, EndTime=end, **kwargs
        )
        for result in page["MetricDataResults"]:
            for stamp, value in zip(result["Timestamps"], result["Values"], strict=True):
                offset = (stamp - start).total_seconds()
                counts[offset] = counts.get(offset, 0.0) + value
        token = page.get("NextToken")
        if not token:
            break
    return Trace(f"cloudwatch:{queue_name}:{days:g}d", _spread(counts, period), days * 86400.0)


def _spread(counts: dict[float, float], period: int) -> tuple[float, ...]:
    times: list[float] = []
    for offset in sorted(counts):
        n = round(counts[offset])
        times.extend(offset + (i + 0.5) * period / n for i in range(n))
    return tuple(times)
