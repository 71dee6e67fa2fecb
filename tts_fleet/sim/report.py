"""Simulation results: latency percentiles, GPU hours and what they cost, typed; `to_json()`
is the `simulate --json` document."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tts_fleet.scaling.physics import Profile
from tts_fleet.sim.model import PolicySetup
from tts_fleet.sim.traces import Trace
from tts_fleet.stats import percentile

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
class SimSettings:
    """The deployment's knobs a run used (the policy's scaling, hosts, worker slots)."""

    min_workers: int
    max_workers: int
    jobs_per_worker: int
    idle_minutes: int
    host_idle_seconds: int
    concurrency: int

    @classmethod
    def of(cls, policy: PolicySetup) -> SimSettings:
        s = policy.scaling
        return cls(
            s.min_workers, s.max_workers, s.jobs_per_worker, s.idle_minutes,
            policy.host_idle_seconds, policy.concurrency,
        )  # fmt: skip


@dataclass(frozen=True)
class Latency:
    """Per-job latency (arrival to result), nearest-rank percentiles; None for no jobs."""

    p50: float | None
    p95: float | None
    max: float | None


@dataclass(frozen=True)
class RunCost:
    """GPU hours at the hourly rate, and the monthly floor pro rata over the same period."""

    gpu_instance_hours: float | None
    gpu_usd: float | None
    floor_usd: float | None
    total_usd: float | None
    usd_per_1000_outputs: float | None  # None for no jobs
    rates: CostRates  # floor_monthly_usd rounded to cents

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SimSummary:
    """One run's figures: what `simulate --json` prints and `advise` compares."""

    trace: str
    jobs: int
    policy: str
    profile: str
    settings: SimSettings
    latency: Latency
    first_result_s: float | None
    drain_s: float | None
    period_s: float
    cold_starts: int
    warm_starts: int
    cancelled_starts: int  # stopped while pending: never ran, never a start
    hosts_launched: int
    killed_jobs: int  # in flight on a task stopped without protection, run again later
    cost: RunCost

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["latency_s"] = data.pop("latency")
        data.update(data.pop("cost"))  # the cost figures are top-level keys
        return data


@dataclass(frozen=True)
class SimResult:
    summary: SimSummary
    samples: tuple[Sample, ...]
    latencies: tuple[float, ...]  # per job, in arrival order

    def to_json(self) -> dict[str, Any]:
        return self.summary.to_json()


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _latency(latencies: list[float]) -> Latency:
    ordered = sorted(latencies)
    return Latency(
        p50=_r(percentile(ordered, 0.50)),
        p95=_r(percentile(ordered, 0.95)),
        max=_r(ordered[-1] if ordered else None),
    )


def _costs(rates: CostRates, gpu_seconds: float, end: float, jobs: int) -> RunCost:
    gpu_hours = gpu_seconds / 3600.0
    gpu_usd = gpu_hours * rates.gpu_hourly_usd
    floor_usd = rates.floor_monthly_usd * (end / 3600.0) / HOURS_PER_MONTH
    per_1000 = (gpu_usd + floor_usd) / jobs * 1000 if jobs else None
    return RunCost(
        gpu_instance_hours=_r(gpu_hours, 4),
        gpu_usd=_r(gpu_usd, 2),
        floor_usd=_r(floor_usd, 2),
        total_usd=_r(gpu_usd + floor_usd, 2),
        usd_per_1000_outputs=_r(per_1000, 4),
        rates=CostRates(rates.gpu_hourly_usd, round(rates.floor_monthly_usd, 2)),
    )


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
    killed_jobs: int = 0,
) -> SimResult:
    arrivals = trace.arrivals
    latencies = [f - a for f, a in zip(finish, arrivals, strict=True)]
    first_arrival = arrivals[0] if arrivals else 0.0
    summary = SimSummary(
        trace=trace.name,
        jobs=len(arrivals),
        policy=policy.name,
        profile=profile.name,
        settings=SimSettings.of(policy),
        latency=_latency(latencies),
        first_result_s=_r(min(finish) - first_arrival) if finish else None,
        drain_s=_r(max(finish) - first_arrival) if finish else None,
        period_s=round(end, 3),
        cold_starts=starts[0],
        warm_starts=starts[1],
        cancelled_starts=starts[2],
        hosts_launched=starts[3],
        killed_jobs=killed_jobs,
        cost=_costs(rates, gpu_seconds, end, len(arrivals)),
    )
    return SimResult(summary, tuple(samples), tuple(latencies))
