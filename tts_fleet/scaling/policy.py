"""The one interface every driver of a scaling mode uses, implemented once per mode.

A `Policy` is told what the queue holds (`observe`, at every change or every sample), asked
for the service's desired count (`decide`, every `period_s`, given the service's running and
pending tasks), and asked whether it has anything left to do (`settled`, `quiet`). The
simulator drives it on virtual time (tts_fleet/sim/scalers.py), the local fleet on its tick
clock (tts_fleet/local/scaler.py) and the deployed controller on the wall clock
(tts_fleet/controller/handler.py); none of them computes capacity itself.

- `AlarmsPolicy` (`scaling.mode: alarms`): CloudWatch datapoints, the two alarms and
  Application Auto Scaling (tts_fleet/scaling/alarms.py), evaluated once a minute.
- `ControllerPolicy` (`scaling.mode: controller`, the default): `decide` of
  tts_fleet/scaling/controller.py on a 10-s sample, with the state it carries between calls.

Deadline batches (issue #23): a driver passes the open batches with the queue's counts
(`Counts.batches`, read from the bucket's batch records) and, where it measures one, the
workers' seconds per job (`Fleet.seconds_per_job`); the controller's decision then carries
one forecast per batch (`Decision.forecasts`). The alarms mode ignores both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from tts_fleet.scaling.alarms import PERIOD_S, Autoscaler
from tts_fleet.scaling.bands import ScalingParams, outstanding
from tts_fleet.scaling.batches import BatchForecast, OpenBatch
from tts_fleet.scaling.controller import (
    SAMPLE_INTERVAL_S,
    ControllerParams,
    ControllerState,
    Observation,
    decide,
)
from tts_fleet.scaling.deadlines import Pricing
from tts_fleet.scaling.pools import (
    PlacementParams,
    PoolEvent,
    PoolObservation,
    PoolSpec,
    PoolTarget,
    launches_after,
    place,
    unseen,
)

MODES = ("controller", "alarms")  # scaling.mode: the first is the default


@dataclass(frozen=True)
class Counts:
    """The queue as GetQueueAttributes reports it."""

    visible: int  # ApproximateNumberOfMessages
    in_flight: int  # ApproximateNumberOfMessagesNotVisible
    # The open deadline batches (issue #23): their jobs are among the counts above.
    batches: tuple[OpenBatch, ...] = field(default=())

    @property
    def outstanding(self) -> int:
        return outstanding(self.visible, self.in_flight)


@dataclass(frozen=True)
class Fleet:
    """The service as DescribeServices reports it."""

    running: int  # runningCount
    pending: int  # pendingCount: launches under way
    # With capacity pools: each pool's service (running and pending above are their sums).
    pools: tuple[PoolObservation, ...] = ()
    # Measured warm seconds per job per worker (the workers' throughput, rolling); None: the
    # timing profile's, as the policy was configured (issue #23).
    seconds_per_job: float | None = None

    @classmethod
    def of_pools(cls, pools: tuple[PoolObservation, ...]) -> Fleet:
        """The fleet of several pools: their sums, and each pool."""
        return cls(sum(p.running for p in pools), sum(p.pending for p in pools), pools)


@dataclass(frozen=True)
class Decision:
    """One evaluation: the desired count and why, in each mode's words."""

    desired: int
    alarm: str  # alarms: the alarm in ALARM ("scale-out" | "idle" | "ok"); else "controller"
    reason: str = ""  # controller: decide's reason ("backlog", "warm-one", …)
    # With capacity pools: each pool's desired count (their sum is `desired`, or more where a
    # pool's own minWorkers asks for it), and the pools' availability changes at this decision.
    pools: tuple[PoolTarget, ...] = ()
    events: tuple[PoolEvent, ...] = ()
    # With open deadline batches: one forecast per batch, earliest deadline first (issue #23).
    forecasts: tuple[BatchForecast, ...] = ()


class Policy(Protocol):
    period_s: float  # seconds between two evaluations

    def observe(self, now: float, counts: Counts) -> None:
        """The queue holds `counts` from `now` on."""

    def decide(self, now: float, fleet: Fleet) -> Decision:
        """One evaluation at `now`: the service's desired count."""

    def quiet(self) -> bool:
        """Nothing still in the policy's metric pipeline can scale out: a caller with a
        virtual clock may skip ahead to the next arrival."""

    def settled(self) -> bool:
        """Nothing outstanding and the desired count back at minWorkers (the caller adds
        its fleet's own state: tasks, hosts)."""


