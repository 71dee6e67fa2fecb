"""The alarms mode's math (DESIGN §4): the formula, the step bands and the two alarms.

Pure: standard library only. The Pulumi step-scaling component turns `bands()` into
StepScaling adjustments; `tts_fleet.scaling.alarms.Autoscaler` is the loop around `AlarmModel`
(datapoints, metric lag, clamp) that the simulator and the local fleet drive through
`tts_fleet.scaling.policy.AlarmsPolicy`, so what is simulated is what is deployed. The
controller mode's math is tts_fleet/scaling/controller.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Application Auto Scaling: at most 20 step adjustments per step scaling policy.
# https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-limits.html
MAX_STEP_ADJUSTMENTS = 20
# The scale-out alarm fires at outstanding >= 1; step bounds are relative to it.
SCALE_OUT_THRESHOLD = 1
# The idle alarm counts a minute as idle at outstanding <= 0.
IDLE_THRESHOLD = 0
# CloudWatch evaluates at most one day of 1-minute periods.
MAX_EVALUATION_PERIODS = 1440


class ScalingParams(Protocol):
    """What the math needs; `tts_fleet.config.models.ScalingConfig` satisfies it."""

    @property
    def min_workers(self) -> int: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def jobs_per_worker(self) -> int: ...
    @property
    def idle_minutes(self) -> int: ...


def outstanding(visible: int, in_flight: int) -> int:
    """The work the fleet is sized for: ApproximateNumberOfMessagesVisible +
    ApproximateNumberOfMessagesNotVisible. Counting in-flight work keeps the fleet from
    shrinking under running jobs."""
    return visible + in_flight


# outstanding() as CloudWatch metric math over the queries with ids `visible` and
# `notVisible` (the alarms' metric and the dashboard's graph of it).
OUTSTANDING_EXPRESSION = "visible + notVisible"


@dataclass(frozen=True)
class Scaling:
    """A plain ScalingParams for callers without a stack config (the simulator's setups);
    its values come from a ScalingConfig, whose fields hold the defaults."""

    min_workers: int
    max_workers: int
    jobs_per_worker: int
    idle_minutes: int


@dataclass(frozen=True)
class Band:
    """Step adjustment: metric - threshold in [lower, upper) -> ExactCapacity `capacity`."""

    lower: int
    upper: int | None  # None: open-ended top band
    capacity: int


@dataclass(frozen=True)
class BandPlan:
    bands: tuple[Band, ...]
    # Largest capacity / formula ratio over all outstanding values; 1.0 when exact.
    worst_overprovision: float


def formula(outstanding: int, cfg: ScalingParams) -> int:
    """clamp(ceil(outstanding / jobsPerWorker), minWorkers, maxWorkers)."""
    raw = math.ceil(outstanding / cfg.jobs_per_worker)
    return max(cfg.min_workers, min(cfg.max_workers, raw))


def desired(outstanding: int, current: int, cfg: ScalingParams, *, idle: bool = False) -> int:
    """Target task count.

    While work is outstanding: the formula. With an empty queue: `minWorkers` once the idle
    rule has fired (`idle`), otherwise the current count kept within [min, max] — an empty
    queue alone never stops the fleet, so a lull shorter than the idle window costs no
    cold start.
    """
    if outstanding > 0:
        return formula(outstanding, cfg)
    if idle:
        return cfg.min_workers
    return max(cfg.min_workers, min(cfg.max_workers, current))


def capacity_levels(
    max_workers: int, limit: int = MAX_STEP_ADJUSTMENTS, *, min_workers: int = 0
) -> tuple[int, ...]:
    """At most `limit` capacity levels from max(1, minWorkers) to `max_workers`, ending at it.

    Levels below minWorkers would be clamped up by the scalable target anyway, so they are
    not spent. With more workers than levels, the levels are spread so that the worst ratio
    of capacity to formula (level_i / (level_{i-1} + 1)) is as small as it can be: a binary
    search on that ratio with a greedy fill (from a level, jump as far as the ratio allows;
    a higher level never reaches less, so greedy is optimal for a given ratio).
    """
    start = min(max(1, min_workers), max_workers)
    if max_workers - start + 1 <= limit:
        return tuple(range(start, max_workers + 1))
    low, high = 1.0, float(max_workers)
    for _ in range(100):
        ratio = (low + high) / 2
        if len(_greedy_levels(start, max_workers, ratio)) <= limit:
            high = ratio
        else:
            low = ratio
    return _greedy_levels(start, max_workers, high)


def _greedy_levels(start: int, max_workers: int, ratio: float) -> tuple[int, ...]:
    levels = [start]
    while levels[-1] < max_workers:
        reach = math.floor(ratio * (levels[-1] + 1) + 1e-9)
        levels.append(min(max_workers, max(levels[-1] + 1, reach)))
    return tuple(levels)


def bands(cfg: ScalingParams) -> BandPlan:
    """Step adjustments for the `outstanding >= 1` alarm (DESIGN §4).

    Level L_i serves formula values (L_{i-1}, L_i], i.e. outstanding in
    [L_{i-1}·J + 1, L_i·J], i.e. metric - threshold in [L_{i-1}·J, L_i·J). The first band
    starts at 0 (outstanding 1) and the last is open-ended at maxWorkers.
    """
    jobs = cfg.jobs_per_worker
    levels = capacity_levels(cfg.max_workers, min_workers=cfg.min_workers)
    result: list[Band] = []
    worst = 1.0  # the first band is exact: its formula value is always max(1, minWorkers)
    previous = 0
    for index, level in enumerate(levels):
        top = index == len(levels) - 1
        result.append(Band(previous * jobs, None if top else level * jobs, level))
        if index:
            worst = max(worst, level / (previous + 1))
        previous = level
    return BandPlan(tuple(result), worst)


def step_capacity(outstanding: float, plan: BandPlan) -> int:
    """The ExactCapacity the step policy sets for this outstanding value (alarm in ALARM).

    Like Application Auto Scaling, the raw aggregated value is compared with the bounds
    (lower inclusive, upper exclusive above the threshold).
    """
    metric = outstanding - SCALE_OUT_THRESHOLD
    for band in plan.bands:
        if band.lower <= metric and (band.upper is None or metric < band.upper):
            return band.capacity
    raise ValueError(f"outstanding={outstanding} is below the alarm threshold")


@dataclass(frozen=True)
class AlarmState:
    scale_out: bool
    idle: bool

    @property
    def label(self) -> str:
        """The alarm in ALARM, as the local run's events and views name it."""
        return "scale-out" if self.scale_out else "idle" if self.idle else "ok"


class AlarmModel:
    """CloudWatch alarms over 1-minute datapoints of `outstanding` (None = missing data).

    scale-out: outstanding >= 1 for 1 of 1 periods (missing data: not breaching).
    idle: outstanding <= 0 for `idleMinutes` of `idleMinutes` periods, missing data
    breaching — an idle queue stops publishing some SQS metrics.
    """

    def __init__(self, cfg: ScalingParams) -> None:
        if not 1 <= cfg.idle_minutes <= MAX_EVALUATION_PERIODS:
            raise ValueError(f"idle_minutes must be in 1..{MAX_EVALUATION_PERIODS}")
        self.cfg = cfg
        self.plan = bands(cfg)

    def state(self, datapoints: Sequence[float | None]) -> AlarmState:
        latest = datapoints[-1] if datapoints else None
        scale_out = latest is not None and latest >= SCALE_OUT_THRESHOLD
        # Fewer datapoints than idleMinutes: the missing ones are missing data, i.e. breaching.
        window = datapoints[-self.cfg.idle_minutes :]
        idle = all(point is None or point <= IDLE_THRESHOLD for point in window)
        return AlarmState(scale_out=scale_out, idle=idle)

    def evaluate(self, datapoints: Sequence[float | None], current: int) -> int:
        """Desired count after one evaluation; policies re-apply every period in ALARM."""
        state = self.state(datapoints)
        return self.target(state, datapoints[-1] if datapoints else None, current)

    def target(self, state: AlarmState, latest: float | None, current: int) -> int:
        """What the alarm actions set, given the state `state()` found and the latest
        datapoint: the step's ExactCapacity, minWorkers, or (no alarm) the current count."""
        if state.scale_out:
            assert latest is not None, "scale-out needs a datapoint"
            return step_capacity(latest, self.plan)
        if state.idle:
            return self.cfg.min_workers
        return current
