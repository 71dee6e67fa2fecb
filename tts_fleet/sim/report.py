"""Simulation results: latency percentiles, GPU hours and what they cost, as plain JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tts_fleet.sim.model import PolicySetup, Profile
from tts_fleet.sim.traces import Trace

HOURS_PER_MONTH = 730.0  # AWS prices monthly figures at 730 hours


@dataclass(frozen=True)
class CostRates:
    """What one GPU host costs per hour (instance + management fee) and the monthly floor."""

    gpu_hourly_usd: float
    floor_monthly_usd: float


@dataclass(frozen=True)
class Sample:
    """The fleet at one minute boundary (for the timeline plot)."""

    t: float
    outstanding: int
    desired: int
    running: int
    completed: int


@dataclass(frozen=True)
class SimResult:
    summary: dict[str, Any]
    samples: tuple[Sample, ...]
    latencies: tuple[float, ...]  # per job, in arrival order

    def to_json(self) -> dict[str, Any]:
        return self.summary


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q of the values at or below."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values) - 1e-9))
    return sorted_values[rank - 1]


def _r(value: float, digits: int = 3) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def _latency(latencies: list[float]) -> dict[str, float | None]:
    ordered = sorted(latencies)
    return {
        "p50": _r(percentile(ordered, 0.50)),
        "p95": _r(percentile(ordered, 0.95)),
        "max": _r(ordered[-1] if ordered else math.nan),
    }


def _costs(rates: CostRates, gpu_seconds: float, end: float, jobs: int) -> dict[str, Any]:
    """GPU hours at the hourly rate, and the monthly floor pro rata over the same period."""
    gpu_hours = gpu_seconds / 3600.0
    gpu_usd = gpu_hours * rates.gpu_hourly_usd
    floor_usd = rates.floor_monthly_usd * (end / 3600.0) / HOURS_PER_MONTH
    per_1000 = (gpu_usd + floor_usd) / jobs * 1000 if jobs else math.nan
    return {
        "gpu_instance_hours": _r(gpu_hours, 4),
        "gpu_usd": _r(gpu_usd, 2),
        "floor_usd": _r(floor_usd, 2),
        "total_usd": _r(gpu_usd + floor_usd, 2),
        "usd_per_1000_outputs": _r(per_1000, 4),
        "rates": {
            "gpu_hourly_usd": rates.gpu_hourly_usd,
            "floor_monthly_usd": _r(rates.floor_monthly_usd, 2),
        },
    }


def summarise(
    *,
    trace: Trace,
    profile: Profile,
    policy: PolicySetup,
    rates: CostRates,
    finish: list[float],
    samples: list[Sample],
    gpu_seconds: float,
    end: float,
    starts: tuple[int, int, int, int],  # cold, warm, cancelled, hosts
) -> SimResult:
    arrivals = trace.arrivals
    latencies = [f - a for f, a in zip(finish, arrivals, strict=True)]
    first_arrival = arrivals[0] if arrivals else 0.0
    summary = {
        "trace": trace.name,
        "jobs": len(arrivals),
        "policy": policy.name,
        "profile": profile.name,
        "settings": {
            **asdict(policy.scaling),
            "host_idle_seconds": policy.host_idle_seconds,
            "concurrency": policy.concurrency,
        },
        "latency_s": _latency(latencies),
        "first_result_s": _r(min(finish) - first_arrival if finish else math.nan),
        "drain_s": _r(max(finish) - first_arrival if finish else math.nan),
        "period_s": _r(end),
        "cold_starts": starts[0],
        "warm_starts": starts[1],
        "cancelled_starts": starts[2],  # stopped while pending: never ran, never a start
        "hosts_launched": starts[3],
        **_costs(rates, gpu_seconds, end, len(arrivals)),
    }
    return SimResult(summary, tuple(samples), tuple(latencies))
