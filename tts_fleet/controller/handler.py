"""The controller function: every minute (and on `tts-fleet submit`), sample, decide, act.

One invocation loads the policy state (an S3 object in the stack's outputs bucket), reads the
scalable target's current min/max once (scheduled actions move them), then every 10 s reads
the queue (`GetQueueAttributes`) and the service (`DescribeServices`), gives them to the
controller mode's `Policy` (`tts_fleet.scaling.policy.ControllerPolicy`, the one the simulator
and the local fleet drive), sets the service's desired count if it differs, and
logs the decision as an EMF line. It returns early once nothing is outstanding, running,
starting or wanted, and stops sampling after SAMPLING_BUDGET_S, in time for the next minute.

With capacity pools (TTS_FLEET_POOLS, issue #22) each pool is its own ECS service: every sample
reads them all (tts_fleet/controller/ecs.py: counts, tasks waiting for capacity, placement
failures, Spot interruptions), the policy places its total across them
(tts_fleet/scaling/pools.py) and each service whose count differs is set, with one more EMF
line per pool. Without pools nothing of this runs: one service, as before pools existed.

With deadline batches (issue #23) the open batch records are read once per invocation and
each sample forecasts them, logging a batch at risk as soon as it is known; the forecasts
are kept for `tts-fleet status` and finished batches retired (tts_fleet/controller/batches.py).
Without batch records this costs one ListObjectsV2 an invocation and logs nothing.

The desired count is set with `UpdateService desiredCount`, not through the scalable target:
registering min = max = desired would overwrite the schedules' min/max and clamp the
safety-net policy to the controller's own (possibly stuck) value. Application Auto Scaling
leaves a desired count inside [min, max] alone, so the decision is clamped to the target's
current bounds, and the service ignores desiredCount on `pulumi up`
(components/service.py), so a deploy does not reset it.

The state object is input, not trusted: a missing, unreadable, oversized, non-JSON or
invalid one (`ControllerState.from_json` checks every field) is replaced by a fresh state,
with one log line saying what was wrong, so the decision rests on what the queue and the
service show. Reserved concurrency 1 keeps invocations apart, but not an old and a new
function while a deploy replaces it, or a manual run: so the state is written on the
condition that it is still the one read (If-Match its ETag, If-None-Match * when there was
none). The loser of that race keeps nothing: it logs one line and returns, and the next
invocation starts from the winner's state and the queue as it is then.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.controller import batches
from tts_fleet.controller.ecs import read_pools, set_desired
from tts_fleet.controller.metrics import (
    DESIRED,
    OUTSTANDING,
    PENDING,
    POOL_DESIRED,
    POOL_PENDING,
    POOL_RUNNING,
    POOL_UNAVAILABLE,
    RUNNING,
    STACK_DIMENSION,
    emf_line,
)
from tts_fleet.controller.settings import SAMPLING_BUDGET_S, Settings
from tts_fleet.scaling.controller import (
    SAMPLE_INTERVAL_S,
    ControllerParams,
    ControllerState,
    InvalidState,
)
from tts_fleet.scaling.policy import ControllerPolicy, Counts, Decision, Fleet

SCALABLE_DIMENSION = "ecs:service:DesiredCount"
# Time kept back from the function's timeout for the last UpdateService and the state write.
FINISH_MARGIN_S = 5.0
QUEUE_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
# The largest state object read: the bounds of `ControllerState.from_json` allow about 100 KB
# (5,000 launch times); anything bigger is not a state and is not read into memory.
MAX_STATE_BYTES = 256 * 1024
NOT_FOUND = ("NoSuchKey", "404", "NotFound")
# A conditional PUT whose condition failed (412), or that raced another conditional PUT of
# the same key (409): another invocation wrote the state since this one read it. If-Match on
# an object deleted meanwhile (the lifecycle rule) answers 404.
LOST_WRITE = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", *NOT_FOUND)


@dataclass(frozen=True)
class Clients:
    sqs: Any
    ecs: Any
    autoscaling: Any
    s3: Any

    @classmethod
    def default(cls) -> Clients:
        return cls(
            sqs=boto3.client("sqs"),
            ecs=boto3.client("ecs"),
            autoscaling=boto3.client("application-autoscaling"),
            s3=boto3.client("s3"),
        )


@dataclass(frozen=True)
class Reading:
    """The queue and the service at one instant, and the service's desired count then."""

    now: float
    counts: Counts
    fleet: Fleet
    service_desired: int


@dataclass(frozen=True)
class Outcome:
    """What one invocation did (the handler's return value, for a test or a manual invoke)."""

    samples: int
    desired: int
    reason: str
    changes: int

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__}


@dataclass(frozen=True)
class Loaded:
    """The state an invocation starts from, the ETag of the object it came from (None: no
    object was read) and, when the object could not be used, why."""

    state: ControllerState
    etag: str | None
    problem: str | None = None


