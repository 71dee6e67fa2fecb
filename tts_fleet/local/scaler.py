"""The local scaler: what sets the ECS service's desired count in AWS, one step at a time.

`scaling.controller: alarms` (Scaler): one step is one CloudWatch minute (a tick). Each reads
the queue's counts (the alarm's metric math: outstanding = visible + in flight) and drives the
same `tts_fleet.scaling.alarms.Autoscaler` the simulator drives (datapoints, metric lag, the
`AlarmModel` the Pulumi alarms deploy, the clamp), then sets the worker pool to its result,
exactly as the step policy sets the service's desiredCount in AWS.

`scaling.controller: lambda` (ControllerScaler): one step is one 10-s sample of the deployed
controller's loop (tts_fleet/controller/handler.py): the queue's counts and the pool's
running/pending tasks go to the same `tts_fleet.scaling.controller.decide`, whose count the pool
follows, as UpdateService sets it in AWS. Six samples make a tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.scaling.alarms import PERIOD_S, Autoscaler
from tts_fleet.scaling.bands import ScalingParams
from tts_fleet.scaling.controller import (
    SAMPLE_INTERVAL_S,
    ControllerParams,
    ControllerState,
    Observation,
    decide,
)

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


class _PoolScaler:
    """What both loops share: the worker pool they size, the reads, the event log, the steps
    and the end test (the queue drained, the count at its floor, the pool matching it)."""

    # Ticks between two steps: the run waits `--tick` seconds × this.
    interval_ticks = 1.0

    def __init__(
        self,
        pool: WorkerPool,
        read_counts: Callable[[], QueueCounts],
        read_completed: Callable[[], int],
        events: EventLog,
    ) -> None:
        self.pool = pool
        self._read_counts = read_counts
        self._read_completed = read_completed
        self._events = events
        self.tick = 0

    def _pool_settled(self, sample: Tick) -> bool:
        return sample.running == sample.desired and sample.pending == 0 and sample.stopping == 0


class Scaler(_PoolScaler):
    def __init__(
        self,
        cfg: ScalingParams,
        pool: WorkerPool,
        read_counts: Callable[[], QueueCounts],
        read_completed: Callable[[], int],
        events: EventLog,
        cold_start_ticks: int = 0,
        *,
        metric_lag_s: float,
    ) -> None:
        super().__init__(pool, read_counts, read_completed, events)
        self.cfg = cfg
        # The autoscaler's clock is CloudWatch time: tick n ends minute n - 1 at n × 60 s,
        # whatever the wall-clock length of a tick (the run paces the ticks).
        self.autoscaler = Autoscaler(cfg, lag_s=metric_lag_s)
        self._cold_start_ticks = cold_start_ticks

    def step(self) -> Tick:
        self.tick += 1
        counts = self._read_counts()
        # One read per tick: it stands for the whole minute the tick closes.
        minute_end = self.tick * PERIOD_S
        self.autoscaler.observe(minute_end - PERIOD_S, counts.outstanding)
        decision = self.autoscaler.decide(minute_end)
        self.pool.reap()
        self.pool.scale_to(decision.desired, self.tick, self._cold_start_ticks)
        return record(
            self._events,
            self.pool,
            counts,
            self._read_completed(),
            step=self.tick,
            minute=float(self.tick),
            desired=decision.desired,
            alarm=decision.alarm,
        )

    def settled(self, sample: Tick) -> bool:
        """The autoscaler is settled (queue drained, desired back at minWorkers) and the
        pool matches it with nothing in motion."""
        return self.autoscaler.settled() and self._pool_settled(sample)


class ControllerScaler(_PoolScaler):
    """Controller mode: the deployed controller's loop on the fleet's own clock, one
    SAMPLE_INTERVAL_S sample per step (a tick is a minute, so a step is a sixth of one)."""

    interval_ticks = SAMPLE_INTERVAL_S / PERIOD_S

    def __init__(
        self,
        params: ControllerParams,
        pool: WorkerPool,
        read_counts: Callable[[], QueueCounts],
        read_completed: Callable[[], int],
        events: EventLog,
        cold_start_ticks: int = 0,
    ) -> None:
        super().__init__(pool, read_counts, read_completed, events)  # tick: samples taken
        self.params = params
        # The pool counts launch delays in steps here: samples, not ticks.
        self._cold_start_steps = round(cold_start_ticks / self.interval_ticks)
        self.state = ControllerState()

    @property
    def now(self) -> float:
        """The fleet's own clock, seconds: sample n is taken at n × SAMPLE_INTERVAL_S."""
        return self.tick * SAMPLE_INTERVAL_S

    def step(self) -> Tick:
        self.tick += 1
        counts = self._read_counts()
        self.pool.reap()
        observation = Observation(
            now=self.now,
            visible=counts.visible,
            in_flight=counts.in_flight,
            running=len(self.pool.of_state("running")),
            pending=len(self.pool.of_state("pending")),
        )
        decision = decide(self.params, self.state, observation)
        self.state = decision.state
        self.pool.scale_to(decision.desired, self.tick, self._cold_start_steps)
        return record(
            self._events,
            self.pool,
            counts,
            self._read_completed(),
            step=self.tick,
            minute=self.now / PERIOD_S,
            desired=decision.desired,
            alarm="controller",
            reason=decision.reason,
        )

    def settled(self, sample: Tick) -> bool:
        """Queue drained, the count back at minWorkers, and the pool matching it."""
        drained = sample.outstanding == 0 and sample.desired == self.params.min_workers
        return drained and self._pool_settled(sample)


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
