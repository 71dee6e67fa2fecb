"""The local scaler: what sets the ECS service's desired count in AWS, one step at a time.

One `PoolScaler` drives whichever `tts_fleet.scaling.policy.Policy` the stack's `scaling.mode`
deploys, on the fleet's own clock (one tick is one CloudWatch minute), and sets the worker
pool to its decision as the deployed mode sets the service's desiredCount:

- `alarms`: one step per tick. Each reads the queue's counts and gives them to the same
  alarms model the simulator drives (datapoints, metric lag, the alarms the Pulumi stack
  deploys, the clamp).
- `controller`: one step per 10-s sample of the deployed controller's loop
  (tts_fleet/controller/handler.py): the queue's counts and the pool's running/pending
  tasks go to the same `decide`. Six samples make a tick.

With capacity pools (`gpu.pools`, controller mode) each pool is a group of the worker pool,
observed as the controller observes a pool's ECS service (tasks waiting for capacity, the
placement failures their service would report) and sized by the placement's count for it. A
`--capacity-outage` (tts_fleet/sim/capacity.py's `Outage`, on the fleet's clock: an hour is 60
ticks) makes its pool refuse capacity: the group's new tasks stay pending, as a task stays
PROVISIONING in ECS, and unless the outage is `silent` the pool reports a placement failure
at the first refusal and every PLACEMENT_RETRY_S after, as the simulator's pools do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.scaling.alarms import PERIOD_S
from tts_fleet.scaling.policy import Counts, Decision, Fleet, Policy
from tts_fleet.scaling.pools import PoolObservation, PoolSpec
from tts_fleet.sim.capacity import PLACEMENT_RETRY_S, Capacity

# What the local fleet passes: its minutes are short ticks and its queue is in-process, so a
# read is seen at the tick that made it. AWS publishes SQS metrics about a minute late;
# metric_lag_s=60 sees each read one tick later, as the deployed alarms would.
LOCAL_METRIC_LAG_S = 0.0


@dataclass(frozen=True)
class Tick:
    """What one evaluation saw and decided; `running` etc. are counted after it acted."""

    tick: int
    t: float
    visible: int
    in_flight: int
    outstanding: int
    failed: int
    completed: int
    alarm: str  # "scale-out" | "idle" | "ok"; "controller" in controller mode
    desired: int
    running: int
    pending: int
    stopping: int
    workers: list[dict[str, object]] = field(default_factory=list)
    minute: float = 0.0  # the scaler's own clock, in CloudWatch minutes (= ticks)
    reason: str = ""  # controller mode: why `decide` chose `desired`
    # With capacity pools: each pool's group after the step (pool, desired, running, pending,
    # available, cause, refusing: its outage is on) and its availability change, if any.
    pools: list[dict[str, object]] = field(default_factory=list)


class PoolScaler:
    """A Policy on the fleet's clock, sizing the worker pool: the reads, the event log, the
    steps and the end test (the policy settled and the pool matching it)."""

    def __init__(
        self,
        policy: Policy,
        pool: WorkerPool,
        read_counts: Callable[[], QueueCounts],
        read_completed: Callable[[], int],
        events: EventLog,
        cold_start_ticks: int = 0,
        pools: tuple[PoolSpec, ...] = (),
        capacity: Capacity | None = None,
    ) -> None:
        self.policy = policy
        self.pool = pool
        self.pools = pools  # () : one group, the service as before pools existed
        self.capacity = capacity or Capacity()
        self._read_counts = read_counts
        self._read_completed = read_completed
        self._events = events
        self.tick = 0  # steps taken
        # Ticks between two steps: the run waits `--tick` seconds × this.
        self.interval_ticks = policy.period_s / PERIOD_S
        # The pool counts launch delays in steps.
        self._cold_start_steps = round(cold_start_ticks / self.interval_ticks)

    @property
    def now(self) -> float:
        """The policy's clock, seconds: step n ends at n × period_s, whatever the wall-clock
        length of a tick (the run paces the steps)."""
        return self.tick * self.policy.period_s

    def step(self) -> Tick:
        self.tick += 1
        counts = self._read_counts()
        self.pool.reap()
        # One read per step: it stands for the whole period the step closes.
        self.policy.observe(
            self.now - self.policy.period_s, Counts(counts.visible, counts.in_flight)
        )
        if self.pools:
            fleet = Fleet.of_pools(tuple(self._observe(spec) for spec in self.pools))
        else:
            fleet = Fleet(len(self.pool.of_state("running")), len(self.pool.of_state("pending")))
        decision = self.policy.decide(self.now, fleet)
        desired, pools = decision.desired, list[dict[str, object]]()
        if decision.pools:
            desired, pools = self._place(decision)
        else:
            self.pool.scale_to(decision.desired, self.tick, self._cold_start_steps)
        return record(
            self._events,
            self.pool,
            counts,
            self._read_completed(),
            step=self.tick,
            minute=self.now / PERIOD_S,
            desired=desired,
            alarm=decision.alarm,
            reason=decision.reason,
            pools=pools,
        )

    def refusing(self, pool: str) -> bool:
        """The pool's outage is on: no new host for it now."""
        return self.capacity.capacity_from(pool, self.now) > self.now

    def _observe(self, spec: PoolSpec) -> PoolObservation:
        """The group as the controller reads a pool's service (tts_fleet/controller/ecs.py):
        its tasks waiting for capacity date from when they were asked for (createdAt), and
        while its outage reports failures, the last attempt to place one is a failure event."""
        period = self.policy.period_s
        pending = self.pool.of_state("pending", spec.name)
        refused = [task for task in pending if task.refused_tick is not None]
        oldest = max((self.tick - task.created_tick for task in refused), default=0) * period
        failure = None
        if refused and self.capacity.reports_failures(spec.name, self.now):
            first = min(task.refused_tick or 0 for task in refused) * period
            failure = first + (self.now - first) // PLACEMENT_RETRY_S * PLACEMENT_RETRY_S
        return PoolObservation(
            name=spec.name,
            desired=self.pool.desired.get(spec.name, 0),
            running=len(self.pool.of_state("running", spec.name)),
            pending=len(pending),
            oldest_provisioning_s=float(oldest),
            placement_failure_at=failure,
        )

    def _place(self, decision: Decision) -> tuple[int, list[dict[str, object]]]:
        """Sets each pool's group to the placement's count; what each group is then."""
        changes = {event.pool: event for event in decision.events}
        for event in decision.events:
            self._events.write(f"pool_{event.kind}", pool=event.pool, cause=event.cause)
        shown: list[dict[str, object]] = []
        for target in decision.pools:
            refusing = self.refusing(target.name)
            self.pool.scale_group(
                target.name, target.desired, self.tick, self._cold_start_steps, refusing
            )
            change = changes.get(target.name)
            shown.append(
                {
                    "pool": target.name,
                    "desired": target.desired,
                    "running": len(self.pool.of_state("running", target.name)),
                    "pending": len(self.pool.of_state("pending", target.name)),
                    "available": target.available,
                    "cause": target.cause,
                    "refusing": refusing,
                    "change": change.kind if change is not None else "",
                }
            )
        return sum(target.desired for target in decision.pools), shown

    def settled(self, sample: Tick) -> bool:
        """The policy is settled (queue drained, desired back at minWorkers) and the pool
        matches it with nothing in motion."""
        pool_settled = sample.running == sample.desired and not (sample.pending or sample.stopping)
        return self.policy.settled() and pool_settled


def record(
    events: EventLog,
    pool: WorkerPool,
    counts: QueueCounts,
    completed: int,
    *,
    step: int,
    minute: float,
    desired: int,
    alarm: str,
    reason: str = "",
    pools: list[dict[str, object]] | None = None,
) -> Tick:
    """The step's Tick, counted after the pool acted, logged as a `decision` event."""
    sample = Tick(
        tick=step,
        t=round(events.elapsed(), 3),
        visible=counts.visible,
        in_flight=counts.in_flight,
        outstanding=counts.outstanding,
        failed=counts.dead_letters,
        completed=completed,
        alarm=alarm,
        desired=desired,
        running=len(pool.of_state("running")),
        pending=len(pool.of_state("pending")),
        stopping=len(pool.of_state("stopping")),
        workers=pool.describe(),
        minute=minute,
        reason=reason,
        pools=pools or [],
    )
    fields = asdict(sample)
    del fields["t"]  # the log stamps its own time
    if not sample.pools:
        del fields["pools"]  # a run without pools logs what it always logged
    events.write("decision", **fields)
    return sample
