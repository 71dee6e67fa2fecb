"""Capacity pools (issue #22): where the workers the policy wants are placed.

A pool is one Managed Instances capacity provider with its own ECS service (its capacity option
type cannot change after creation), all pools reading the one queue. The stack config's
`gpu.pools` (tts_fleet/config) resolves to an ordered tuple of `PoolSpec`; the deployed
controller reads it from its environment (tts_fleet/controller/settings.py), the simulator and
the local fleet from the stack file. Pure: stdlib only.

The policy decides a total as it always has (tts_fleet/scaling/controller.py); `place` splits it
across the pools:

- **Order.** Reserved pools first (a reservation bills whether used or not, so it is the floor),
  then the others from the cheapest (`usd_per_hour`) up, the stack's order breaking ties.
- **Sticky.** A pool keeps the workers it has; growth goes to the first available pool in that
  order with room (up to its `max_workers`); shrinking takes launches not yet serving first,
  then running workers from the dearest pool. A fleet in a dearer pool (after a fallback)
  moves back one worker at a time, make before break (`_consolidate`): each move pays one
  cold start in the cheaper pool.
- **Availability.** ECS never falls back from Spot to On-Demand by itself
  (aws/containers-roadmap#773): tasks wait in PROVISIONING. So a pool whose oldest task has been
  PROVISIONING longer than `provisioning_timeout_s`, or whose service reported a placement
  failure, or whose Spot interruptions in the last hour pass a rate, is unavailable for
  `cooldown_s` (Karpenter's insufficient-capacity cache, 3 min there): its desired count is cut
  to its running tasks (provisioning ones that start later would overshoot the plan) and the
  demand moves to the next pool. After the cooldown the pool takes new demand again.

The pools' availability lives in the controller's state (`PoolState`, checked field by field by
`pool_states_from_json` like the rest of `ControllerState`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

CapacityType = Literal["spot", "on-demand", "reserved"]
CAPACITY_TYPES: tuple[CapacityType, ...] = ("spot", "on-demand", "reserved")

# Why a pool is unavailable (a PoolState's `cause`, a PoolEvent's `cause`).
PROVISIONING_TIMEOUT = "provisioning-timeout"
PLACEMENT_FAILURE = "placement-failure"
INTERRUPTIONS = "interruptions"
CAUSES = (PROVISIONING_TIMEOUT, PLACEMENT_FAILURE, INTERRUPTIONS)

# Service events that say the pool's capacity provider found no capacity (ECS service event
# messages and the SERVICE_TASK_PLACEMENT_FAILURE EventBridge event; the research note on
# capacity, §5.3). The driver that reads them (tts_fleet/controller) matches these words.
PLACEMENT_FAILURE_MARKERS = (
    "SERVICE_TASK_PLACEMENT_FAILURE",
    "UnfulfillableCapacity",
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
)

# Interruptions are counted over the last hour.
INTERRUPTION_WINDOW_S = 3600.0
# Past this many interruptions per worker of the pool in the last hour, the pool is treated as
# unavailable. Spot Advisor's worst band is "> 20 % a month"; an interruption costs a cold start
# (a 2-60 s job finishes inside the 2-minute notice), so a pool losing half its workers within
# an hour is being reclaimed, which is what precedes its requests going unfulfilled. The
# simulated 5 %/hour of issue #22 stays well below it (Spot keeps its price advantage).
MAX_INTERRUPTIONS_PER_WORKER_HOUR = 0.5
# ... and never on fewer than this many: one interruption of a one-worker pool is not a rate.
MIN_INTERRUPTIONS = 3

# What a stored pool state may hold (see ControllerState.from_json): far past anything
# `place` writes, so a legitimate state always passes.
MAX_POOLS = 16
MAX_POOL_NAME_CHARS = 64
MAX_INTERRUPTIONS_KEPT = 100
# The longest cooldown a state may carry (gpu.poolCooldownSeconds' upper bound is far below).
MAX_COOLDOWN_S = 86_400.0


@dataclass(frozen=True)
class PoolSpec:
    """One pool as the scaling core sees it, in the order the stack lists it."""

    name: str
    capacity_type: CapacityType
    # The pool's ECS service name; "" where there is no ECS (the simulator, the local fleet).
    service: str
    min_workers: int
    max_workers: int
    # What one worker of this pool costs an hour (instance + Managed Instances fee), the price
    # the controller orders non-reserved pools by; computed at deploy time from the cost tables.
    usd_per_hour: float


@dataclass(frozen=True)
class PlacementParams:
    """The stack's `gpu.provisioningTimeoutSeconds` and `gpu.poolCooldownSeconds` (their
    defaults live in the config model's Field)."""

    provisioning_timeout_s: float
    cooldown_s: float


