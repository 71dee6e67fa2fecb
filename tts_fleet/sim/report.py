"""Simulation results: latency percentiles, GPU hours and what they cost, typed; `to_json()`
is the `simulate --json` document."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tts_fleet.scaling.physics import Profile
from tts_fleet.scaling.pools import PoolSpec
from tts_fleet.sim.capacity import Capacity
from tts_fleet.sim.deadlines import DeadlineResult
from tts_fleet.sim.model import PolicySetup
from tts_fleet.sim.state import Fleet
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
class PoolUsage:
    """One capacity pool's share of a run (`simulate --json`'s `pools`)."""

    name: str
    gpu_hours: float
    usd: float  # its hosts' hours at its price; a reserved pool bills its reservation
    interruptions: int
    fallbacks: int  # times it was marked unavailable and its demand moved on

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "name"}


@dataclass(frozen=True)
class OutageResult:
    """What one --capacity-outage did: the first launch its pool could not place, and how
    long until demand reached another pool (None: nothing was asked of it meanwhile)."""

    pool: str
    start_s: float
    hours: float
    first_stuck_s: float | None
    fallback_s: float | None


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
    pools: tuple[PoolUsage, ...] = ()  # with capacity pools, in the stack's order
    outages: tuple[OutageResult, ...] = ()
    deadlines: DeadlineResult | None = None  # with `--deadline`

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("deadlines")
        if self.deadlines is not None:  # without --deadline the document is as before
            data["deadlines"] = self.deadlines.to_json()
        data["latency_s"] = data.pop("latency")
        data.update(data.pop("cost"))  # the cost figures are top-level keys
        # Without pools the document is what it was before them.
        data.pop("pools")
        data.pop("outages")
        if self.pools:
            data["pools"] = {pool.name: pool.to_json() for pool in self.pools}
        if self.outages:
            data["outages"] = [asdict(outage) for outage in self.outages]
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


def pool_usage(pools: tuple[PoolSpec, ...], fleet: Fleet, end: float) -> tuple[PoolUsage, ...]:
    """Each pool's GPU-hours (its hosts, launched to gone), what they cost at its price (a
    reserved pool: its reservation of maxWorkers hosts for the whole run, used or not, as a
    Capacity Reservation bills), its interruptions and its fallbacks."""
    usage = []
    for pool in pools:
        seconds = sum(
            (h.gone if h.gone is not None else end) - h.launched
            for h in fleet.hosts
            if h.pool == pool.name
        )
        hours = seconds / 3600.0
        billed = (
            max(hours, pool.max_workers * end / 3600.0)
            if pool.capacity_type == "reserved"
            else hours
        )
        usage.append(
            PoolUsage(
                name=pool.name,
                gpu_hours=round(hours, 4),
                usd=round(billed * pool.usd_per_hour, 2),
                interruptions=len(fleet.interruptions.get(pool.name, [])),
                fallbacks=fleet.fallbacks.get(pool.name, 0),
            )
        )
    return tuple(usage)


def outage_results(fleet: Fleet, capacity: Capacity) -> tuple[OutageResult, ...]:
    """For each outage: the first launch asked of its pool inside it, and the delay until
    the next launch asked of any other pool (the fallback)."""
    results = []
    for outage in capacity.outages:
        stuck = next(
            (t for t, pool in fleet.starts
             if pool == outage.pool and outage.start_s <= t < outage.end_s),
            None,
        )  # fmt: skip
        moved = None
        if stuck is not None:
            moved = next(
                (t for t, pool in fleet.starts if pool != outage.pool and t >= stuck), None
            )
        results.append(
            OutageResult(
                pool=outage.pool,
                start_s=outage.start_s,
                hours=outage.duration_s / 3600.0,
                first_stuck_s=_r(stuck),
                fallback_s=None if moved is None or stuck is None else _r(moved - stuck),
            )
        )
    return tuple(results)


def _costs(
    rates: CostRates, gpu_seconds: float, end: float, jobs: int, pools: tuple[PoolUsage, ...]
) -> RunCost:
    gpu_hours = gpu_seconds / 3600.0
    gpu_usd = gpu_hours * rates.gpu_hourly_usd
    if pools:  # each pool at its own price; the rate shown is their blend
        gpu_usd = sum(pool.usd for pool in pools)
        blended = gpu_usd / gpu_hours if gpu_hours else 0.0
        rates = CostRates(round(blended, 4), rates.floor_monthly_usd)
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
    pools: tuple[PoolUsage, ...] = (),
    outages: tuple[OutageResult, ...] = (),
    deadlines: DeadlineResult | None = None,
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
        cost=_costs(rates, gpu_seconds, end, len(arrivals), pools),
        pools=pools,
        outages=outages,
        deadlines=deadlines,
    )
    return SimResult(summary, tuple(samples), tuple(latencies))
