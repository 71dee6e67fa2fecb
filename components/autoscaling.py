"""The worker service's scalable target, and what each scaling mode puts on it (DESIGN §4).

`ScalableTarget`: the service's desired count in Application Auto Scaling, bounded by
[minWorkers, maxWorkers], with the schedules that change those bounds by cron. Both modes.
Platform (components/platform.py) then adds one of:

- `StepScaling` (`scaling.mode: alarms`): one alarm `outstanding >= 1` (1 × 60 s) drives a
  StepScaling/ExactCapacity policy whose steps are `tts_fleet.scaling.bands.bands()`;
  Application Auto Scaling re-applies it every minute while the alarm stays in ALARM, so the
  count follows the backlog up and down. A second alarm `outstanding <= 0` for idleMinutes
  periods drives ExactCapacity minWorkers.
- `SafetyNet` (`scaling.mode: controller`, where components/controller.py owns the count):
  one alarm that starts one worker if work waits with none running or wanted for
  SAFETY_NET_MINUTES.

No target tracking and no CPU/GPU-utilisation policy (DESIGN §4): target tracking cannot leave
zero tasks, because a per-task metric has no datapoint while no task runs, and utilisation
says nothing about how much work is waiting. Scale-in never stops a busy task: workers hold
ECS task scale-in protection while a job is in flight (worker/protection.py; the task role
permission is in components/service.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs, StrInput
from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.alarms import PERIOD_S, POLICY_COOLDOWN_S
from tts_fleet.scaling.bands import (
    IDLE_THRESHOLD,
    OUTSTANDING_EXPRESSION,
    SCALE_OUT_THRESHOLD,
    BandPlan,
    bands,
)
from tts_fleet.scaling.controller import SAFETY_NET_MINUTES

# SQS publishes queue metrics to CloudWatch at 1-minute granularity: the alarms' period.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
METRIC_PERIOD_SECONDS = int(PERIOD_S)
# One evaluation period per policy application; a longer cooldown would hold back the
# re-application that lets capacity follow the backlog down.
POLICY_COOLDOWN_SECONDS = int(POLICY_COOLDOWN_S)
# The type token stack state has held since the target and the policies were one component
# (QueueAutoscaling): kept, so existing stacks' target and schedules keep their URNs.
TARGET_TYPE = "tts-fleet:autoscaling:QueueAutoscaling"

MetricQuery = aws.cloudwatch.MetricAlarmMetricQueryArgsDict
Step = aws.appautoscaling.PolicyStepScalingPolicyConfigurationStepAdjustmentArgsDict
STRANDED = "IF(visible >= 1 AND FILL(running, 0) == 0 AND FILL(desired, 0) == 0, 1, 0)"
# With capacity pools: jobs visible while no pool's service wants a task. Desired alone, one
# metric a pool, so the alarm's metric math stays inside CloudWatch's 10 metrics per alarm
# (tts_fleet/config/models.py MAX_POOLS); a wanted task covers a running one, as the
# controller never sets a pool below its running tasks while work waits.
POOLED_STRANDED = "IF(visible >= 1 AND ({wanted}) == 0, 1, 0)"


class ScalableTargetArgs(ComponentArgs):
    cluster_name: StrInput
    service_name: StrInput
    scaling: ScalingConfig


def outstanding_queries(queue_name: pulumi.Input[str]) -> list[MetricQuery]:
    """Metric math: outstanding = visible + in flight (DESIGN §4). Only the sum returns data.

    Counting in-flight messages keeps the fleet from shrinking under running jobs.
    """

    def metric(query_id: str, metric_name: str) -> MetricQuery:
        return {
            "id": query_id,
            "return_data": False,
            "metric": {
                "namespace": "AWS/SQS",
                "metric_name": metric_name,
                "dimensions": {"QueueName": queue_name},
                "period": METRIC_PERIOD_SECONDS,
                "stat": "Maximum",
            },
        }

    return [
        metric("visible", "ApproximateNumberOfMessagesVisible"),
        metric("notVisible", "ApproximateNumberOfMessagesNotVisible"),
        {
            "id": "outstanding",
            "expression": OUTSTANDING_EXPRESSION,
            "label": "Outstanding jobs",
            "return_data": True,
        },
    ]


def stranded_queries(
    queue_name: pulumi.Input[str],
    cluster_name: pulumi.Input[str],
    service_name: pulumi.Input[str],
) -> list[MetricQuery]:
    """Metric math: 1 while jobs are visible and the service has no task running and none
    wanted, else 0. Container Insights (on for the cluster, components/capacity.py) gives
    the task counts; FILL counts a minute without a task datapoint as zero tasks."""

    def metric(
        query_id: str, namespace: str, metric_name: str, dimensions: dict[str, pulumi.Input[str]]
    ) -> MetricQuery:
        return {
            "id": query_id,
            "return_data": False,
            "metric": {
                "namespace": namespace,
                "metric_name": metric_name,
                "dimensions": dimensions,
                "period": METRIC_PERIOD_SECONDS,
                "stat": "Maximum",
            },
        }

    service = {"ClusterName": cluster_name, "ServiceName": service_name}
    return [
        metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible",
               {"QueueName": queue_name}),
        metric("running", "ECS/ContainerInsights", "RunningTaskCount", service),
        metric("desired", "ECS/ContainerInsights", "DesiredTaskCount", service),
        {
            "id": "stranded",
            "expression": STRANDED,
            "label": "Jobs waiting, no worker running or wanted",
            "return_data": True,
        },
    ]  # fmt: skip


def pooled_stranded_queries(
    queue_name: pulumi.Input[str],
    cluster_name: pulumi.Input[str],
    service_names: Sequence[pulumi.Input[str]],
) -> list[MetricQuery]:
    """Metric math with capacity pools: 1 while jobs are visible and no pool's service wants a
    task, else 0 (a pool the controller moved demand to keeps the net quiet)."""

    def metric(query_id: str, namespace: str, name: str, dims: dict) -> MetricQuery:
        return {
            "id": query_id,
            "return_data": False,
            "metric": {
                "namespace": namespace,
                "metric_name": name,
                "dimensions": dims,
                "period": METRIC_PERIOD_SECONDS,
                "stat": "Maximum",
            },
        }

    wanted = [
        metric(f"desired{i}", "ECS/ContainerInsights", "DesiredTaskCount",
               {"ClusterName": cluster_name, "ServiceName": service})
        for i, service in enumerate(service_names)
    ]  # fmt: skip
    total = " + ".join(f"FILL(desired{i}, 0)" for i in range(len(service_names)))
    return [
        metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible",
               {"QueueName": queue_name}),
        *wanted,
        {
            "id": "stranded",
            "expression": POOLED_STRANDED.format(wanted=total),
            "label": "Jobs waiting, no worker wanted in any pool",
            "return_data": True,
        },
    ]  # fmt: skip


def step_adjustments(plan: BandPlan) -> list[Step]:
    """`bands()` as StepScaling adjustments; bounds are strings in the provider schema."""
    steps: list[Step] = []
    for band in plan.bands:
        step: Step = {
            "metric_interval_lower_bound": str(band.lower),
            "scaling_adjustment": band.capacity,
        }
        if band.upper is not None:  # the top band is open-ended
            step["metric_interval_upper_bound"] = str(band.upper)
        steps.append(step)
    return steps


class ScalableTarget(pulumi.ComponentResource):
    """The service's desired count as a scalable target, with its schedules."""

    target: aws.appautoscaling.Target
    resource_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: ScalableTargetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TARGET_TYPE, name, None, opts)
        cfg = args.scaling
        self.target = aws.appautoscaling.Target(
            f"{name}-target",
            service_namespace="ecs",
            scalable_dimension="ecs:service:DesiredCount",
            resource_id=pulumi.Output.concat("service/", args.cluster_name, "/", args.service_name),
            min_capacity=cfg.min_workers,
            max_capacity=cfg.max_workers,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._schedules(name, cfg)
        self.resource_id = self.target.resource_id
        self.register_outputs({"resource_id": self.resource_id})

    def _schedules(self, name: str, cfg: ScalingConfig) -> None:
        # Chained, like the two policies: parallel writes to one scalable target can fail
        # with ConcurrentUpdateException.
        target = self.target
        previous: list[pulumi.Resource] = [target]
        for index, entry in enumerate(cfg.schedules):
            action = aws.appautoscaling.ScheduledAction(
                f"{name}-schedule-{index}",
                service_namespace=target.service_namespace,
                scalable_dimension=target.scalable_dimension,
                resource_id=target.resource_id,
                schedule=entry.expression,
                scalable_target_action={
                    "min_capacity": entry.min_workers,
                    "max_capacity": entry.max_workers,
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous),
            )
            previous = [action]


class ModeArgs(ComponentArgs):
    """What a mode's policies need: the target they act on and the metrics they watch."""

    target: ScalableTarget
    queue_name: StrInput
    cluster_name: StrInput
    service_name: StrInput
    scaling: ScalingConfig
    # Every pool's service (gpu.pools), in order, the first being `service_name`'s: the safety
    # net watches them all. Empty without gpu.pools.
    pool_service_names: list[StrInput] = Field(default_factory=list)


def _on_target(
    owner: pulumi.Resource, args: ModeArgs, after: list[pulumi.Resource]
) -> pulumi.ResourceOptions:
    """A mode's resource: a child of its component, after the target (and `after`). These
    were the target component's own children, so each is aliased to its URN there."""
    return pulumi.ResourceOptions(
        parent=owner,
        depends_on=[args.target.target, *after],
        aliases=[pulumi.Alias(parent=args.target)],
    )


def _step_policy(
    owner: pulumi.Resource,
    name: str,
    args: ModeArgs,
    steps: list[Step],
    after: list[pulumi.Resource],
) -> aws.appautoscaling.Policy:
    target = args.target.target
    return aws.appautoscaling.Policy(
        name,
        policy_type="StepScaling",
        service_namespace=target.service_namespace,
        scalable_dimension=target.scalable_dimension,
        resource_id=target.resource_id,
        step_scaling_policy_configuration={
            "adjustment_type": "ExactCapacity",
            "cooldown": POLICY_COOLDOWN_SECONDS,
            "metric_aggregation_type": "Maximum",
            "step_adjustments": steps,
        },
        opts=_on_target(owner, args, after),
    )


class StepScaling(pulumi.ComponentResource):
    """`scaling.mode: alarms`: the backlog bands and the idle rule, as above."""

    scale_out_policy_arn: pulumi.Output[str]
    idle_policy_arn: pulumi.Output[str]
    scale_out_alarm_name: pulumi.Output[str]
    idle_alarm_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ModeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:autoscaling:StepScaling", name, None, opts)
        cfg = args.scaling
        scale_out = _step_policy(self, f"{name}-scale-out", args, step_adjustments(bands(cfg)), [])
        # metric - threshold = outstanding <= 0: one step up to 0 (inclusive below the
        # threshold); a step cannot leave both bounds open.
        idle_steps: list[Step] = [
            {"metric_interval_upper_bound": "0", "scaling_adjustment": cfg.min_workers}
        ]
        idle = _step_policy(self, f"{name}-idle", args, idle_steps, [scale_out])
        queries = outstanding_queries(args.queue_name)
        scale_out_alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-scale-out",
            alarm_description="Jobs outstanding: set the worker count from the backlog bands",
            comparison_operator="GreaterThanOrEqualToThreshold",
            threshold=SCALE_OUT_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            metric_queries=queries,
            # No data is no backlog; the idle alarm treats the same gap as idle.
            treat_missing_data="notBreaching",
            alarm_actions=[scale_out.arn],
            opts=_on_target(self, args, []),
        )
        idle_alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-idle",
            alarm_description=f"Queue empty for {cfg.idle_minutes} min: back to minWorkers",
            comparison_operator="LessThanOrEqualToThreshold",
            threshold=IDLE_THRESHOLD,
            evaluation_periods=cfg.idle_minutes,
            datapoints_to_alarm=cfg.idle_minutes,
            metric_queries=queries,
            # An idle queue can stop publishing metrics; a gap must not keep GPUs running.
            treat_missing_data="breaching",
            alarm_actions=[idle.arn],
            opts=_on_target(self, args, []),
        )
        self.scale_out_policy_arn, self.idle_policy_arn = scale_out.arn, idle.arn
        self.scale_out_alarm_name, self.idle_alarm_name = scale_out_alarm.name, idle_alarm.name
        self.register_outputs(
            {
                "scale_out_policy_arn": self.scale_out_policy_arn,
                "idle_policy_arn": self.idle_policy_arn,
                "scale_out_alarm_name": self.scale_out_alarm_name,
                "idle_alarm_name": self.idle_alarm_name,
            }
        )