@dataclass(frozen=True)
class PoolObservation:
    """One pool's service at one sample, as its driver reads it (DescribeServices, the tasks
    and the service events; the simulator and the local fleet from their own pools)."""

    name: str
    desired: int  # desiredCount
    running: int  # runningCount
    pending: int  # tasks PROVISIONING or PENDING: launches under way
    # How long the oldest task still PROVISIONING has been so (0 when none).
    oldest_provisioning_s: float = 0.0
    # When the newest placement-failure event of the service happened (None: none seen).
    placement_failure_at: float | None = None
    # When the pool's interruptions the driver can see happened (stopped tasks' times); the
    # same interruption may be reported at every sample, `place` counts each time once.
    interruptions: tuple[float, ...] = ()


@dataclass(frozen=True)
class PoolState:
    """What `place` keeps about one pool between calls."""

    name: str
    unavailable_until: float | None = None  # None: available
    cause: str = ""  # why it is unavailable (one of CAUSES), "" when it is not
    last_failure: float | None = None  # the newest placement failure acted on
    counted_since: float | None = None  # interruptions before this no longer count
    interruptions: tuple[float, ...] = ()  # counted interruption times within the window
    # A launch in this pool that replaces a worker of a dearer pool (0 or 1), and how many
    # of this pool's workers were running when it was asked for: once more run, the dearer
    # worker is retired.
    swapping: int = 0
    swap_base: int = 0
    # A worker of this pool retired by a swap and still running (busy: protected) (0 or 1).
    retiring: int = 0

    def available(self, now: float) -> bool:
        return self.unavailable_until is None or now >= self.unavailable_until

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unavailable_until": self.unavailable_until,
            "cause": self.cause,
            "last_failure": self.last_failure,
            "counted_since": self.counted_since,
            "interruptions": list(self.interruptions),
            "swapping": self.swapping,
            "swap_base": self.swap_base,
            "retiring": self.retiring,
        }


@dataclass(frozen=True)
class PoolTarget:
    """One pool's share of a decision."""

    name: str
    desired: int
    available: bool
    cause: str = ""  # why it is unavailable, "" when it is available


@dataclass(frozen=True)
class PoolEvent:
    """A change of a pool's availability: `unavailable` (its demand moves on: a fallback) or
    `available` (its cooldown is over)."""

    pool: str
    kind: Literal["unavailable", "available"]
    cause: str = ""


@dataclass(frozen=True)
class Placement:
    targets: tuple[PoolTarget, ...]
    states: tuple[PoolState, ...]
    events: tuple[PoolEvent, ...] = field(default=())

    def by_pool(self) -> dict[str, int]:
        return {target.name: target.desired for target in self.targets}


def fill_order(pools: tuple[PoolSpec, ...]) -> tuple[PoolSpec, ...]:
    """Reserved pools first (in the stack's order), then the others by price (stable)."""
    reserved = tuple(pool for pool in pools if pool.capacity_type == "reserved")
    others = sorted(
        (pool for pool in pools if pool.capacity_type != "reserved"), key=lambda p: p.usd_per_hour
    )
    return (*reserved, *others)