def handle(event: Any, context: Any) -> dict[str, Any]:
    """The Lambda entry point (settings.HANDLER). The event is ignored: schedule and submit
    both just say "look now"."""
    del event
    settings = Settings.from_env(os.environ)
    budget = SAMPLING_BUDGET_S
    if context is not None:
        remaining = context.get_remaining_time_in_millis() / 1000.0
        # The last sample starts by the budget's end and needs FINISH_MARGIN_S after it.
        budget = min(budget, remaining - FINISH_MARGIN_S)
    return run(settings, Clients.default(), budget_s=budget).to_json()


def run(
    settings: Settings,
    clients: Clients,
    *,
    budget_s: float = SAMPLING_BUDGET_S,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    emit: Callable[[str], None] = print,
) -> Outcome:
    """Samples every SAMPLE_INTERVAL_S until idle or `budget_s` is spent; saves the state."""
    started = clock()
    loaded = load_state(clients.s3, settings.bucket, settings.state_key, now=started)
    if loaded.problem is not None:
        emit(state_line(settings.stack, "state-reset", loaded.problem))
    params = bounded(settings.params, target_bounds(clients.autoscaling, settings.resource_id))
    book, problems = batches.load(clients.s3, settings.bucket, settings.stack)
    for line in problems:
        emit(line)
    policy = ControllerPolicy(
        params, loaded.state, pools=settings.pools, placement=settings.placement
    )
    samples = changes = 0
    decision: Decision | None = None
    try:
        while True:
            taken = clock()
            reading = observe(clients, settings, taken)
            # The open deadline batches go to the policy's planner with the queue's counts.
            counts = replace(reading.counts, batches=book.open(reading.counts.outstanding))
            policy.observe(reading.now, counts)
            decision = policy.decide(reading.now, reading.fleet)
            samples += 1
            changes += act(clients.ecs, settings, reading, decision)
            emit(decision_line(settings.stack, reading, decision))
            for line in pool_lines(settings, reading, decision):
                emit(line)
            for line in book.sample(
                now=reading.now,
                outstanding=reading.counts.outstanding,
                forecasts=decision.forecasts,
                first=samples == 1,
            ):
                emit(line)
            if quiet(reading, decision):
                break
            elapsed = clock() - started
            if elapsed + SAMPLE_INTERVAL_S > budget_s:
                break
            sleep(max(0.0, SAMPLE_INTERVAL_S - (clock() - taken)))
    finally:
        if decision is not None:  # a failed first sample has nothing new to keep
            lost = save_state(
                clients.s3, settings.bucket, settings.state_key, policy.state, loaded.etag
            )
            if lost is not None:
                emit(state_line(settings.stack, "state-not-saved", lost))
            for line in book.finish(clients.s3, settings.bucket, clock()):
                emit(line)
    assert decision is not None  # the loop ran at least once or raised
    return Outcome(samples, decision.desired, decision.reason, changes)


def quiet(reading: Reading, decision: Decision) -> bool:
    """Nothing outstanding, running, starting or wanted: sampling would only repeat this."""
    fleet = reading.fleet
    idle = reading.counts.outstanding == 0 and fleet.running == 0 and fleet.pending == 0
    return idle and not decision.desired


def observe(clients: Clients, settings: Settings, now: float) -> Reading:
    attributes = clients.sqs.get_queue_attributes(
        QueueUrl=settings.queue_url, AttributeNames=QUEUE_ATTRIBUTES
    )["Attributes"]
    counts = Counts(
        visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
        in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
    )
    if settings.pooled:
        pools = read_pools(clients.ecs, settings.cluster, settings.pools, now)
        return Reading(now, counts, Fleet.of_pools(pools), sum(p.desired for p in pools))
    described = clients.ecs.describe_services(cluster=settings.cluster, services=[settings.service])
    services = described["services"]
    if not services:
        raise LookupError(f"service {settings.service} not found in cluster {settings.cluster}")
    service = services[0]
    fleet = Fleet(
        running=int(service.get("runningCount", 0)),
        pending=int(service.get("pendingCount", 0)),
    )
    return Reading(now, counts, fleet, int(service.get("desiredCount", 0)))


def act(ecs: Any, settings: Settings, reading: Reading, decision: Decision) -> int:
    """Sets each service whose desired count differs from the decision; how many were set."""
    if not settings.pooled:
        if decision.desired == reading.service_desired:
            return 0
        set_desired(ecs, settings.cluster, settings.service, decision.desired)
        return 1
    before = {pool.name: pool.desired for pool in reading.fleet.pools}
    services = {pool.name: pool.service for pool in settings.pools}
    changed = 0
    for target in decision.pools:
        if target.desired != before.get(target.name):
            set_desired(ecs, settings.cluster, services[target.name], target.desired)
            changed += 1
    return changed