class SafetyNet(pulumi.ComponentResource):
    """`scaling.mode: controller`: the controller owns the count; this alarm starts one
    worker if it does not (the function failing, throttled or gone): work visible while no
    task runs and none is wanted, for SAFETY_NET_MINUTES. Desired 0 is part of the
    condition, so ExactCapacity can only raise the count, never cancel a launch under way (a
    cold start keeps running at 0 for ten minutes)."""

    policy_arn: pulumi.Output[str]
    alarm_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ModeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:autoscaling:SafetyNet", name, None, opts)
        floor = max(1, args.scaling.min_workers)
        steps: list[Step] = [{"metric_interval_lower_bound": "0", "scaling_adjustment": floor}]
        policy = _step_policy(self, f"{name}-safety-net", args, steps, [])
        alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-safety-net",
            alarm_description=(
                f"Jobs waiting with no worker running or wanted for {SAFETY_NET_MINUTES} min: "
                "the scaling controller is not acting; start one worker"
            ),
            comparison_operator="GreaterThanOrEqualToThreshold",
            threshold=1,
            evaluation_periods=SAFETY_NET_MINUTES,
            datapoints_to_alarm=SAFETY_NET_MINUTES,
            metric_queries=(
                pooled_stranded_queries(args.queue_name, args.cluster_name, args.pool_service_names)
                if args.pool_service_names
                else stranded_queries(args.queue_name, args.cluster_name, args.service_name)
            ),
            # No queue data is no waiting work.
            treat_missing_data="notBreaching",
            alarm_actions=[policy.arn],
            opts=_on_target(self, args, []),
        )
        self.policy_arn, self.alarm_name = policy.arn, alarm.name
        self.register_outputs({"policy_arn": self.policy_arn, "alarm_name": self.alarm_name})