def place(
    pools: tuple[PoolSpec, ...],
    params: PlacementParams,
    states: tuple[PoolState, ...],
    observations: Mapping[str, PoolObservation],
    total: int,
    now: float,
    *,
    ceiling: int | None = None,
) -> Placement:
    """Each pool's desired count for `total` workers at `now`, with the pools' new states
    and the availability changes. A pool missing from `observations` counts as empty.
    `ceiling` (scaling.maxWorkers) bounds the one extra launch a swap to a cheaper pool
    asks for (`_consolidate`)."""
    known = {state.name: state for state in states}
    new_states: list[PoolState] = []
    events: list[PoolEvent] = []
    for pool in pools:
        seen = observations.get(pool.name, PoolObservation(pool.name, 0, 0, 0))
        state, event = _update(pool, params, known.get(pool.name, PoolState(pool.name)), seen, now)
        new_states.append(state)
        if event is not None:
            events.append(event)
    by_name = {state.name: state for state in new_states}
    order = fill_order(pools)
    pools_seen = {p.name: observations.get(p.name, PoolObservation(p.name, 0, 0, 0)) for p in order}
    finished = _settle_swaps(order, by_name, pools_seen, now)
    counts = _split(pools, by_name, observations, total, now)
    _consolidate(order, by_name, pools_seen, counts, finished, now, ceiling)
    new_states = [by_name[state.name] for state in new_states]
    targets = tuple(
        PoolTarget(
            pool.name,
            counts[pool.name],
            by_name[pool.name].available(now),
            "" if by_name[pool.name].available(now) else by_name[pool.name].cause,
        )
        for pool in pools
    )
    return Placement(targets, tuple(new_states), tuple(events))


def _update(
    pool: PoolSpec, params: PlacementParams, state: PoolState, seen: PoolObservation, now: float
) -> tuple[PoolState, PoolEvent | None]:
    """The pool's state after this sample, and the change of availability it made."""
    expired = state.unavailable_until is not None and now >= state.unavailable_until
    if expired:
        state = replace(state, unavailable_until=None, cause="")
    since = state.counted_since
    window_start = now - INTERRUPTION_WINDOW_S
    counted = {
        t
        for t in (*state.interruptions, *seen.interruptions)
        if window_start < t <= now and (since is None or t > since)
    }
    state = replace(state, interruptions=tuple(sorted(counted))[-MAX_INTERRUPTIONS_KEPT:])
    cause, until = _failing(params, state, seen, now)
    if cause == PLACEMENT_FAILURE:
        state = replace(state, last_failure=seen.placement_failure_at)
    elif cause == INTERRUPTIONS:
        # Counted once: after the cooldown the pool starts a new count.
        state = replace(state, counted_since=now, interruptions=())
    if cause and state.unavailable_until is None:
        state = replace(state, unavailable_until=until, cause=cause)
        return state, PoolEvent(pool.name, "unavailable", cause)
    if cause and state.unavailable_until is not None:
        # Still failing while unavailable: the cooldown runs from the latest failure.
        state = replace(state, unavailable_until=max(state.unavailable_until, until))
    if expired and state.unavailable_until is None:
        return state, PoolEvent(pool.name, "available")
    return state, None


def _failing(
    params: PlacementParams, state: PoolState, seen: PoolObservation, now: float
) -> tuple[str, float]:
    """Why this sample makes the pool unavailable ("" when it does not), and until when."""
    failure = seen.placement_failure_at
    if (
        failure is not None
        and failure <= now < failure + params.cooldown_s
        and (state.last_failure is None or failure > state.last_failure)
    ):
        return PLACEMENT_FAILURE, failure + params.cooldown_s
    until = now + params.cooldown_s
    if seen.pending > 0 and seen.oldest_provisioning_s > params.provisioning_timeout_s:
        return PROVISIONING_TIMEOUT, until
    if len(state.interruptions) >= _interruption_limit(seen):
        return INTERRUPTIONS, until
    return "", until


def _interruption_limit(seen: PoolObservation) -> int:
    workers = seen.running + seen.pending
    return max(MIN_INTERRUPTIONS, math.ceil(MAX_INTERRUPTIONS_PER_WORKER_HOUR * workers))