class AlarmsPolicy:
    """The alarms mode: outstanding reduced to 1-minute datapoints, published `lag_s` late,
    evaluated by both alarms every minute, with the step policy's cooldown."""

    period_s = PERIOD_S

    def __init__(self, cfg: ScalingParams, *, lag_s: float, cooldown_s: float = 0.0) -> None:
        self.autoscaler = Autoscaler(cfg, lag_s=lag_s, cooldown_s=cooldown_s)

    def observe(self, now: float, counts: Counts) -> None:
        self.autoscaler.observe(now, counts.outstanding)

    def decide(self, now: float, fleet: Fleet) -> Decision:
        del fleet  # the alarms read the queue's metric only
        evaluation = self.autoscaler.decide(now)
        return Decision(evaluation.desired, evaluation.alarm)

    def quiet(self) -> bool:
        return self.autoscaler.quiet()

    def settled(self) -> bool:
        return self.autoscaler.settled()


class ControllerPolicy:
    """The controller mode: `decide` on the last observed counts (read live: no metric lag)
    and the service's counts, every SAMPLE_INTERVAL_S, carrying its state between calls.

    With capacity `pools` (gpu.pools), the total `decide` chose is placed across them by
    `tts_fleet.scaling.pools.place` on each pool's observation (`Fleet.pools`), and the
    decision carries each pool's count; the pools' availability is kept in the state."""

    period_s = SAMPLE_INTERVAL_S

    def __init__(
        self,
        params: ControllerParams,
        state: ControllerState | None = None,
        *,
        pools: tuple[PoolSpec, ...] = (),
        placement: PlacementParams | None = None,
    ) -> None:
        if pools and placement is None:
            raise ValueError("capacity pools need their PlacementParams")
        self.params = params
        self.state = ControllerState() if state is None else state
        self.desired = params.min_workers
        self.pools = pools
        self.placement = placement
        self._counts = Counts(0, 0)

    def observe(self, now: float, counts: Counts) -> None:
        del now  # the controller samples: only the latest counts matter
        self._counts = counts

    def decide(self, now: float, fleet: Fleet) -> Decision:
        counts = self._counts
        seen = {pool.name: pool for pool in fleet.pools}
        # A swap between pools is the placement's business, not the work's.
        hidden = unseen(self.state.pools, seen) if self.pools else (0, 0)
        running, pending = fleet.running - hidden[0], fleet.pending - hidden[1]
        obs = Observation(
            now,
            counts.visible,
            counts.in_flight,
            running,
            pending,
            batches=counts.batches,
            seconds_per_job=fleet.seconds_per_job,
            pricing=_pricing(self.pools),
        )
        decision = decide(self.params, self.state, obs)
        self.state, self.desired = decision.state, decision.desired
        forecasts = decision.forecasts
        if not self.pools or self.placement is None:
            return Decision(decision.desired, "controller", decision.reason, forecasts=forecasts)
        # Can't Be Late: when a lost Spot worker would miss a deadline, Spot pools keep the
        # workers they run and every new one goes to the other pools.
        pools = self.pools if decision.spot else _spot_held(self.pools, seen)
        placed = place(
            pools,
            self.placement,
            self.state.pools,
            seen,
            decision.desired,
            now,
            # While a deadline plan sets the count, no swap to a cheaper pool: each costs a
            # cold start the plan did not count, for a batch that ends within the hour.
            ceiling=decision.desired if decision.forecasts else self.params.max_workers,
        )
        launches = launches_after(placed, seen, self.state.launches, now)
        self.state = replace(self.state, pools=placed.states, launches=launches)
        return Decision(
            decision.desired,
            "controller",
            decision.reason,
            placed.targets,
            placed.events,
            forecasts,
        )

    def quiet(self) -> bool:
        return True  # no metric pipeline: what it decides next depends on the next sample

    def settled(self) -> bool:
        return self._counts.outstanding == 0 and self.desired == self.params.min_workers


def _pricing(pools: tuple[PoolSpec, ...]) -> Pricing | None:
    """The cheapest Spot and non-Spot pool's hourly price, for the deadline planner; None
    without pools (one service: nothing to choose)."""
    if not pools:
        return None
    spot = [p.usd_per_hour for p in pools if p.capacity_type == "spot"]
    other = [p.usd_per_hour for p in pools if p.capacity_type != "spot"]
    return Pricing(min(spot, default=None), min(other, default=None))


def _spot_held(
    pools: tuple[PoolSpec, ...], seen: dict[str, PoolObservation]
) -> tuple[PoolSpec, ...]:
    """The pools with each Spot pool capped at its running workers: it keeps them, takes no
    new one (its launches under way are cut with the rest of the surplus)."""
    return tuple(
        replace(pool, max_workers=min(pool.max_workers, _running(seen, pool.name)))
        if pool.capacity_type == "spot"
        else pool
        for pool in pools
    )


def _running(seen: dict[str, PoolObservation], name: str) -> int:
    pool = seen.get(name)
    return 0 if pool is None else pool.running
