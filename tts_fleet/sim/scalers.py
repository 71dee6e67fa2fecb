"""What sets the ECS service's desired count in a simulation: one scaler per `--policy`.

The engine (tts_fleet/sim/engine.py) owns the queue, the tasks and the hosts; a scaler sees
what its real counterpart sees (queue attributes or CloudWatch datapoints, the service's
counts), every `period_s`, and returns a desired count. `protects_busy` says whether a busy
worker survives scale-in (ECS task scale-in protection, SageMaker's draining) or is stopped
with its jobs, which go back to the queue after the visibility timeout (counted as killed).

- `alarms`, `seed`, `controller`: this project's two modes, each the one `Policy` of
  tts_fleet/scaling/policy.py on the simulator's clock (`PolicyScaler`); the seed is the
  alarms mode configured as the AWS sample (its alarms count visible messages only).
- `keda`, `sagemaker`, `aws-sample`: the peers, each modelled from its public docs or code
  (cited at each class), on the same physics.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from tts_fleet.scaling.alarms import PERIOD_S, POLICY_COOLDOWN_S
from tts_fleet.scaling.bands import outstanding
from tts_fleet.scaling.batches import OpenBatch
from tts_fleet.scaling.controller import ControllerParams
from tts_fleet.scaling.physics import Profile
from tts_fleet.scaling.policy import AlarmsPolicy, ControllerPolicy, Counts, Fleet, Policy
from tts_fleet.scaling.pools import PoolEvent, PoolObservation, PoolTarget
from tts_fleet.sim.model import PolicySetup

# An asynchronous Lambda invocation from `tts-fleet submit` starts within about a second.
INVOKE_LATENCY_S = 1.0
# SQS's default visibility timeout: a killed job of a peer reappears after it.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html
PEER_VISIBILITY_S = 30.0


@dataclass(frozen=True)
class View:
    """The queue and the service at one instant, as the APIs report them."""

    now: float
    visible: int  # ApproximateNumberOfMessages
    in_flight: int  # ApproximateNumberOfMessagesNotVisible
    running: int  # ECS runningCount
    pending: int  # ECS pendingCount
    desired: int  # the service's desired count now
    pools: tuple[PoolObservation, ...] = ()  # with capacity pools: each pool's service
    # `simulate --deadline`: the open deadline batches (issue #23); the peers ignore them.
    batches: tuple[OpenBatch, ...] = ()


class Scaler(Protocol):
    period_s: float
    protects_busy: bool
    reason: str  # the last decision's reason (controller mode), else ""

    def observe(self, now: float, visible: int, in_flight: int) -> None:
        """The queue is this from `now` on (CloudWatch-backed scalers aggregate it)."""

    def decide(self, view: View) -> int:
        """One evaluation at `view.now`: the desired count."""

    def quiet(self) -> bool:
        """Nothing in its metric pipeline can still scale out: the engine may skip ahead."""

    def settled(self) -> bool:
        """Back at its floor with nothing outstanding: nothing left to do."""

    def wake(self, arrival: float) -> float:
        """When an idle scaler next evaluates, given the next job's arrival."""