def _split(
    pools: tuple[PoolSpec, ...],
    states: Mapping[str, PoolState],
    observations: Mapping[str, PoolObservation],
    total: int,
    now: float,
) -> dict[str, int]:
    """Sticky placement: each pool starts from its current desired count (an unavailable one
    cut to its running tasks), growth goes to the first available pools in fill order, and
    shrinking comes off launches not yet serving, then off running workers, the last pools
    in fill order first; pools' own minWorkers are kept where available. A fleet that fell
    back stays where it is until the policy shrinks it: moving a running worker to a
    cheaper pool would cost a cold start."""
    order = fill_order(pools)
    seen = {p.name: observations.get(p.name, PoolObservation(p.name, 0, 0, 0)) for p in order}
    available = {p.name: states[p.name].available(now) for p in order}
    caps = {
        p.name: p.max_workers if available[p.name] else min(p.max_workers, seen[p.name].running)
        for p in order
    }
    counts = {p.name: min(caps[p.name], max(0, seen[p.name].desired)) for p in order}
    growable = [p for p in order if available[p.name]]
    if not growable:
        # No pool is available: the demand waits on the pools in order (ECS keeps retrying
        # them) rather than nowhere; the first one whose cooldown ends takes it as usual.
        growable = list(order)
        caps = {p.name: p.max_workers for p in order}
    # A swap's launch comes on top of the total (`_consolidate`): make before break.
    swaps = sum(states[p.name].swapping for p in order if available[p.name])
    missing = total + swaps - sum(counts.values())
    for pool in growable:
        added = max(0, min(missing, caps[pool.name] - counts[pool.name]))
        counts[pool.name] += added
        missing -= added
    if missing < 0:
        _shrink(order, counts, seen, states, available, -missing)
    for pool in order:
        if available[pool.name]:
            counts[pool.name] = max(counts[pool.name], min(pool.min_workers, pool.max_workers))
    return counts


def _shrink(
    order: tuple[PoolSpec, ...],
    counts: dict[str, int],
    seen: Mapping[str, PoolObservation],
    states: Mapping[str, PoolState],
    available: Mapping[str, bool],
    surplus: int,
) -> None:
    """Takes `surplus` off `counts`: launches not yet serving first (ECS stops pending tasks
    first in one service; a swap's launch is kept), then running workers, each from the
    dearest pool up."""
    for started in (False, True):
        for pool in reversed(order):
            floor = pool.min_workers if available[pool.name] else 0
            if not started:
                floor = max(floor, seen[pool.name].running + states[pool.name].swapping)
            taken = max(0, min(surplus, counts[pool.name] - floor))
            counts[pool.name] -= taken
            surplus -= taken


def _settle_swaps(
    order: tuple[PoolSpec, ...],
    states: dict[str, PoolState],
    seen: Mapping[str, PoolObservation],
    now: float,
) -> list[PoolSpec]:
    """Ends the swaps whose launch now serves (returned: a dearer worker is to be retired)
    and those cut or stopped (nothing to retire)."""
    finished = []
    for pool in order:
        state = states[pool.name]
        if not state.swapping:
            continue
        done = seen[pool.name].running >= state.swap_base + state.swapping
        held = state.available(now) and seen[pool.name].desired >= state.swap_base + 1
        if done or not held:
            states[pool.name] = replace(state, swapping=0, swap_base=0)
        if done:
            finished.append(pool)
    return finished


