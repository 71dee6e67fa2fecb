"""Choosing the idle windows from a trace: sweep, Pareto frontier, recommendation.

AWS leaves the idle window as "a workload measurement problem". Here it is measured: every
(idleMinutes, hostIdleSeconds) pair of the grid is simulated on the user's trace with the
real policy, and the frontier of cost against p95 latency is what the user chooses from.
Extra GPU-hours are reported against the configured setting, so a faster answer shows what
it burns.

With a deadline (`advise --deadline MINUTES`, issue #23) every run gives the trace's batches
that deadline (tts_fleet/sim/deadlines.py) and the recommendation is the cheapest setting
that meets every one (within the other bounds, if given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from tts_fleet.scaling.physics import Profile
from tts_fleet.sim.engine import simulate
from tts_fleet.sim.model import PolicySetup
from tts_fleet.sim.report import HOURS_PER_MONTH, CostRates, SimSummary
from tts_fleet.sim.traces import Trace

IDLE_MINUTES = (1, 2, 3, 5, 10, 15, 20, 30, 60)
HOST_IDLE_SECONDS = (0, 60, 300, 900, 1800, 3600)
# κ (scaling.coldStartWork), controller mode only: from "start a GPU for any backlog" to
# "only for two cold starts of work", each with the configured idle settings.
COLD_START_WORK = (0.0, 0.06, 0.12, 0.25, 0.5, 1.0, 2.0)
RUNS = len(IDLE_MINUTES) * len(HOST_IDLE_SECONDS) + 1  # the grid and the configured setting


def run_count(base: PolicySetup) -> int:
    """Simulations `advise` runs for this policy (the progress bar's length)."""
    return RUNS + (len(COLD_START_WORK) if base.mode == "controller" else 0)


@dataclass(frozen=True)
class Point:
    idle_minutes: int
    host_idle_seconds: int
    p95_s: float
    gpu_hours: float
    cost_usd: float  # GPU + floor over the common period (the longest run of the sweep)
    monthly_usd: float  # the same, were the trace repeated for a 730-hour month
    cold_start_work: float | None = None  # κ (controller mode), None for the alarms
    deadlines_missed: int | None = None  # with a deadline: batches that missed it


@dataclass(frozen=True)
class Bounds:
    max_p95_s: float | None
    max_monthly_usd: float | None
    deadline_s: float | None = None  # every batch of the trace must meet it


@dataclass(frozen=True)
class Recommendation:
    """The chosen setting and what it burns against the configured and the cheapest one."""

    point: Point
    extra_gpu_hours: float
    extra_usd: float
    extra_gpu_hours_vs_cheapest: float
    extra_usd_vs_cheapest: float

    @classmethod
    def against(cls, point: Point, baseline: Point, cheapest: Point) -> Recommendation:
        return cls(
            point,
            extra_gpu_hours=round(point.gpu_hours - baseline.gpu_hours, 4),
            extra_usd=round(point.cost_usd - baseline.cost_usd, 2),
            extra_gpu_hours_vs_cheapest=round(point.gpu_hours - cheapest.gpu_hours, 4),
            extra_usd_vs_cheapest=round(point.cost_usd - cheapest.cost_usd, 2),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {**data.pop("point"), **data}  # the point's fields are top-level keys


@dataclass(frozen=True)
class Advice:
    """`advise`: the sweep, its Pareto frontier and the recommendation (None: none fits)."""

    trace: str
    jobs: int
    profile: str
    bounds: Bounds
    baseline: Point
    cheapest: Point
    frontier: tuple[Point, ...]
    points: tuple[Point, ...]
    recommendation: Recommendation | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["frontier"], data["points"] = list(data["frontier"]), list(data["points"])
        rec = self.recommendation
        data["recommendation"] = None if rec is None else rec.to_json()
        if self.bounds.deadline_s is None:  # without a deadline the document is as before
            del data["bounds"]["deadline_s"]
            for point in (data["baseline"], data["cheapest"], *data["frontier"],
                          *data["points"], data["recommendation"] or {}):  # fmt: skip
                point.pop("deadlines_missed", None)
        return data


def _run(
    trace: Trace,
    profile: Profile,
    policy: PolicySetup,
    rates: CostRates,
    seed: int,
    deadline_s: float | None = None,
) -> SimSummary:
    return simulate(trace, profile, policy, rates, seed, deadline_s=deadline_s).summary


def _points(
    summaries: list[SimSummary], rates: CostRates, kappas: list[float | None], trace_h: float
) -> list[Point]:
    """Cost of one run of the trace (its GPU bill, idle tail included, plus the idle floor for
    the trace's own length), and per month with the trace repeated back to back: scaling from
    the longest simulated period instead would spread the bill over the tail's extra hours
    and read low."""
    floor = rates.floor_monthly_usd * trace_h / HOURS_PER_MONTH
    points = []
    for s, kappa in zip(summaries, kappas, strict=True):
        p95, gpu_usd, gpu_hours = s.latency.p95, s.cost.gpu_usd, s.cost.gpu_instance_hours
        if p95 is None or gpu_usd is None or gpu_hours is None:
            raise ValueError(f"trace {s.trace} has no jobs: nothing to advise on")
        cost = gpu_usd + floor
        missed = None if s.deadlines is None else s.deadlines.missed
        points.append(
            Point(
                idle_minutes=s.settings.idle_minutes,
                host_idle_seconds=s.settings.host_idle_seconds,
                cold_start_work=kappa,
                p95_s=p95,
                gpu_hours=gpu_hours,
                cost_usd=round(cost, 2),
                monthly_usd=round(cost * HOURS_PER_MONTH / trace_h, 2),
                deadlines_missed=missed,
            )
        )
    return points


def sweep(
    trace: Trace,
    profile: Profile,
    base: PolicySetup,
    rates: CostRates,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
    deadline_s: float | None = None,
) -> list[Point]:
    """The idle grid (and, in controller mode, κ), then the configured setting last;
    `progress` is called after each run."""
    settings = [base.with_windows(i, h) for i in IDLE_MINUTES for h in HOST_IDLE_SECONDS]
    if base.mode == "controller":
        settings += [replace(base, cold_start_work=k) for k in COLD_START_WORK]
    settings.append(base)
    summaries = []
    for policy in settings:
        summaries.append(_run(trace, profile, policy, rates, seed, deadline_s))
        if progress is not None:
            progress()
    controller = base.mode == "controller"
    kappas = [p.cold_start_work if controller else None for p in settings]
    # A burst at t = 0 has no length of its own: it repeats once per simulated period.
    length_s = trace.horizon_s or max(s.period_s for s in summaries)
    return _points(summaries, rates, kappas, length_s / 3600.0)


def pareto(points: list[Point]) -> list[Point]:
    """Settings no other setting beats on both cost and p95, cheapest first."""
    frontier: list[Point] = []
    for point in sorted(points, key=lambda p: (p.cost_usd, p.p95_s, p.gpu_hours)):
        if not frontier or point.p95_s < frontier[-1].p95_s:
            frontier.append(point)
    return frontier


def recommend(
    points: list[Point],
    max_p95_s: float | None,
    max_monthly_usd: float | None,
    deadline: bool = False,
) -> Point | None:
    """Cheapest within the latency bound, or fastest within the budget (or both bounds);
    with a `deadline`, the cheapest of those that meet every deadline."""
    fits = [
        p
        for p in points
        if (max_p95_s is None or p.p95_s <= max_p95_s)
        and (max_monthly_usd is None or p.monthly_usd <= max_monthly_usd)
        and (not deadline or p.deadlines_missed == 0)
    ]
    if not fits:
        return None
    if max_p95_s is not None or deadline:
        return min(fits, key=lambda p: (p.cost_usd, p.p95_s, p.idle_minutes))
    return min(fits, key=lambda p: (p.p95_s, p.cost_usd, p.idle_minutes))


def advise(
    trace: Trace,
    profile: Profile,
    base: PolicySetup,
    rates: CostRates,
    *,
    max_p95_s: float | None = None,
    max_monthly_usd: float | None = None,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
    deadline_s: float | None = None,
) -> Advice:
    *points, baseline = sweep(trace, profile, base, rates, seed, progress, deadline_s)
    choice = recommend(points, max_p95_s, max_monthly_usd, deadline=deadline_s is not None)
    cheapest = min(points, key=lambda p: (p.cost_usd, p.p95_s))
    rec = None if choice is None else Recommendation.against(choice, baseline, cheapest)
    return Advice(
        trace=trace.name,
        jobs=len(trace.arrivals),
        profile=profile.name,
        bounds=Bounds(max_p95_s, max_monthly_usd, deadline_s),
        baseline=baseline,
        cheapest=cheapest,
        frontier=tuple(pareto(points)),
        points=tuple(points),
        recommendation=rec,
    )