class PolicyScaler:
    """One of this project's modes on the simulator's clock: the same `Policy` the local fleet
    and the deployed controller drive (tts_fleet/scaling/policy.py), told every change of the
    queue and asked every `period_s`. Workers hold task scale-in protection in both modes.

    - alarms (and the seed): evaluated on the minute grid, with the step policy's cooldown:
      after a scaling activity completes, AAS does not scale in again until it has passed (a
      larger scale-out is never held back). The seed's alarms count visible messages only.
      https://docs.aws.amazon.com/autoscaling/application/userguide/step-scaling-policy-overview.html#step-scaling-cooldown
    - controller: GetQueueAttributes is read live (no CloudWatch lag). Idle, it sleeps;
      `tts-fleet submit` invokes it asynchronously, so a job from idle is seen about a second
      after it is sent (the EventBridge schedule is the fallback for other producers).
    """

    protects_busy = True

    def __init__(
        self, policy: Policy, *, visible_only: bool = False, woken_by_submit: bool = False
    ) -> None:
        self.policy = policy
        self.period_s = policy.period_s
        self.visible_only = visible_only
        self.woken_by_submit = woken_by_submit
        self.reason = ""  # the last decision's reason (controller mode)
        # With capacity pools: the last decision's count per pool and availability changes.
        self.targets: tuple[PoolTarget, ...] = ()
        self.pool_events: tuple[PoolEvent, ...] = ()
        self._batches = False  # the last evaluation had deadline batches

    def observe(self, now: float, visible: int, in_flight: int) -> None:
        self.policy.observe(now, Counts(visible, 0 if self.visible_only else in_flight))

    def decide(self, view: View) -> int:
        if view.batches or self._batches:
            # The batches come with the counts, as the deployed controller reads them.
            in_flight = 0 if self.visible_only else view.in_flight
            self.policy.observe(view.now, Counts(view.visible, in_flight, view.batches))
            self._batches = bool(view.batches)
        decision = self.policy.decide(view.now, Fleet(view.running, view.pending, view.pools))
        self.reason = decision.reason
        self.targets, self.pool_events = decision.pools, decision.events
        return decision.desired

    def quiet(self) -> bool:
        return self.policy.quiet()

    def settled(self) -> bool:
        return self.policy.settled()

    def wake(self, arrival: float) -> float:
        if self.woken_by_submit:
            return arrival + INVOKE_LATENCY_S
        return math.floor(arrival / self.period_s) * self.period_s  # the next evaluation


def controller_params(policy: PolicySetup, profile: Profile) -> ControllerParams:
    """What a deployed controller is configured with: the stack's scaling, κ, and the
    profile's expected cold start and warm throughput per worker."""
    c = policy.concurrency
    return ControllerParams.from_config(
        policy.scaling,
        cold_start_s=profile.cold_task_s,
        seconds_per_job=profile.batching.seconds_per_job(c),
        concurrency=c,
        cold_start_work=policy.cold_start_work,
        host_idle_seconds=policy.host_idle_seconds,
    )


class KedaScaler:
    """KEDA's aws-sqs-queue scaler driving a Deployment through the HPA.

    - KEDA checks the trigger every `pollingInterval` (30 s): active scales 0 → 1, and
      `cooldownPeriod` (300 s) after the last active check it scales back to 0.
      https://keda.sh/docs/latest/reference/scaledobject-spec/
    - The HPA (15-s sync) sets ceil(messages / queueLength) with queueLength 5 (the default),
      messages = ApproximateNumberOfMessages + ApproximateNumberOfMessagesNotVisible
      (scaleOnInFlight defaults to true). https://keda.sh/docs/latest/scalers/aws-sqs/
    - HPA defaults: 10 % tolerance; scale-up at most max(100 %, 4 pods) per 15 s; scale-down
      to the highest recommendation of the last 300 s (stabilisation window).
      https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#default-behavior
    - No task protection: a ReplicaSet deletes pending pods first, then the newest ready ones,
      busy or not; the worker is assumed not to drain on SIGTERM (the aws-sample's and most
      SQS workers do not), so their jobs return to the queue after the visibility timeout.
    """

    period_s = 15.0
    protects_busy = False
    reason = ""
    POLL_S = 30.0
    COOLDOWN_S = 300.0
    QUEUE_LENGTH = 5
    STABILISATION_S = 300.0
    TOLERANCE = 0.1

    def __init__(self, policy: PolicySetup) -> None:
        self.max = policy.scaling.max_workers
        self.min = policy.scaling.min_workers
        self.replicas = self.min
        self.last_active = -math.inf
        self.history: deque[tuple[float, int]] = deque()
        self.messages = 0

    def observe(self, now: float, visible: int, in_flight: int) -> None:
        self.messages = outstanding(visible, in_flight)

    def decide(self, view: View) -> int:
        now = view.now
        if _on_grid(now, self.POLL_S):
            self._activation(now)
        if self.replicas >= 1:
            self.replicas = self._hpa(now)
        return self.replicas

    def _activation(self, now: float) -> None:
        if self.messages > 0:  # activationQueueLength 0
            self.last_active = now
            if self.replicas == 0:
                self.replicas = 1
        elif self.replicas > 0 == self.min and now - self.last_active >= self.COOLDOWN_S:
            self.replicas = 0
            self.history.clear()

    def _hpa(self, now: float) -> int:
        current = self.replicas
        ratio = self.messages / (self.QUEUE_LENGTH * current)
        raw = current if abs(ratio - 1) <= self.TOLERANCE else math.ceil(ratio * current)
        raw = max(1, self.min, min(self.max, raw))
        self.history.append((now, raw))
        while self.history and self.history[0][0] <= now - self.STABILISATION_S:
            self.history.popleft()
        if raw < current:
            return min(current, max(r for _, r in self.history))
        return min(raw, max(2 * current, current + 4))

    def quiet(self) -> bool:
        return True

    def settled(self) -> bool:
        return self.messages == 0 and self.replicas == self.min

    def wake(self, arrival: float) -> float:
        return math.ceil(arrival / self.POLL_S) * self.POLL_S