def target_bounds(autoscaling: Any, resource_id: str) -> tuple[int, int] | None:
    """The scalable target's current (min, max): what the schedules set for now."""
    targets = autoscaling.describe_scalable_targets(
        ServiceNamespace="ecs", ResourceIds=[resource_id], ScalableDimension=SCALABLE_DIMENSION
    )["ScalableTargets"]
    if not targets:
        return None
    return int(targets[0]["MinCapacity"]), int(targets[0]["MaxCapacity"])


def bounded(params: ControllerParams, bounds: tuple[int, int] | None) -> ControllerParams:
    """The stack's parameters with the target's current min/max (a schedule's, when one
    fired); the config's when no target is registered."""
    if bounds is None:
        return params
    low, high = bounds
    return replace(params, min_workers=low, max_workers=max(low, high))


def load_state(s3: Any, bucket: str, key: str, *, now: float) -> Loaded:
    """The last invocation's state, checked; a fresh one when there is none yet (or it
    expired with the bucket's lifecycle rule), and a fresh one with the reason when it
    cannot be read or used. Never raises: a bad state must not stop the controller."""
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
        etag = str(answer["ETag"])
        with closing(answer["Body"]) as stream:  # an oversized rest is left unread
            body = stream.read(MAX_STATE_BYTES + 1)
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code"))
        if code in NOT_FOUND:
            return Loaded(ControllerState(), None)
        # Without an ETag the write is If-None-Match *: it cannot replace what is there.
        return Loaded(ControllerState(), None, f"GetObject {key} failed: {code}")
    except BotoCoreError as error:
        return Loaded(ControllerState(), None, f"GetObject {key} failed: {error}")
    if len(body) > MAX_STATE_BYTES:
        return Loaded(ControllerState(), etag, f"{key} is over {MAX_STATE_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
        return Loaded(ControllerState.from_json(data, now=now), etag)
    except UnicodeDecodeError:
        return Loaded(ControllerState(), etag, f"{key} is not UTF-8")
    except RecursionError:
        return Loaded(ControllerState(), etag, f"{key} is nested too deeply")
    except InvalidState as error:
        return Loaded(ControllerState(), etag, f"{key} is not a controller state: {error}")
    except ValueError as error:
        return Loaded(ControllerState(), etag, f"{key} is not JSON: {error}")


def _no_constant(name: str) -> float:
    """json.loads reads NaN and Infinity, which JSON does not have: refuse them."""
    raise ValueError(f"{name} is not a JSON number")


def save_state(
    s3: Any, bucket: str, key: str, state: ControllerState, etag: str | None
) -> str | None:
    """Writes the state if the object is still the one read (`etag`; None: none was read, so
    none may be there). None when written; otherwise why not: another writer's object stays,
    and the next invocation reads it."""
    body = json.dumps(state.to_json(), sort_keys=True).encode("utf-8")
    condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
    try:
        s3.put_object(
            Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition
        )
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code"))
        if code not in LOST_WRITE:
            raise
        return f"{key} not written ({code}): another writer's stands; the next invocation reads it"
    return None


def state_line(stack: str, event: str, problem: str) -> str:
    """One log line about the state object, beside the decisions' EMF lines (Logs Insights:
    `filter event like /state/`)."""
    return json.dumps({"event": event, STACK_DIMENSION: stack, "problem": problem})


def decision_line(stack: str, reading: Reading, decision: Decision) -> str:
    counts, fleet = reading.counts, reading.fleet
    values = {
        DESIRED: decision.desired,
        OUTSTANDING: counts.outstanding,
        RUNNING: fleet.running,
        PENDING: fleet.pending,
    }
    properties = {
        "event": "decision",
        "reason": decision.reason,
        "visible": counts.visible,
        "in_flight": counts.in_flight,
        "previous_desired": reading.service_desired,
    }
    return emf_line(stack, int(reading.now * 1000), values, properties)


def pool_lines(settings: Settings, reading: Reading, decision: Decision) -> list[str]:
    """One EMF line per pool at each decision (dimensions Stack and Pool), with the change of
    its availability when there was one (Logs Insights: `filter change = "unavailable"`)."""
    seen = {pool.name: pool for pool in reading.fleet.pools}
    kinds = {pool.name: pool.capacity_type for pool in settings.pools}
    changes = {event.pool: event for event in decision.events}
    lines = []
    for target in decision.pools:
        pool = seen[target.name]
        values = {
            POOL_DESIRED: target.desired,
            POOL_RUNNING: pool.running,
            POOL_PENDING: pool.pending,
            POOL_UNAVAILABLE: 0 if target.available else 1,
        }
        properties: dict[str, Any] = {
            "event": "decision",
            "capacity_type": kinds[target.name],
            "reason": decision.reason,
            "previous_desired": pool.desired,
            "oldest_provisioning_s": round(pool.oldest_provisioning_s, 1),
        }
        if target.cause:
            properties["cause"] = target.cause
        change = changes.get(target.name)
        if change is not None:
            properties["change"] = change.kind
            if change.cause:
                properties["cause"] = change.cause
        lines.append(
            emf_line(settings.stack, int(reading.now * 1000), values, properties, target.name)
        )
    return lines
