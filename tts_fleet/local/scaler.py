"""The local scaler: CloudWatch + Application Auto Scaling + the ECS service, one tick at a time.

One tick stands for one CloudWatch minute. Each tick reads the queue's counts (the alarm's
metric math: outstanding = visible + in flight) and drives the same
`tts_fleet.spec.autoscaler.Autoscaler` the simulator drives (datapoints, metric lag, the
`AlarmModel` the Pulumi alarms deploy, the clamp), then sets the worker pool to its result,
exactly as the step policy sets the service's desiredCount in AWS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.spec.autoscaler import PERIOD_S, Autoscaler
from tts_fleet.spec.policy import ScalingParams

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
    alarm: str  # "scale-out" | "idle" | "ok"
    desired: int
    running: int
    pending: int
    stopping: int
    workers: list[dict[str, object]] = field(default_factory=list)


class Scaler:
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
        self.cfg = cfg
        # The autoscaler's clock is CloudWatch time: tick n ends minute n - 1 at n × 60 s,
        # whatever the wall-clock length of a tick (the run paces the ticks).
        self.autoscaler = Autoscaler(cfg, lag_s=metric_lag_s)
        self.pool = pool
        self._read_counts = read_counts
        self._read_completed = read_completed
        self._events = events
        self._cold_start_ticks = cold_start_ticks
        self.tick = 0

    def step(self) -> Tick:
        self.tick += 1
        counts = self._read_counts()
        # One read per tick: it stands for the whole minute the tick closes.
        minute_end = self.tick * PERIOD_S
        self.autoscaler.observe(minute_end - PERIOD_S, counts.outstanding)
        decision = self.autoscaler.decide(minute_end)
        self.pool.reap()
        self.pool.scale_to(decision.desired, self.tick, self._cold_start_ticks)
        sample = Tick(
            tick=self.tick,
            t=round(self._events.elapsed(), 3),
            visible=counts.visible,
            in_flight=counts.in_flight,
            outstanding=counts.outstanding,
            failed=counts.dead_letters,
            completed=self._read_completed(),
            alarm=decision.alarm,
            desired=decision.desired,
            running=len(self.pool.of_state("running")),
            pending=len(self.pool.of_state("pending")),
            stopping=len(self.pool.of_state("stopping")),
            workers=self.pool.describe(),
        )
        fields = asdict(sample)
        del fields["t"]  # the log stamps its own time
        self._events.write("decision", **fields)
        return sample

    def settled(self, sample: Tick) -> bool:
        """The autoscaler is settled (queue drained, desired back at minWorkers) and the
        pool matches it with nothing in motion."""
        return (
            self.autoscaler.settled()
            and sample.running == sample.desired
            and sample.pending == 0
            and sample.stopping == 0
        )