class SageMakerScaler:
    """A SageMaker asynchronous endpoint scaled as its documentation shows.
    https://docs.aws.amazon.com/sagemaker/latest/dg/async-inference-autoscale.html

    - Target tracking on ApproximateBacklogSizePerInstance, TargetValue 5, ScaleOutCooldown
      300 s, ScaleInCooldown 600 s. Target tracking's alarms: above the target for 3 of 3
      minutes scales out, below 90 % of it for 15 of 15 minutes scales in, to
      ceil(capacity × metric / target). https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html
    - A step policy on HasBacklogWithoutCapacity (Average ≥ 1 for 2 of 2 minutes): +1,
      cooldown 300 s, the documented way to start from zero instances.
    - Metrics are 1-minute datapoints published with the profile's lag; the per-instance
      backlog divides by the desired instance count (at least 1). Instances finish their
      requests before they go (SageMaker drains), and the instance goes with them.
    """

    period_s = PERIOD_S
    protects_busy = True
    reason = ""
    TARGET = 5.0
    OUT_COOLDOWN_S = 300.0
    IN_COOLDOWN_S = 600.0
    HIGH_POINTS, LOW_POINTS, STEP_POINTS = 3, 15, 2

    def __init__(self, policy: PolicySetup, profile: Profile) -> None:
        self.min, self.max = policy.scaling.min_workers, policy.scaling.max_workers
        self.lag_points = math.ceil(profile.metric_lag_s / PERIOD_S)
        self.capacity = self.min
        self.backlog = 0
        self.points: deque[tuple[float, int]] = deque(maxlen=64)  # (per-instance, no-capacity)
        self.out_until = self.in_until = self.step_until = -math.inf
        self._area = 0.0  # backlog × seconds since the last datapoint (its Average)
        self._since = self._seen = 0.0

    def observe(self, now: float, visible: int, in_flight: int) -> None:
        self._area += self.backlog * (now - self._seen)
        self._seen = now
        self.backlog = outstanding(visible, in_flight)

    def decide(self, view: View) -> int:
        now = view.now
        self._close(now)
        span = now - self._since
        average = self._area / span if span > 0 else float(self.backlog)
        self._area, self._since = 0.0, now
        per_instance = average / max(1, self.capacity)
        self.points.append((per_instance, int(self.backlog > 0 and view.running == 0)))
        published = list(self.points)[: max(0, len(self.points) - self.lag_points)]
        self._target_tracking(now, published)
        self._step(now, published)
        return self.capacity

    def _close(self, now: float) -> None:
        self._area += self.backlog * (now - self._seen)
        self._seen = now

    def _target_tracking(self, now: float, points: list[tuple[float, int]]) -> None:
        high = _last(points, self.HIGH_POINTS)
        low = _last(points, self.LOW_POINTS)
        if high and all(p > self.TARGET for p, _ in high) and self.capacity > 0:
            want = math.ceil(self.capacity * high[-1][0] / self.TARGET)
            if want > self.capacity and now >= self.out_until:
                self.capacity = min(self.max, want)
                self.out_until = now + self.OUT_COOLDOWN_S
        elif low and all(p < 0.9 * self.TARGET for p, _ in low) and now >= self.in_until:
            want = max(self.min, math.ceil(self.capacity * low[-1][0] / self.TARGET))
            if want < self.capacity:
                self.capacity = want
                self.in_until = now + self.IN_COOLDOWN_S

    def _step(self, now: float, points: list[tuple[float, int]]) -> None:
        window = _last(points, self.STEP_POINTS)
        if window and all(flag for _, flag in window) and now >= self.step_until:
            self.capacity = min(self.max, self.capacity + 1)
            self.step_until = now + self.OUT_COOLDOWN_S

    def quiet(self) -> bool:
        return not any(p or flag for p, flag in list(self.points)[-(self.lag_points + 2) :])

    def settled(self) -> bool:
        return self.backlog == 0 and self.capacity == self.min

    def wake(self, arrival: float) -> float:
        return math.floor(arrival / self.period_s) * self.period_s


