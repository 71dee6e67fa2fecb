"""The controller mode's math (issue #13): one pure function from a 10-s sample to a desired count.

`decide` takes the parameters (from the stack config), the state the previous call returned
(JSON, stored by the deployed controller) and one observation of the queue and the service.
`tts_fleet.scaling.policy.ControllerPolicy` wraps it in the one `Policy` interface that the
deployed controller (a Lambda, `scaling.mode: controller`), the local fleet and the simulator
drive. Pure: no I/O, no clock, stdlib only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from functools import partial
from typing import Any

from tts_fleet.scaling.bands import ScalingParams, outstanding
from tts_fleet.scaling.batches import BatchForecast, OpenBatch
from tts_fleet.scaling.deadlines import FleetNow, Pricing, finished, plan
from tts_fleet.scaling.pools import InvalidPoolState, PoolState, pool_states_from_json

# How often the deployed controller samples the queue while anything is outstanding or running.
SAMPLE_INTERVAL_S = 10.0
# Recent idle gaps kept for the learned idle window.
MAX_GAPS = 8
# Minutes of stranded work (jobs visible, no task running or wanted) before the safety-net
# alarm starts a worker (components/autoscaling.py). The controller reacts within seconds, so
# three minutes means it is not running.
SAFETY_NET_MINUTES = 3


@dataclass(frozen=True)
class ControllerParams:
    min_workers: int
    max_workers: int
    jobs_per_worker: int
    idle_minutes: int
    cold_start_work: float  # κ, scaling.coldStartWork
    cold_start_s: float  # expected seconds from launch to a serving worker
    seconds_per_job: float  # expected warm seconds per job per worker (1 / throughput)
    concurrency: int  # worker slots: in_flight / concurrency workers are busy
    host_idle_s: float  # scaling.hostIdleSeconds: a released worker's host lingers

    @classmethod
    def from_config(
        cls,
        scaling: ScalingParams,
        *,
        cold_start_s: float,
        seconds_per_job: float,
        concurrency: int,
        cold_start_work: float,
        host_idle_seconds: int,
    ) -> ControllerParams:
        """The bounds from `scaling` (a ScalingConfig or a simulator's Scaling), κ and the
        host linger as the stack sets them (-1, hosts kept forever, lingers as 0 here: no
        released host's restart is counted on), the timings from tts_fleet/scaling/physics.py."""
        return cls(
            min_workers=scaling.min_workers,
            max_workers=scaling.max_workers,
            jobs_per_worker=scaling.jobs_per_worker,
            idle_minutes=scaling.idle_minutes,
            cold_start_work=float(cold_start_work),
            cold_start_s=cold_start_s,
            seconds_per_job=seconds_per_job,
            concurrency=concurrency,
            host_idle_s=float(max(0, host_idle_seconds)),
        )

    def clamp(self, count: int) -> int:
        return max(self.min_workers, min(self.max_workers, count))


@dataclass(frozen=True)
class Observation:
    now: float  # seconds, any epoch
    visible: int  # ApproximateNumberOfMessages
    in_flight: int  # ApproximateNumberOfMessagesNotVisible
    running: int  # ECS runningCount
    pending: int  # ECS pendingCount (launches under way)
    # Open deadline batches (issue #23; the driver reads them from the bucket's batch records):
    # with work left, the deadline planner (tts_fleet/scaling/deadlines.py) sizes the fleet.
    batches: tuple[OpenBatch, ...] = ()
    # Measured warm seconds per job per worker (the workers' throughput); None: the params'.
    seconds_per_job: float | None = None
    # With capacity pools: the cheapest Spot and On-Demand worker-hour now, for the deadline
    # planner's Spot rule (None: one service, nothing to choose).
    pricing: Pricing | None = None

    @property
    def outstanding(self) -> int:
        return outstanding(self.visible, self.in_flight)


@dataclass(frozen=True)
class ControllerState:
    """What one call leaves for the next. Every field has a default: `{}` is a fresh state."""

    updated: float | None = None  # `now` of the last observation
    visible: int = 0  # the last observation's queue and service
    in_flight: int = 0
    running: int = 0
    rates: tuple[float, ...] = ()  # recent per-sample arrival-rate estimates, jobs/s
    rate: float = 0.0  # arrivals per second: a trimmed mean of `rates`
    floor: int = 0  # the rate floor (workers steady load needs), with hysteresis
    launches: tuple[float, ...] = ()  # when the launches still pending were asked for
    idle_since: float | None = None  # start of the current empty-queue gap
    gaps: tuple[float, ...] = ()  # recent idle gaps, seconds
    desired: int = 0  # the last desired count
    reason: str = ""
    # Capacity pools' availability (tts_fleet/scaling/pools.py); () for a stack without pools.
    pools: tuple[PoolState, ...] = ()
    # Measured seconds per job per worker while deadline batches drained (`_served`).
    served: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in _TUPLES:
            data[name] = list(getattr(self, name))
        del data["pools"], data["served"]
        if self.served:  # a state without deadline batches writes what it always wrote
            data["served"] = list(self.served)
        if self.pools:  # a stack without pools writes the state it always wrote
            data["pools"] = [pool.to_json() for pool in self.pools]
        return data

    @classmethod
    def from_json(cls, data: object, *, now: float | None = None) -> ControllerState:
        """The state `to_json` wrote, checked field by field: the stored object is input
        anyone with write access to the bucket can change, and a value `decide` could never
        have produced would steer it (or make it raise on every call). Integral floats are
        taken as counts; a value of another type or past its bound (MAX_TASKS, MAX_MESSAGES,
        MAX_RATE, MAX_GAP_S, the list lengths, the pools' bounds of
        `pools.pool_states_from_json`) raises InvalidState naming the first bad field. With
        `now`, no timestamp may be later than now + CLOCK_SKEW_S."""
        if not isinstance(data, dict):
            raise InvalidState(f"not a JSON object but {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise InvalidState(f"unknown fields {_shown(unknown)}")
        horizon = math.inf if now is None else now + CLOCK_SKEW_S
        updated = _optional_timestamp(data, "updated", horizon)
        # What the last sample recorded (idle since, launched at) happened by then.
        latest = horizon if updated is None else updated
        try:
            pools = pool_states_from_json(data.get("pools", []), latest=latest, horizon=horizon)
        except InvalidPoolState as error:
            raise InvalidState(str(error)) from None
        return cls(
            updated=updated,
            visible=_count(data, "visible", MAX_MESSAGES),
            in_flight=_count(data, "in_flight", MAX_MESSAGES),
            running=_count(data, "running", MAX_TASKS),
            rates=_numbers(data, "rates", MAX_RATES, _rate),
            served=_numbers(data, "served", MAX_RATES, _per_job),
            rate=_number(data.get("rate", 0.0), "rate", 0.0, MAX_RATE),
            floor=_count(data, "floor", MAX_TASKS),
            launches=_numbers(data, "launches", MAX_TASKS, partial(_timestamp, latest=latest)),
            idle_since=_optional_timestamp(data, "idle_since", latest),
            gaps=_numbers(data, "gaps", MAX_GAPS, _gap),
            desired=_count(data, "desired", MAX_TASKS),
            reason=_text(data, "reason", MAX_REASON_CHARS),
            pools=pools,
        )


class InvalidState(ValueError):
    """A stored state `decide` could not have written; the message says what is wrong."""


_TUPLES = ("rates", "launches", "gaps")
MAX_RATES = 30  # five minutes of 10-s samples
# What a stored state may hold. Each bound is far past anything `decide` writes for a
# real fleet and queue, so a legitimate state always passes; what they stop is a corrupt or
# forged write (NaN, 1e308, a 10**9 floor) steering the policy or making it raise.
# Tasks in one ECS service (its quota): running, launches, the floor and the desired count.
MAX_TASKS = 5_000
# Messages in the queue (visible or in flight); SQS counts far fewer in any real backlog.
MAX_MESSAGES = 100_000_000
# Arrivals per second in one sample: 100,000 jobs in a 10-s sample, far past what producers
# sending 10 messages per SendMessageBatch call deliver to one fleet.
MAX_RATE = 10_000.0
# An idle gap: a year (the policy compares gaps to minutes; the bucket expires the state
# after expireDays without an invocation anyway).
MAX_GAP_S = 366 * 86_400.0
# Seconds per job per worker a measurement may hold: an hour (a TTS job takes seconds).
MAX_SECONDS_PER_JOB = 3600.0
# Saturated samples before the measured seconds per job replaces the configured one.
MIN_SERVED = 5
# `decide`'s reasons are one or two words.
MAX_REASON_CHARS = 64
# How far a stored timestamp may be ahead of the reader's clock: two invocations may run on
# hosts whose clocks differ by a little; a state from further ahead would stall the rate
# estimate and hold the warm worker until the clock caught up.
CLOCK_SKEW_S = 5.0
# Rate floor hysteresis: raise it when the workers would be busier than this ...
FLOOR_UP_UTILISATION = 0.85
# ... and lower it only when they would be idler than this.
FLOOR_DOWN_UTILISATION = 0.6


@dataclass(frozen=True)
class ControllerDecision:
    desired: int
    reason: str  # short, for logs/metrics ("backlog", "warm-one", "idle-release", …)
    state: ControllerState
    # With open deadline batches: one forecast per batch, and whether new workers may go to
    # Spot pools (the Can't-Be-Late rule of tts_fleet/scaling/deadlines.py).
    forecasts: tuple[BatchForecast, ...] = ()
    spot: bool = True


def decide(
    params: ControllerParams, state: ControllerState, obs: Observation
) -> ControllerDecision:
    """The desired worker count after this observation (issue #13):

    - work outstanding: enough workers for the backlog expected when a GPU started now would
      arrive, each new one only if it would find at least κ cold starts of work; never fewer
      than are running or launching (a cancelled launch wastes its boot);
    - queue empty: keep one warm worker (or minWorkers, or the rate floor) and release the
      surplus at once; the warm one goes after the learned idle window;
    - a rate floor, with hysteresis, keeps steady load from starving or flapping;
    - open deadline batches with work left (issue #23): the deadline plan
      (tts_fleet/scaling/deadlines.py) sets the count while all outstanding work is theirs,
      and is a floor under the above while other jobs wait too; `obs.pricing` (the
      cheapest Spot and On-Demand pool) lets it keep new workers off Spot when a loss would
      miss a deadline.
    """
    rates = _rates(params, state, obs)
    served = _served(state, obs)
    rate = _trimmed_mean(rates)
    floor = _floor(params, state.floor, rate)
    launches = _launches(state, obs)
    idle_since = _idle_since(state, obs)
    gaps = _gaps(state, obs)
    if obs.outstanding > 0:
        desired, reason = _busy(params, obs, rate, launches)
        desired = max(desired, floor)
    else:
        desired, reason = _idle(params, obs, floor, gaps, idle_since)
    forecasts: tuple[BatchForecast, ...] = ()
    spot = True
    if obs.batches:
        fleet = _fleet_now(params, obs, launches, served)
        deadline = plan(obs.batches, obs.outstanding, fleet, obs.pricing)
        if deadline is None:  # nothing of theirs is left in the queue
            forecasts = finished(obs.batches, obs.now)
        else:
            theirs = sum(max(0, b.jobs - b.done) for b in obs.batches) >= obs.outstanding
            if theirs or deadline.workers > desired:
                desired, reason = deadline.workers, deadline.reason
            forecasts, spot = deadline.forecasts, deadline.spot
    desired = params.clamp(desired)
    if desired > obs.running + obs.pending:
        launches = (*launches, *([obs.now] * (desired - obs.running - obs.pending)))
    new_state = ControllerState(
        updated=obs.now,
        visible=obs.visible,
        in_flight=obs.in_flight,
        running=obs.running,
        rates=rates,
        rate=rate,
        floor=floor,
        launches=launches,
        idle_since=idle_since,
        gaps=gaps,
        desired=desired,
        reason=reason,
        pools=state.pools,  # the placement (tts_fleet/scaling/pools.py) updates them
        served=served,
    )
    return ControllerDecision(desired, reason, new_state, forecasts, spot)


def _fleet_now(
    params: ControllerParams,
    obs: Observation,
    launches: tuple[float, ...],
    served: tuple[float, ...],
) -> FleetNow:
    """What the deadline planner starts from: this sample's workers and timings. Seconds per
    job: the driver's measured figure, else the state's rolling one once it has MIN_SERVED
    samples (their median), else the params' (the timing profile's)."""
    per_job = params.seconds_per_job
    if obs.seconds_per_job is not None:
        per_job = obs.seconds_per_job
    elif len(served) >= MIN_SERVED:
        per_job = statistics.median(served)
    return FleetNow(
        now=obs.now,
        running=obs.running,
        launches=launches,
        cold_start_s=params.cold_start_s,
        seconds_per_job=per_job,
        concurrency=params.concurrency,
        max_workers=params.max_workers,
    )


def _busy(
    params: ControllerParams, obs: Observation, rate: float, launches: tuple[float, ...]
) -> tuple[int, str]:
    """Sizing while work is outstanding."""
    have = obs.running + obs.pending
    cold, per_job = params.cold_start_s, params.seconds_per_job
    # Jobs the running and launching workers clear before a GPU started now would serve.
    drained = obs.running * cold / per_job
    drained += sum(min(cold, max(0.0, obs.now - t)) for t in launches) / per_job
    backlog = max(0.0, obs.outstanding + rate * cold - drained)
    bands = math.ceil(backlog / params.jobs_per_worker)
    if params.cold_start_work > 0:
        # N workers clear `backlog` in backlog·s / (N − rate·s) seconds once the new ones are
        # up; each new one is worth its boot while that is at least κ × the cold start.
        worth = rate * per_job + backlog * per_job / (params.cold_start_work * cold)
        wanted = min(bands, math.floor(min(worth, params.max_workers) + 1e-9))
    else:
        wanted = bands
    if wanted > have:
        return wanted, "backlog"
    if have == 0:
        return 1, "first-worker"  # work waits and nothing serves it: always start one
    return have, "busy"


def _idle(
    params: ControllerParams,
    obs: Observation,
    floor: int,
    gaps: tuple[float, ...],
    idle_since: float | None,
) -> tuple[int, str]:
    """Nothing outstanding: the rate floor, minWorkers, or one warm worker for a while."""
    idle_for = obs.now - (obs.now if idle_since is None else idle_since)
    warm = 1 if obs.running + obs.pending > 0 and idle_for < _idle_window(params, gaps) else 0
    desired = max(params.min_workers, floor, warm)
    if desired == 0:
        return 0, "idle-release"
    if floor >= max(params.min_workers, warm) and floor > 0:
        return desired, "rate-floor"
    if params.min_workers >= warm:
        return desired, "min-workers"
    return desired, "warm-one"


def _idle_window(params: ControllerParams, gaps: tuple[float, ...]) -> float:
    """How long the last worker waits for the next job: 0 or idleMinutes, whichever would
    have cost fewer GPU-seconds over the recent idle gaps (waiting wins ties: it is faster).
    With no gap seen yet, release at once: the host lingers hostIdleSeconds anyway, so a
    short gap still gets a warm restart, and a lone burst leaves no worker idling."""
    bound = params.idle_minutes * 60.0
    if not gaps:
        return 0.0
    wait = sum(_gap_cost(params, bound, g) for g in gaps)
    release = sum(_gap_cost(params, 0.0, g) for g in gaps)
    return bound if wait <= release else 0.0


def _gap_cost(params: ControllerParams, window: float, gap: float) -> float:
    """GPU-seconds one idle gap costs when the last worker waits `window` and is then
    released: its host lingers hostIdleSeconds (a restart within that is warm and the host
    was billed throughout); later, the host is gone and the next job pays a cold start."""
    covered = window + params.host_idle_s
    return gap if gap <= covered else covered + params.cold_start_s


def _rates(params: ControllerParams, state: ControllerState, obs: Observation) -> tuple[float, ...]:
    """This interval's arrival rate: the change in outstanding plus the jobs the busy
    workers completed meanwhile (SQS reports no arrivals, only counts)."""
    if state.updated is None:
        return state.rates
    dt = obs.now - state.updated
    if not 0 < dt <= 10 * SAMPLE_INTERVAL_S:
        return state.rates  # a gap in sampling (the controller slept): no estimate
    # Busy workers: in-flight messages over the slots (saturated workers hold c each).
    busy = min(state.running, (state.in_flight + obs.in_flight) / (2 * params.concurrency))
    completed = busy * dt / params.seconds_per_job
    previous = state.visible + state.in_flight
    arrived = max(0.0, obs.outstanding - previous + completed)
    return (*state.rates, arrived / dt)[-MAX_RATES:]


def _served(state: ControllerState, obs: Observation) -> tuple[float, ...]:
    """The seconds per job the running workers took over this interval, measured while
    deadline batches drained: the queue never empty (every running worker busy throughout)
    and the same workers running, so the drop in outstanding is what they did. A job
    arriving meanwhile hides a completion, which can only make the figure slower (more
    workers planned), never faster."""
    draining = any(batch.jobs > batch.done for batch in obs.batches)
    if not draining or state.updated is None:
        return state.served
    dt = obs.now - state.updated
    saturated = state.visible > 0 and obs.visible > 0 and obs.running == state.running > 0
    completed = state.visible + state.in_flight - obs.outstanding
    if not (0 < dt <= 10 * SAMPLE_INTERVAL_S and saturated and completed > 0):
        return state.served
    per_job = min(MAX_SECONDS_PER_JOB, obs.running * dt / completed)
    return (*state.served, per_job)[-MAX_RATES:]


def _trimmed_mean(rates: tuple[float, ...]) -> float:
    """Mean without the top tenth: a burst is one huge sample, not a rate."""
    if not rates:
        return 0.0
    ordered = sorted(rates)
    keep = ordered[: len(ordered) - max(1, len(ordered) // 10)] if len(ordered) >= 5 else []
    return sum(keep) / len(keep) if keep else 0.0


def _floor(params: ControllerParams, previous: int, rate: float) -> int:
    """Workers steady load needs: raised as soon as they would be over 85 % busy, lowered
    only once they would be under 60 % busy, so a noisy rate does not flap the count."""
    load = rate * params.seconds_per_job
    if load <= 0:
        return 0
    up = math.ceil(load / FLOOR_UP_UTILISATION - 1e-9)
    down = math.ceil(load / FLOOR_DOWN_UTILISATION - 1e-9)
    return min(params.max_workers, max(up, min(previous, down)))


def _launches(state: ControllerState, obs: Observation) -> tuple[float, ...]:
    """Launch times of the `pending` workers: the newest ones asked for; launches nobody
    recorded (another controller, lost state) count as just asked for, so the sizing never
    counts on work they have not begun to do."""
    known = state.launches[len(state.launches) - obs.pending :] if obs.pending else ()
    missing = obs.pending - len(known)
    return (*([obs.now - SAMPLE_INTERVAL_S] * missing), *known) if missing > 0 else known


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


def _shown(value: object) -> str:
    """A value for an error message: repr, cut short (the state may be megabytes of junk)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _number(value: object, name: str, low: float, high: float) -> float:
    # bool is an int in Python but never a number in the state.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidState(f"{name}: {_shown(value)} is not a number")
    number = float(value)
    if not low <= number <= high:  # NaN fails both comparisons
        raise InvalidState(f"{name}: {_shown(value)} is outside [{low:g}, {high:g}]")
    return number


def _per_job(value: object, name: str) -> float:
    per_job = _number(value, name, 0.0, MAX_SECONDS_PER_JOB)
    if per_job <= 0:
        raise InvalidState(f"{name}: {_shown(value)} is not a positive number of seconds")
    return per_job


def _rate(value: object, name: str) -> float:
    return _number(value, name, 0.0, MAX_RATE)


def _gap(value: object, name: str) -> float:
    return _number(value, name, 0.0, MAX_GAP_S)


def _count(data: dict[str, Any], name: str, high: int) -> int:
    value = data.get(name, 0)
    number = _number(value, name, 0.0, float(high))
    if not number.is_integer():
        raise InvalidState(f"{name}: {_shown(value)} is not a whole number")
    return int(number)


def _timestamp(value: object, name: str, latest: float) -> float:
    """A time on the sampler's clock (any epoch), no later than `latest`."""
    stamp = _number(value, name, -math.inf, latest)
    if not math.isfinite(stamp):
        raise InvalidState(f"{name}: {_shown(value)} is not a time")
    return stamp


def _optional_timestamp(data: dict[str, Any], name: str, latest: float) -> float | None:
    value = data.get(name)
    return None if value is None else _timestamp(value, name, latest)


def _numbers(
    data: dict[str, Any], name: str, longest: int, read: Callable[[object, str], float]
) -> tuple[float, ...]:
    values = data.get(name, [])
    if not isinstance(values, list):
        raise InvalidState(f"{name}: {_shown(values)} is not a list")
    if len(values) > longest:
        raise InvalidState(f"{name}: {len(values)} entries, more than {longest}")
    return tuple(read(value, f"{name}[{index}]") for index, value in enumerate(values))


def _text(data: dict[str, Any], name: str, longest: int) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or len(value) > longest or not value.isprintable():
        raise InvalidState(f"{name}: {_shown(value)} is not a short printable text")
    return value
