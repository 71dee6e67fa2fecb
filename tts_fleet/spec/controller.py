"""The controller policy (issue #13): one pure function from a 10-s sample to a desired count.

The deployed controller (a Lambda, `scaling.controller: lambda`), the local fleet and the
simulator all call `decide` with the same three things: the parameters (from the stack
config), the state the previous call returned (JSON, stored by the caller), and one
observation of the queue and the service. Pure: no I/O, no clock, stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

# How often the deployed controller samples the queue while anything is outstanding or running.
SAMPLE_INTERVAL_S = 10.0
# Recent idle gaps kept for the learned idle window.
MAX_GAPS = 8


class _ScalingLike(Protocol):
    """What `from_config` reads; `tts_fleet.spec.config.ScalingConfig` satisfies it."""

    @property
    def min_workers(self) -> int: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def jobs_per_worker(self) -> int: ...
    @property
    def idle_minutes(self) -> int: ...


@dataclass(frozen=True)
class ControllerParams:
    min_workers: int
    max_workers: int
    jobs_per_worker: int
    idle_minutes: int
    cold_start_work: float  # κ, scaling.coldStartWork
    cold_start_s: float  # expected seconds from launch to a serving worker
    seconds_per_job: float  # expected warm seconds per job per worker (1 / throughput)
    concurrency: int = 1  # worker slots: in_flight / concurrency workers are busy

    @classmethod
    def from_config(
        cls,
        scaling: _ScalingLike,
        *,
        cold_start_s: float,
        seconds_per_job: float,
        concurrency: int = 1,
    ) -> ControllerParams:
        return cls(
            min_workers=scaling.min_workers,
            max_workers=scaling.max_workers,
            jobs_per_worker=scaling.jobs_per_worker,
            idle_minutes=scaling.idle_minutes,
            cold_start_work=float(getattr(scaling, "cold_start_work", DEFAULT_COLD_START_WORK)),
            cold_start_s=cold_start_s,
            seconds_per_job=seconds_per_job,
            concurrency=concurrency,
        )

    def clamp(self, count: int) -> int:
        return max(self.min_workers, min(self.max_workers, count))


# κ when the stack file sets none; tts_fleet/spec/config.py uses the same value.
DEFAULT_COLD_START_WORK = 0.5


@dataclass(frozen=True)
class Observation:
    now: float  # seconds, any epoch
    visible: int  # ApproximateNumberOfMessages
    in_flight: int  # ApproximateNumberOfMessagesNotVisible
    running: int  # ECS runningCount
    pending: int  # ECS pendingCount (launches under way)

    @property
    def outstanding(self) -> int:
        return self.visible + self.in_flight


@dataclass(frozen=True)
class ControllerState:
    """What one call leaves for the next. Every field has a default: `{}` is a fresh state."""

    updated: float | None = None  # `now` of the last observation
    outstanding: int = 0  # visible + in flight at the last observation
    rate: float = 0.0  # arrivals per second, smoothed
    idle_since: float | None = None  # start of the current empty-queue gap
    gaps: tuple[float, ...] = field(default_factory=tuple)  # recent idle gaps, seconds
    desired: int = 0  # the last desired count
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gaps"] = list(self.gaps)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControllerState:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "gaps" in values:
            values["gaps"] = tuple(float(g) for g in values["gaps"])
        return cls(**values)


@dataclass(frozen=True)
class ControllerDecision:
    desired: int
    reason: str  # short, for logs/metrics ("backlog", "warm-one", "idle-release", …)
    state: ControllerState


def decide(
    params: ControllerParams, state: ControllerState, obs: Observation
) -> ControllerDecision:
    """The desired worker count after this observation."""
    outstanding = obs.outstanding
    idle_since = _idle_since(state, obs)
    gaps = _gaps(state, obs)
    if outstanding > 0:
        # Backlog bands: ceil(outstanding / jobsPerWorker); never below the workers already
        # running or launching while work waits (a cancelled launch wastes its boot).
        bands = math.ceil(outstanding / params.jobs_per_worker)
        desired, reason = max(bands, obs.running + obs.pending), "backlog"
    elif idle_since is not None and obs.now - idle_since >= params.idle_minutes * 60:
        desired, reason = params.min_workers, "idle-release"
    else:
        # The queue just emptied: one warm worker waits for the next job, the rest go now.
        desired, reason = min(1, obs.running + obs.pending), "warm-one"
    desired = params.clamp(desired)
    new_state = ControllerState(
        updated=obs.now,
        outstanding=outstanding,
        rate=state.rate,
        idle_since=idle_since,
        gaps=gaps,
        desired=desired,
        reason=reason,
    )
    return ControllerDecision(desired, reason, new_state)


def _idle_since(state: ControllerState, obs: Observation) -> float | None:
    if obs.outstanding > 0:
        return None
    if state.idle_since is not None:
        return state.idle_since
    return obs.now


def _gaps(state: ControllerState, obs: Observation) -> tuple[float, ...]:
    """An idle gap ends when work shows up again; its length joins the recent ones."""
    if obs.outstanding > 0 and state.idle_since is not None:
        return (*state.gaps, obs.now - state.idle_since)[-MAX_GAPS:]
    return state.gaps
