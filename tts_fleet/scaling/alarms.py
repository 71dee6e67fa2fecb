"""The alarms mode's model: the autoscaler loop around the alarms, on any clock (DESIGN §4).

What a deployed stack runs in AWS, in one object: CloudWatch reduces `outstanding` to one
Maximum datapoint per 1-minute period and publishes it `lag_s` after the period ends; every
minute both alarms evaluate what is published (`bands.AlarmModel`); Application Auto Scaling
sets the step's ExactCapacity, clamped to the scalable target's [minWorkers, maxWorkers].

`tts_fleet.scaling.policy.AlarmsPolicy` wraps it in the one `Policy` interface, which the
simulator drives on virtual time and the local fleet on its tick clock (one tick = one
minute), so both make the decisions the deployed alarms make. Pure: no clock of its own, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tts_fleet.scaling.bands import AlarmModel, AlarmState, ScalingParams

# The alarms' metric period: one datapoint a minute (components/autoscaling.py deploys it,
# components/observability.py draws it, tts_fleet/sim/scalers.py evaluates on it).
PERIOD_S = 60.0
# The step policies' cooldown (components/autoscaling.py deploys it; the simulator applies it).
POLICY_COOLDOWN_S = 60.0
# A scaling activity (UpdateService) completes a few seconds after the alarm fires; the
# step policy's cooldown runs from then, so a 60-s cooldown covers the next evaluation.
ACTIVITY_S = 5.0


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: what the alarms saw and the desired count it left."""

    desired: int
    state: AlarmState

    @property
    def alarm(self) -> str:
        return self.state.label


class Autoscaler:
    """CloudWatch datapoints + the two alarms + the scalable target, driven by the caller.

    `observe(now, outstanding)`: the outstanding count is this from `now` on (call it at every
    change; several calls at one instant: the last one holds). A period's datapoint is the
    largest value held during [start, end), so a value observed exactly on a boundary belongs
    to the period it starts.
    `decide(now)`: both alarms evaluate the datapoints published by `now`; the result is the
    new desired count (`desired`), which starts at minWorkers like a new ECS service.
    """

    def __init__(self, cfg: ScalingParams, *, lag_s: float, cooldown_s: float = 0.0) -> None:
        if lag_s < 0:
            raise ValueError(f"lag_s must be >= 0 (got {lag_s:g})")
        self.cfg = cfg
        self.lag_s = lag_s
        # Step policy cooldown: no scale-in until it has passed since the last activity
        # completed; a larger scale-out is never held back (AAS step scaling).
        self.cooldown_s = cooldown_s
        self._cooldown_end = -math.inf
        self.model = AlarmModel(cfg)
        self.desired = cfg.min_workers
        self.last: Evaluation | None = None
        # Periods whose datapoint may still be unpublished, besides the open one.
        self._unpublished = math.ceil(lag_s / PERIOD_S) + 1
        self._keep = cfg.idle_minutes + self._unpublished + 1  # older datapoints never matter
        self._series: list[float] = []  # closed periods' datapoints, the last ones only
        self._first = 0  # period index of _series[0]
        self._open = 0  # index of the period being accumulated
        self._open_max: float | None = None  # None: nothing observed in it since it opened
        self._held = 0.0  # the outstanding count now

    # -- CloudWatch --------------------------------------------------------------------
    def observe(self, now: float, outstanding: float) -> None:
        if now >= (self._open + 1) * PERIOD_S:
            self._roll(now)
        if self._open_max is None:
            # The value held since the period opened counts unless it opened at this instant.
            starts_now = now <= self._open * PERIOD_S
            self._open_max = outstanding if starts_now else max(self._held, outstanding)
        elif outstanding > self._open_max:
            self._open_max = outstanding
        self._held = outstanding

    def _roll(self, now: float) -> None:
        """Closes every period that ended by `now`; periods with no observation held the
        last value throughout."""
        period = int(now // PERIOD_S)
        if period <= self._open:
            return
        self._series.append(self._open_value())
        self._series.extend([self._held] * (period - self._open - 1))
        self._open = period
        self._open_max = None
        excess = len(self._series) - 2 * self._keep
        if excess > 0:  # trimmed in batches, so a long run costs no more per period
            excess += self._keep
            del self._series[:excess]
            self._first += excess

    def _open_value(self) -> float:
        return self._held if self._open_max is None else self._open_max

    def published(self, now: float) -> int:
        """How many periods' datapoints CloudWatch has published by `now`."""
        closed = self._first + len(self._series)
        return min(closed, max(0, math.floor((now - self.lag_s) / PERIOD_S + 1e-9)))

    # -- alarms and Application Auto Scaling ---------------------------------------------
    def decide(self, now: float) -> Evaluation:
        """One evaluation of both alarms at `now`, on one snapshot of the published series.

        In AWS the two alarms are evaluated separately and may, for one minute, see
        different snapshots; the next minute settles it. This takes the settled outcome.
        """
        self._roll(now)
        end = self.published(now) - self._first
        window = self._series[max(0, end - self.cfg.idle_minutes) : max(0, end)]
        state = self.model.state(window)
        target = self.model.target(state, window[-1] if window else None, self.desired)
        target = max(self.cfg.min_workers, min(self.cfg.max_workers, target))
        if target < self.desired and now < self._cooldown_end:
            target = self.desired  # scale-in held back by the cooldown
        if target != self.desired and self.cooldown_s > 0:
            self._cooldown_end = now + ACTIVITY_S + self.cooldown_s
        self.desired = target
        self.last = Evaluation(self.desired, state)
        return self.last

    # -- questions the callers' loops ask ----------------------------------------------
    def quiet(self) -> bool:
        """No datapoint that matters is above zero: none still to be published, none just
        published, and none so far in the open period. A caller may then skip ahead to its
        next arrival: the alarms can only repeat what they decided last."""
        recent = self._series[-self._unpublished :]
        return self._open_value() == 0 and not any(recent)

    def settled(self) -> bool:
        """Nothing outstanding and the desired count back at minWorkers: the autoscaler has
        nothing left to do (the caller adds its fleet's own state: tasks, hosts)."""
        return self._held == 0 and self.desired == self.cfg.min_workers