class AwsSampleScaler:
    """aws-samples/sample-ecs-inference-pipeline (infrastructure/template.yaml and
    scaling_metric_lambda.py): a Lambda run every minute publishes
    max(ApproximateNumberOfMessages / 5, GPU memory utilisation / 80); a 1-of-1-minute alarm
    above 1.0 adds 1 task (ChangeInCapacity, cooldown 120 s), a 5-of-5-minute alarm below
    0.1 removes 1 (cooldown 300 s). The datapoint the Lambda writes at a minute is evaluated
    when that minute closes.

    GPU memory is taken as 0 %: with vLLM's default preallocation (90 %) the memory term
    alone holds the metric above 1 and the sample would never scale in; with any resident
    model (> 8 %) it would never go below 0.1. The queue term alone is its best case.
    Its worker (container/sqs_worker.py) has no task protection and no SIGTERM handling.
    """

    period_s = PERIOD_S
    protects_busy = False
    reason = ""
    THRESHOLD = 5
    OUT_COOLDOWN_S, IN_COOLDOWN_S = 120.0, 300.0
    IN_POINTS = 5

    def __init__(self, policy: PolicySetup) -> None:
        self.min, self.max = policy.scaling.min_workers, policy.scaling.max_workers
        self.capacity = self.min
        self.visible = 0
        self.points: deque[float] = deque(maxlen=16)
        self.out_until = self.in_until = -math.inf

    def observe(self, now: float, visible: int, in_flight: int) -> None:
        self.visible = visible

    def decide(self, view: View) -> int:
        now = view.now
        published = list(self.points)  # last minute's sample closes now
        self.points.append(self.visible / self.THRESHOLD)
        if published and published[-1] > 1.0 and now >= self.out_until:
            self.capacity = min(self.max, self.capacity + 1)
            self.out_until = now + self.OUT_COOLDOWN_S
        low = _last(published, self.IN_POINTS)
        quiet = low and all(p < 0.1 for p in low)
        if quiet and now >= self.in_until and self.capacity > self.min:
            self.capacity -= 1
            self.in_until = now + self.IN_COOLDOWN_S
        return self.capacity

    def quiet(self) -> bool:
        return not any(self.points)

    def settled(self) -> bool:
        return self.visible == 0 and self.capacity == self.min

    def wake(self, arrival: float) -> float:
        return math.floor(arrival / self.period_s) * self.period_s


def _last(points: list, count: int) -> list:
    return points[-count:] if len(points) >= count else []


def _on_grid(now: float, step: float) -> bool:
    return abs(now / step - round(now / step)) < 1e-9


def make_scaler(policy: PolicySetup, profile: Profile) -> Scaler:
    mode = policy.mode
    if policy.pools and mode != "controller":
        # Only the controller places workers across pools; the alarms set one service.
        raise ValueError(f"capacity pools need the controller mode, not {mode!r}")
    if mode in ("alarms", "seed"):
        alarms = AlarmsPolicy(
            policy.scaling, lag_s=profile.metric_lag_s, cooldown_s=POLICY_COOLDOWN_S
        )
        return PolicyScaler(alarms, visible_only=mode == "seed")
    if mode == "controller":
        controller = ControllerPolicy(
            controller_params(policy, profile), pools=policy.pools, placement=policy.placement
        )
        return PolicyScaler(controller, woken_by_submit=True)
    if mode == "keda":
        return KedaScaler(policy)
    if mode == "sagemaker":
        return SageMakerScaler(policy, profile)
    if mode == "aws-sample":
        return AwsSampleScaler(policy)
    raise ValueError(f"unknown policy mode {mode!r}")