def _consolidate(
    order: tuple[PoolSpec, ...],
    states: dict[str, PoolState],
    seen: Mapping[str, PoolObservation],
    counts: dict[str, int],
    finished: list[PoolSpec],
    now: float,
    ceiling: int | None,
) -> None:
    """Moves a fleet that fell back (or grew into a dearer pool) to the cheapest pools, one
    worker at a time, make before break: with nothing launching or retiring anywhere, one
    extra launch in the first cheaper pool with room (on top of the policy's total, which
    does not count it: `unseen`); once it serves (`finished`), the total without it has
    made `_split` shrink the dearest pool by one running worker, marked retiring (an idle
    one stops; a busy one when its job is done). What a swap costs,
    one cold start in the cheaper pool, the price gap of a Spot pool wins back within the
    hour (tts_fleet/cost)."""
    for pool in finished:  # the total left its launch out: `_split` shrank a dearer pool
        dear = next(
            (
                d
                for d in reversed(order)
                if _dearer(d, pool) and counts[d.name] < seen[d.name].running
            ),
            None,
        )
        if dear is not None:
            states[dear.name] = replace(states[dear.name], retiring=1)
    for pool in order:
        state = states[pool.name]
        if state.swapping:  # its launch is kept, whatever the total
            counts[pool.name] = max(counts[pool.name], state.swap_base + state.swapping)
        if state.retiring and seen[pool.name].running <= counts[pool.name]:
            states[pool.name] = replace(state, retiring=0)  # the retired worker has stopped
    busy = any(o.pending for o in seen.values()) or any(
        s.swapping or s.retiring for s in states.values()
    )
    room = ceiling is None or sum(counts.values()) < ceiling
    if busy or not room or sum(counts.values()) != sum(o.running for o in seen.values()):
        return
    for index, cheap in enumerate(order):
        if not states[cheap.name].available(now) or counts[cheap.name] >= cheap.max_workers:
            continue
        if any(_dearer(dear, cheap) and seen[dear.name].running for dear in order[index + 1 :]):
            counts[cheap.name] += 1
            base = seen[cheap.name].running
            states[cheap.name] = replace(states[cheap.name], swapping=1, swap_base=base)
            return


def _dearer(dear: PoolSpec, cheap: PoolSpec) -> bool:
    if cheap.capacity_type == "reserved":
        return dear.capacity_type != "reserved"
    return dear.usd_per_hour > cheap.usd_per_hour


def unseen(
    states: tuple[PoolState, ...], observations: Mapping[str, PoolObservation]
) -> tuple[int, int]:
    """(running, pending) the policy's total should not count: a swap's launch, booting or
    just serving (it comes on top of the total, so the placement then shrinks the dearer
    pool by one), and a retired worker finishing its job (it is going). Counted, they
    would make the policy keep them as workers the work needs and grow the fleet by one at
    each swap."""
    running = pending = 0
    for state in states:
        seen = observations.get(state.name)
        if seen is None:
            continue
        if state.swapping and seen.running >= state.swap_base + state.swapping:
            running += state.swapping
        else:
            pending += min(state.swapping, seen.pending)
        running += min(state.retiring, max(0, seen.running - seen.desired))
    return running, pending


def launches_after(
    placement: Placement,
    observations: Mapping[str, PoolObservation],
    launches: tuple[float, ...],
    now: float,
) -> tuple[float, ...]:
    """When the launches still under way after `placement` were asked for, oldest first:
    `launches` are the pools' pending tasks' times (ControllerState.launches, oldest first);
    pending tasks a cut pool stops are dropped (the oldest: a pool is cut for tasks that
    waited too long), and each new task is asked for `now`. Without this the controller
    would count a stuck launch's wait as progress of the replacement in the next pool."""
    pending = sum(observations[t.name].pending for t in placement.targets if t.name in observations)
    stopped = new = 0
    for target in placement.targets:
        seen = observations.get(target.name, PoolObservation(target.name, 0, 0, 0))
        have = seen.running + seen.pending
        new += max(0, target.desired - have)
        stopped += min(seen.pending, max(0, have - target.desired))
    kept = launches[: min(len(launches), pending)]
    kept = kept[min(len(kept), stopped) :]
    return (*kept, *([now] * new))


class InvalidPoolState(ValueError):
    """A stored pool state `place` could not have written; the message says what is wrong."""


