"""Deadline batches (issue #23): the cheapest fleet that finishes every open batch in time.

`plan` takes the open batches (`OpenBatch`, tts_fleet/scaling/batches.py), the jobs the queue
still holds, the workers running and launching, a new worker's cold start and the seconds per
job one worker takes at its concurrency (the batching law of tts_fleet/scaling/physics.py, or
a measured figure), and answers the fewest workers that meet every deadline with a safety
margin, one `BatchForecast` per batch, and whether new workers may go to Spot.

- **Earliest deadline first.** For each deadline, the work of every batch due by then must
  fit the capacity the fleet has by then: running workers serve from now, a launch under way
  from its launch + the cold start, a new worker from now + the cold start. Capacity grows
  with the worker count, so the fewest workers is a binary search, and since every worker
  pays one cold start and the work is the same, the fewest workers is the cheapest plan.
- **Never below what runs or launches.** A launch under way is never cancelled for a
  deadline (its boot is paid; a plan that wobbles would cancel and relaunch).
- **At risk.** A batch whose deadline even `max_workers` cannot meet is forecast at risk,
  with the finish `max_workers` reaches, and the plan is `max_workers`: it finishes as early
  as the fleet can.
- **Spot only while the deadline survives losing a Spot worker** (after Wu et al., "Can't
  Be Late", NSDI '24: stay on Spot while the slack covers a changeover, else switch to
  On-Demand). A lost worker costs its replacement's cold start and its jobs in flight: the
  plan on Spot is the fewest workers that still meet every deadline with one worker set
  back by a cold start and its in-flight jobs redone; it is taken while it exists within
  `max_workers` and costs less at the Spot price than the plain plan at the On-Demand price.
  Otherwise new workers go On-Demand (`spot=False`).

Which jobs of the queue belong to which batch: a batch record may not know how many of its
jobs are done (`OpenBatch.done` 0), so the queue's outstanding jobs are given to the newest
batches first (the queue is first in, first out): a batch older than what the queue holds is
done. Jobs of no batch are the existing policy's business (tts_fleet/scaling/controller.py).
Pure: stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tts_fleet.scaling.batches import BatchForecast, OpenBatch

# The safety margin before each deadline: a fraction of the batch's window, at least a
# minute. It absorbs what the plan's figures do not know: the host provisioning's jitter
# (up to a minute in the AWS timings), the 10-s sample, the last round of jobs. The research
# note's max(10 min, 10 %) (the capacity research, §5.5) would double the workers a 30-minute
# deadline needs for no gain the simulator can show.
MARGIN_FRACTION = 0.05
MIN_MARGIN_S = 60.0


@dataclass(frozen=True)
class Pricing:
    """What a new worker costs an hour on Spot and on On-Demand (the cheapest pool of each;
    None: the stack has no such pool)."""

    spot_usd_per_hour: float | None
    on_demand_usd_per_hour: float | None


@dataclass(frozen=True)
class DeadlinePlan:
    workers: int  # the total the deadlines need: running + launching + new, ≤ max_workers
    forecasts: tuple[BatchForecast, ...]
    spot: bool  # new workers may go to Spot pools (False: On-Demand only)
    at_risk: bool  # some batch misses its deadline even at max_workers

    @property
    def reason(self) -> str:
        return "deadline-at-risk" if self.at_risk else "deadline"


@dataclass(frozen=True)
class FleetNow:
    """The workers the plan starts from."""

    now: float
    running: int
    launches: tuple[float, ...]  # when each launch under way was asked for
    cold_start_s: float
    seconds_per_job: float  # warm seconds per job per worker at its concurrency
    concurrency: int  # jobs a worker holds: what a lost worker's replacement redoes
    max_workers: int


def margin_s(batch: OpenBatch) -> float:
    return max(MIN_MARGIN_S, MARGIN_FRACTION * max(0.0, batch.deadline - batch.submitted_at))


def remaining(batches: tuple[OpenBatch, ...], outstanding: int) -> dict[str, int]:
    """Jobs left per batch: its own count less what is done, and no more than the queue
    holds, given to the newest batches first (first in, first out)."""
    left: dict[str, int] = {}
    budget = max(0, outstanding)
    for batch in sorted(batches, key=lambda b: (b.submitted_at, b.batch_id), reverse=True):
        own = max(0, batch.jobs - batch.done)
        left[batch.batch_id] = min(own, budget)
        budget -= left[batch.batch_id]
    return left


def plan(
    batches: tuple[OpenBatch, ...],
    outstanding: int,
    fleet: FleetNow,
    pricing: Pricing | None = None,
) -> DeadlinePlan | None:
    """The deadlines' plan, or None when no batch has work left (the existing policy
    decides alone)."""
    left = remaining(batches, outstanding)
    due = _due(batches, left)
    if not due:
        return None
    least = fleet.running + len(fleet.launches)
    plain = _fewest(fleet, due, least, lost=False)
    at_risk = plain is None
    workers = max(least, fleet.max_workers) if plain is None else plain
    spot = True
    if pricing is not None and pricing.spot_usd_per_hour is not None and plain is not None:
        spot, workers = _spot_or_not(fleet, due, least, plain, pricing)
    elif pricing is not None and pricing.spot_usd_per_hour is not None:
        spot = pricing.on_demand_usd_per_hour is None  # at risk: Spot only if nothing else
    ready = _ready(fleet, workers)
    forecasts = tuple(
        _forecast(batch, left[batch.batch_id], batches, left, ready, fleet)
        for batch in sorted(batches, key=lambda b: (b.deadline, b.batch_id))
    )
    return DeadlinePlan(workers, forecasts, spot, at_risk)


def finished(batches: tuple[OpenBatch, ...], now: float) -> tuple[BatchForecast, ...]:
    """The forecasts of batches the queue holds nothing of: done by now."""
    ordered = sorted(batches, key=lambda b: (b.deadline, b.batch_id))
    return tuple(BatchForecast(b.batch_id, b.deadline, now, at_risk=False) for b in ordered)


def _due(batches: tuple[OpenBatch, ...], left: dict[str, int]) -> list[tuple[float, int]]:
    """(time the work must be done by, jobs due by then), earliest deadline first."""
    due: list[tuple[float, int]] = []
    total = 0
    for batch in sorted(batches, key=lambda b: (b.deadline, b.batch_id)):
        total += left[batch.batch_id]
        if left[batch.batch_id]:
            due.append((batch.deadline - margin_s(batch), total))
    return due


def _ready(fleet: FleetNow, workers: int) -> list[float]:
    """When each of `workers` serves: running now, launches (oldest kept first) after their
    cold start (a late one any moment now), new ones a cold start from now."""
    now, cold = fleet.now, fleet.cold_start_s
    ready = [now] * min(workers, fleet.running)
    kept = sorted(fleet.launches)[: max(0, workers - fleet.running)]
    ready += [max(now, t + cold) for t in kept]
    ready += [now + cold] * max(0, workers - len(ready))
    return sorted(ready)


def finish_time(ready: list[float], jobs: float, seconds_per_job: float) -> float:
    """When workers serving from `ready` (sorted) have done `jobs`: each does one job per
    `seconds_per_job` from its ready time, so the work is the area under the count."""
    if jobs <= 0:
        return ready[0] if ready else math.inf
    work = jobs * seconds_per_job  # worker-seconds
    done = 0.0  # worker-seconds served by ready[count - 1]
    for count in range(1, len(ready) + 1):
        start = ready[count - 1]
        if count > 1:
            done += (count - 1) * (start - ready[count - 2])
        end = ready[count] if count < len(ready) else math.inf
        if done + count * (end - start) >= work:
            return start + (work - done) / count
    return math.inf


def _finish(ready: list[float], jobs: int, fleet: FleetNow, lost: bool) -> float:
    """The finish of `jobs` on `ready`, with the last round of jobs (a worker's batch of
    `concurrency` completes together); `lost`: one worker set back a cold start and its
    in-flight jobs done again (a Spot worker lost now: the worst moment for the plan)."""
    if lost and ready:
        ready = sorted([ready[0] + fleet.cold_start_s, *ready[1:]])
        jobs += fleet.concurrency
    last_round = fleet.concurrency * fleet.seconds_per_job
    return finish_time(ready, jobs, fleet.seconds_per_job) + last_round


def _meets(fleet: FleetNow, due: list[tuple[float, int]], workers: int, lost: bool) -> bool:
    ready = _ready(fleet, workers)
    return all(_finish(ready, jobs, fleet, lost) <= by for by, jobs in due)


def _fewest(fleet: FleetNow, due: list[tuple[float, int]], least: int, *, lost: bool) -> int | None:
    """The fewest workers (at least `least`, one at the very least) that meet every due
    time, or None past max_workers. Capacity only grows with workers: a binary search."""
    low, high = max(1, least), max(least, fleet.max_workers)
    if not _meets(fleet, due, high, lost):
        return None
    while low < high:
        mid = (low + high) // 2
        if _meets(fleet, due, mid, lost):
            high = mid
        else:
            low = mid + 1
    return low


def _gpu_seconds(fleet: FleetNow, due: list[tuple[float, int]], workers: int) -> float:
    """What a plan bills: every worker from now (running, launching or new) until all the
    due work is done (the plan releases them then)."""
    end = _finish(_ready(fleet, workers), due[-1][1], fleet, lost=False)
    return workers * max(0.0, end - fleet.now)


def _spot_or_not(
    fleet: FleetNow, due: list[tuple[float, int]], least: int, plain: int, pricing: Pricing
) -> tuple[bool, int]:
    """Spot (with a worker to spare for a loss) while that survives and costs less, else
    On-Demand at the plain plan."""
    spot_price = pricing.spot_usd_per_hour or 0.0
    if pricing.on_demand_usd_per_hour is None:
        return True, plain  # Spot is all there is
    sturdy = _fewest(fleet, due, least, lost=True)
    if sturdy is None:
        return False, plain
    spot_cost = _gpu_seconds(fleet, due, sturdy) * spot_price
    on_demand_cost = _gpu_seconds(fleet, due, plain) * pricing.on_demand_usd_per_hour
    if spot_cost < on_demand_cost:
        return True, sturdy
    return False, plain


def _forecast(
    batch: OpenBatch,
    own: int,
    batches: tuple[OpenBatch, ...],
    left: dict[str, int],
    ready: list[float],
    fleet: FleetNow,
) -> BatchForecast:
    """The batch's finish at the plan: the work of every batch due no later (earliest
    deadline first) done on the plan's workers; at risk when it misses its deadline."""
    if own == 0:
        return BatchForecast(batch.batch_id, batch.deadline, fleet.now, at_risk=False)
    key = (batch.deadline, batch.batch_id)
    ahead = sum(left[b.batch_id] for b in batches if (b.deadline, b.batch_id) <= key)
    finish = _finish(ready, ahead, fleet, lost=False)
    return BatchForecast(batch.batch_id, batch.deadline, finish, at_risk=finish > batch.deadline)
