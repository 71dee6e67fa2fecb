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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.scaling.alarms import PERIOD_S
from tts_fleet.scaling.policy import Counts, Fleet, Policy

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
    ) -> None:
        self.policy = policy
        self.pool = pool
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
        fleet = Fleet(len(self.pool.of_state("running")), len(self.pool.of_state("pending")))
        decision = self.policy.decide(self.now, fleet)
        self.pool.scale_to(decision.desired, self.tick, self._cold_start_steps)
        return record(
            self._events,
            self.pool,
            counts,
            self._read_completed(),
            step=self.tick,
            minute=self.now / PERIOD_S,
            desired=decision.desired,
            alarm=decision.alarm,
            reason=decision.reason,
        )

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
    )
    fields = asdict(sample)
    del fields["t"]  # the log stamps its own time
    events.write("decision", **fields)
    return sample