def pool_states_from_json(data: object, *, latest: float, horizon: float) -> tuple[PoolState, ...]:
    """The pool states `PoolState.to_json` wrote, checked: a list of at most MAX_POOLS objects
    with unique short printable names, known causes, finite times no later than `latest` (the
    last sample) except `unavailable_until`, at most MAX_COOLDOWN_S past `horizon` (the
    reader's clock), and at most MAX_INTERRUPTIONS_KEPT interruption times."""
    if not isinstance(data, list):
        raise InvalidPoolState(f"pools: {_shown(data)} is not a list")
    if len(data) > MAX_POOLS:
        raise InvalidPoolState(f"pools: {len(data)} entries, more than {MAX_POOLS}")
    states = tuple(_pool_state(item, f"pools[{i}]", latest, horizon) for i, item in enumerate(data))
    names = [state.name for state in states]
    if len(set(names)) != len(names):
        raise InvalidPoolState(f"pools: names repeat in {_shown(names)}")
    return states


_POOL_FIELDS = frozenset(
    (
        "name",
        "unavailable_until",
        "cause",
        "last_failure",
        "counted_since",
        "interruptions",
        "swapping",
        "swap_base",
        "retiring",
    )
)
# A swap moves one worker at a time; its base is a count of one pool's tasks.
MAX_SWAPPING = 1
MAX_SWAP_BASE = 5_000


def _pool_state(item: object, where: str, latest: float, horizon: float) -> PoolState:
    if not isinstance(item, dict):
        raise InvalidPoolState(f"{where}: {_shown(item)} is not a JSON object")
    unknown = sorted(set(item) - _POOL_FIELDS)
    if unknown:
        raise InvalidPoolState(f"{where}: unknown fields {_shown(unknown)}")
    name = item.get("name")
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= MAX_POOL_NAME_CHARS
        or not name.isprintable()
    ):
        raise InvalidPoolState(f"{where}.name: {_shown(name)} is not a short printable name")
    cause = item.get("cause", "")
    if cause != "" and cause not in CAUSES:
        raise InvalidPoolState(f"{where}.cause: {_shown(cause)} is not one of {CAUSES}")
    until = _optional_time(item, "unavailable_until", where, horizon + MAX_COOLDOWN_S)
    if (until is None) != (cause == ""):
        raise InvalidPoolState(f"{where}: unavailable_until and cause go together")
    interruptions = item.get("interruptions", [])
    if not isinstance(interruptions, list):
        raise InvalidPoolState(f"{where}.interruptions: {_shown(interruptions)} is not a list")
    if len(interruptions) > MAX_INTERRUPTIONS_KEPT:
        raise InvalidPoolState(
            f"{where}.interruptions: {len(interruptions)} entries, "
            f"more than {MAX_INTERRUPTIONS_KEPT}"
        )
    return PoolState(
        name=name,
        unavailable_until=until,
        cause=cause,
        last_failure=_optional_time(item, "last_failure", where, latest),
        counted_since=_optional_time(item, "counted_since", where, latest),
        interruptions=tuple(
            _time(value, f"{where}.interruptions[{i}]", latest)
            for i, value in enumerate(interruptions)
        ),
        swapping=_whole(item.get("swapping", 0), f"{where}.swapping", MAX_SWAPPING),
        swap_base=_whole(item.get("swap_base", 0), f"{where}.swap_base", MAX_SWAP_BASE),
        retiring=_whole(item.get("retiring", 0), f"{where}.retiring", MAX_SWAPPING),
    )


def _whole(value: object, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPoolState(f"{name}: {_shown(value)} is not a number")
    if not (float(value).is_integer() and 0 <= value <= high):
        raise InvalidPoolState(f"{name}: {_shown(value)} is not a whole number in [0, {high}]")
    return int(value)


def _optional_time(item: dict[str, Any], name: str, where: str, latest: float) -> float | None:
    value = item.get(name)
    return None if value is None else _time(value, f"{where}.{name}", latest)


def _time(value: object, name: str, latest: float) -> float:
    # bool is an int in Python but never a time in the state; NaN fails the comparison.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPoolState(f"{name}: {_shown(value)} is not a number")
    stamp = float(value)
    if not (math.isfinite(stamp) and stamp <= latest):
        raise InvalidPoolState(f"{name}: {_shown(value)} is not a time before {latest:g}")
    return stamp


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
