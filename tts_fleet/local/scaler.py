"""The local scaler: CloudWatch + Application Auto Scaling + the ECS service, one tick at a time.

One tick stands for one CloudWatch minute. Each tick reads the queue's counts (the alarm's
metric math: outstanding = visible + in flight), feeds the datapoint to the same
`policy.AlarmModel` the Pulumi alarms and the simulator use, and sets the worker pool to the
result, exactly as the step policy sets the service's desiredCount in AWS.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.spec.policy import AlarmModel, ScalingParams


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
    ) -> None:
        self.cfg = cfg
        self.model = AlarmModel(cfg)
        self.pool = pool
        self._read_counts = read_counts
        self._read_completed = read_completed
        self._events = events
        self._cold_start_ticks = cold_start_ticks
        # The idle alarm looks back idleMinutes periods; older datapoints never matter.
        self.datapoints: deque[float | None] = deque(maxlen=cfg.idle_minutes)
        self.desired = cfg.min_workers  # a new ECS service starts at its minimum
        self.tick = 0

    def step(self) -> Tick:
        self.tick += 1
        counts = self._read_counts()
        self.datapoints.append(counts.outstanding)
        points = list(self.datapoints)
        state = self.model.state(points)
        self.desired = self.model.evaluate(points, self.desired)
        self.pool.reap()
        self.pool.scale_to(self.desired, self.tick, self._cold_start_ticks)
        alarm = "scale-out" if state.scale_out else "idle" if state.idle else "ok"
        sample = Tick(
            tick=self.tick,
            t=round(self._events.elapsed(), 3),
            visible=counts.visible,
            in_flight=counts.in_flight,
            outstanding=counts.outstanding,
            failed=counts.dead_letters,
            completed=self._read_completed(),
            alarm=alarm,
            desired=self.desired,
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
        """The queue has drained and the fleet is back at its minimum, nothing in motion."""
        return (
            sample.outstanding == 0
            and sample.alarm == "idle"
            and sample.desired == self.cfg.min_workers
            and sample.running == sample.desired
            and sample.pending == 0
            and sample.stopping == 0
        )
