"""The controller function: every minute (and on `tts-fleet submit`), sample, decide, act.

One invocation loads the policy state (an S3 object in the stack's outputs bucket), reads the
scalable target's current min/max once (scheduled actions move them), then every 10 s reads
the queue (`GetQueueAttributes`) and the service (`DescribeServices`), gives them to the
controller mode's `Policy` (`tts_fleet.scaling.policy.ControllerPolicy`, the one the simulator
and the local fleet drive), sets the service's desired count if it differs, and
logs the decision as an EMF line. It returns early once nothing is outstanding, running,
starting or wanted, and stops sampling after SAMPLING_BUDGET_S, in time for the next minute.

The desired count is set with `UpdateService desiredCount`, not through the scalable target:
registering min = max = desired would overwrite the schedules' min/max and clamp the
safety-net policy to the controller's own (possibly stuck) value. Application Auto Scaling
leaves a desired count inside [min, max] alone, so the decision is clamped to the target's
current bounds, and the service ignores desiredCount on `pulumi up`
(components/service.py), so a deploy does not reset it. Reserved concurrency 1 keeps two
invocations from racing on the state.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import boto3
from botocore.exceptions import ClientError

from tts_fleet.controller.metrics import DESIRED, OUTSTANDING, PENDING, RUNNING, emf_line
from tts_fleet.controller.settings import SAMPLING_BUDGET_S, Settings
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S, ControllerParams, ControllerState
from tts_fleet.scaling.policy import ControllerPolicy, Counts, Decision, Fleet

SCALABLE_DIMENSION = "ecs:service:DesiredCount"
# Time kept back from the function's timeout for the last UpdateService and the state write.
FINISH_MARGIN_S = 5.0
QUEUE_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


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
    state = load_state(clients.s3, settings.bucket, settings.state_key)
    params = bounded(settings.params, target_bounds(clients.autoscaling, settings.resource_id))
    policy = ControllerPolicy(params, state)
    samples = changes = 0
    decision: Decision | None = None
    try:
        while True:
            taken = clock()
            reading = observe(clients, settings, taken)
            policy.observe(reading.now, reading.counts)
            decision = policy.decide(reading.now, reading.fleet)
            samples += 1
            if decision.desired != reading.service_desired:
                set_desired(clients.ecs, settings, decision.desired)
                changes += 1
            emit(decision_line(settings.stack, reading, decision))
            if quiet(reading, decision):
                break
            elapsed = clock() - started
            if elapsed + SAMPLE_INTERVAL_S > budget_s:
                break
            sleep(max(0.0, SAMPLE_INTERVAL_S - (clock() - taken)))
    finally:
        if decision is not None:  # a failed first sample has nothing new to keep
            save_state(clients.s3, settings.bucket, settings.state_key, policy.state)
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
    described = clients.ecs.describe_services(cluster=settings.cluster, services=[settings.service])
    services = described["services"]
    if not services:
        raise LookupError(f"service {settings.service} not found in cluster {settings.cluster}")
    service = services[0]
    counts = Counts(
        visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
        in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
    )
    fleet = Fleet(
        running=int(service.get("runningCount", 0)),
        pending=int(service.get("pendingCount", 0)),
    )
    return Reading(now, counts, fleet, int(service.get("desiredCount", 0)))


def set_desired(ecs: Any, settings: Settings, desired: int) -> None:
    # desiredCount alone starts no new deployment; it is what a scaling policy would set.
    ecs.update_service(cluster=settings.cluster, service=settings.service, desiredCount=desired)


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


def load_state(s3: Any, bucket: str, key: str) -> ControllerState:
    """The last invocation's state; a fresh one when there is none yet (or it expired with
    the bucket's lifecycle rule) or it cannot be read as JSON."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return ControllerState.from_json({})
        raise
    try:
        data = json.loads(body)
    except ValueError:
        return ControllerState.from_json({})
    return ControllerState.from_json(data if isinstance(data, dict) else {})


def save_state(s3: Any, bucket: str, key: str, state: ControllerState) -> None:
    body = json.dumps(state.to_json(), sort_keys=True).encode("utf-8")
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")


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
