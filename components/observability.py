"""Observability: alerts topic, DLQ and queue-age alarms, a dashboard, an optional budget, and
in controller mode an alarm when the scaling controller fails.

The topic is encrypted with a customer managed KMS key: CloudWatch alarms and AWS Budgets
cannot publish to a topic under the AWS managed key `alias/aws/sns`, whose key policy cannot
grant them `kms:GenerateDataKey*`. The budget filters on the cost-allocation tag
`tts-fleet:stack=<stack>`, which the provider's default tags put on every resource of the
stack (activate the tag once in the Billing console so Budgets can see it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs, StrInput
from components.controller import pools_with_services
from components.iam import deny_insecure_transport
from tts_fleet.config.models import AlertsConfig
from tts_fleet.scaling.alarms import PERIOD_S
from tts_fleet.scaling.bands import OUTSTANDING_EXPRESSION
from tts_fleet.scaling.pools import PoolSpec
from worker.metrics import (
    AUDIO_SECONDS,
    AUDIO_SECONDS_PER_SECOND,
    COLD_START_DIMENSIONS,
    COLD_START_SECONDS,
    JOBS_COMPLETED,
    JOBS_FAILED,
    JOBS_FAILED_ON_QUALITY,
    PHASE_DIMENSION,
    PIECES_CHECKED,
    PIECES_REJECTED,
    QUEUE_WAIT_SECONDS,
    STACK_DIMENSION,
    SYNTH_SECONDS,
    THROUGHPUT_DIMENSIONS,
    TOTAL,
)
from worker.metrics import NAMESPACE as WORKER_NAMESPACE

COST_TAG_KEY = "tts-fleet:stack"
BUDGET_THRESHOLDS_PERCENT = (80, 100)
PERIOD_SECONDS = int(PERIOD_S)  # the queue's metrics, as the scaling alarms read them
# CloudWatch dashboard names: letters, digits, '-' and '_', at most 255 characters.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutDashboard.html
_DASHBOARD_NAME_INVALID = re.compile(r"[^A-Za-z0-9_-]")
PUBLISHERS = ("cloudwatch.amazonaws.com", "budgets.amazonaws.com")
# The controller alarm: any failed run in a 5-minute window. It runs every minute, so a crash
# loop (e.g. an unreadable state) shows within one window.
CONTROLLER_ALARM_PERIOD_SECONDS = 300
# Lambda's invocation metrics are counts per invocation, read with Sum.
# https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
# Errors always count. Throttles count only in a window with no invocation at all: with
# reserved concurrency 1, a `tts-fleet submit` wake while the function is sampling is throttled
# by design (and dropped after MAX_EVENT_AGE), but a window of throttles and no run means the
# function cannot run (its concurrency taken to 0, or the account's exhausted).
CONTROLLER_FAILURES = "FILL(errors, 0) + IF(FILL(invocations, 0) == 0, FILL(throttles, 0), 0)"


# One dashboard graph: (title, metric lines, statistic).
Widget = tuple[str, list[list[Any]], str]


class ObservabilityArgs(ComponentArgs):
    stack: str
    region: StrInput
    queue_name: StrInput
    dlq_name: StrInput
    cluster_name: StrInput
    service_name: StrInput
    alerts: AlertsConfig
    # What the scaling mode adds to the dashboard (controller mode: its decisions), or None.
    scaling_widget: Widget | None = None
    # Controller mode with gpu.pools: its placement per pool, or None.
    pool_scaling_widget: Widget | None = None
    # The stack's account and partition as Platform looked them up once (else looked up here).
    account_id: StrInput | None = None
    partition: StrInput | None = None
    # The scaling controller's function (scaling.mode: controller), or None.
    controller_function_name: StrInput | None = None
    # Capacity pools (gpu.pools), priced, and each one's service: a workers and a cost graph
    # per pool. Empty without gpu.pools.
    pools: tuple[PoolSpec, ...] = ()
    pool_services: dict[str, StrInput] = Field(default_factory=dict)


def dashboard_name(stack: str, region: str) -> str:
    """Dashboards are global to the account, so the name carries the region as well as the
    stack: `dev` in two regions would otherwise overwrite one dashboard."""
    return _DASHBOARD_NAME_INVALID.sub("-", f"tts-fleet-{stack}-{region}")[:255]


def dashboard_url(region: str, name: str) -> str:
    return (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home"
        f"?region={region}#dashboards:name={name}"
    )


def _widget(index: int, title: str, metrics: list[list[Any]], *, stat: str, region: str) -> dict:
    return {
        "type": "metric",
        "x": 12 * (index % 2),
        "y": 6 * (index // 2),
        "width": 12,
        "height": 6,
        "properties": {
            "title": title,
            "view": "timeSeries",
            "stacked": False,
            "period": PERIOD_SECONDS,
            "metrics": metrics,
            "stat": stat,
            "region": region,
        },
    }


def pool_widgets(cluster: str, pools: Sequence[PoolSpec]) -> list[Widget]:
    """With capacity pools: each pool's running workers (its service's tasks, Container
    Insights), and what they cost an hour at the pool's price (running × usd_per_hour, the
    price the controller orders pools by)."""
    if not pools:
        return []
    ecs = "ECS/ContainerInsights"
    running = [
        [ecs, "RunningTaskCount", "ClusterName", cluster, "ServiceName", pool.service,
         {"label": f"{pool.name} ({pool.capacity_type})", "id": f"w{i}"}]
        for i, pool in enumerate(pools)
    ]  # fmt: skip
    cost: list[list[Any]] = []
    for i, pool in enumerate(pools):
        cost.append(
            [{"expression": f"FILL(r{i}, 0) * {pool.usd_per_hour}",
              "label": f"{pool.name} at ${pool.usd_per_hour:.4f}/h a worker", "id": f"c{i}"}]
        )  # fmt: skip
        cost.append(
            [ecs, "RunningTaskCount", "ClusterName", cluster, "ServiceName", pool.service,
             {"id": f"r{i}", "visible": False}]
        )  # fmt: skip
    return [
        ("Workers per pool (running tasks)", running, "Maximum"),
        ("Cost per pool, USD per hour (running × the pool's price)", cost, "Maximum"),
    ]


def dashboard_body(
    region: str,
    queue: str,
    dlq: str,
    cluster: str,
    service: str,
    stack: str,
    scaling_widget: Widget | None = None,
    pools: Sequence[PoolSpec] = (),
    pool_scaling_widget: Widget | None = None,
) -> str:
    """The dashboard JSON: backlog, fleet size, throughput, latency and failures.

    The worker's own metrics (its EMF lines, DESIGN §5.7) by the names worker/metrics.py
    emits them under, each with this stack's `Stack` dimension: another stack's workers in
    the same account and region write the same names under their own dimension value."""
    sqs, ecs, own = "AWS/SQS", "ECS/ContainerInsights", WORKER_NAMESPACE
    task = ("ClusterName", cluster, "ServiceName", service)
    mine = (STACK_DIMENSION, stack)
    widgets: list[Widget] = [
        ("Outstanding jobs (visible + in flight)", [
            [{"expression": OUTSTANDING_EXPRESSION, "label": "Outstanding", "id": "outstanding"}],
            [sqs, "ApproximateNumberOfMessagesVisible", "QueueName", queue, {"id": "visible"}],
            [sqs, "ApproximateNumberOfMessagesNotVisible", "QueueName", queue,
             {"id": "notVisible"}],
        ], "Maximum"),
        ("Workers: desired vs running tasks", [
            [ecs, "DesiredTaskCount", *task, {"label": "Desired"}],
            [ecs, "RunningTaskCount", *task, {"label": "Running"}],
            [ecs, "PendingTaskCount", *task, {"label": "Pending"}],
        ], "Maximum"),
        ("Jobs completed and failed per minute", [
            [own, JOBS_COMPLETED, *mine, {"label": "Completed"}],
            [own, JOBS_FAILED, *mine, {"label": "Failed"}],
        ], "Sum"),
        ("Synthesis seconds per job; audio seconds produced", [
            [own, SYNTH_SECONDS, *mine, {"stat": "Average", "label": "Synth s (avg)"}],
            [own, SYNTH_SECONDS, *mine, {"stat": "p90", "label": "Synth s (p90)"}],
            [own, AUDIO_SECONDS, *mine, {"stat": "Sum", "label": "Audio s", "yAxis": "right"}],
        ], "Average"),
        ("Queue wait (s): per job and oldest message", [
            [own, QUEUE_WAIT_SECONDS, *mine, {"stat": "Average", "label": "Wait (avg)"}],
            [own, QUEUE_WAIT_SECONDS, *mine, {"stat": "Maximum", "label": "Wait (max)"}],
            [sqs, "ApproximateAgeOfOldestMessage", "QueueName", queue, {"label": "Oldest"}],
        ], "Maximum"),
        ("Dead-letter queue depth", [
            [sqs, "ApproximateNumberOfMessagesVisible", "QueueName", dlq, {"label": "DLQ"}],
        ], "Maximum"),
        ("Output checks: pieces checked and rejected, jobs failed on quality", [
            [own, PIECES_CHECKED, *mine, {"label": "Checked"}],
            [own, PIECES_REJECTED, *mine, {"label": "Rejected (re-rendered)"}],
            [own, JOBS_FAILED_ON_QUALITY, *mine, {"label": "Jobs failed on quality"}],
        ], "Sum"),
        ("Cold start seconds per phase (p50; `tts-fleet coldstart` for p95)", [
            [{"expression": cold_start_search(stack), "label": "", "id": "coldStart"}],
        ], "p50"),
        ("Audio seconds per wall second, per instance type (measured throughput)", [
            [{"expression": throughput_search(stack), "label": "", "id": "throughput"}],
        ], "Average"),
    ]  # fmt: skip
    if scaling_widget is not None:  # e.g. what the controller decided, beside what ECS ran
        widgets.insert(2, scaling_widget)
    extra = [] if pool_scaling_widget is None else [pool_scaling_widget]
    widgets[2:2] = pool_widgets(cluster, pools) + extra
    return json.dumps(
        {
            "widgets": [
                _widget(i, title, metrics, stat=stat, region=region)
                for i, (title, metrics, stat) in enumerate(widgets)
            ]
        }
    )


def cold_start_search(stack: str) -> str:
    """Every phase's `ColdStartSeconds` of this stack, whatever the instance types: the
    dashboard cannot list the types a stack will get, so it searches by dimension names
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/search-expression-syntax.html).
    `total` is left out: it dwarfs the phases it sums."""
    schema = ",".join((WORKER_NAMESPACE, *COLD_START_DIMENSIONS))
    return (
        f'SEARCH(\'{{{schema}}} MetricName="{COLD_START_SECONDS}" {STACK_DIMENSION}='
        f'"{stack}" NOT {PHASE_DIMENSION}="{TOTAL}"\', \'p50\', {PERIOD_SECONDS})'
    )


def throughput_search(stack: str) -> str:
    """The workers' measured `AudioSecondsPerSecond` of this stack, one line per instance
    type (worker/throughput.py): what each type the stack got actually delivers."""
    schema = ",".join((WORKER_NAMESPACE, *THROUGHPUT_DIMENSIONS))
    return (
        f'SEARCH(\'{{{schema}}} MetricName="{AUDIO_SECONDS_PER_SECOND}" {STACK_DIMENSION}='
        f"\"{stack}\"', 'Average', {PERIOD_SECONDS})"
    )


def key_policy(account: str, partition: str) -> dict:
    """The account administers the key; alarms and budgets may encrypt for the topic."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountAdministers",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
                "Action": "kms:*",
                "Resource": "*",
            },
            {
                "Sid": "AlarmsAndBudgetsPublish",
                "Effect": "Allow",
                "Principal": {"Service": list(PUBLISHERS)},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
                # Only on behalf of this account (the topic policy says the same).
                "Condition": {"StringEquals": {"aws:SourceAccount": account}},
            },
        ],
    }


def topic_policy(topic_arn: str, account: str) -> dict:
    """Only this account's alarms and budgets (and the account itself) publish; TLS only."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountManages",
                "Effect": "Allow",
                "Principal": {"AWS": account},
                "Action": [
                    "SNS:GetTopicAttributes",
                    "SNS:Subscribe",
                    "SNS:Publish",
                    "SNS:ListSubscriptionsByTopic",
                    "SNS:SetTopicAttributes",
                ],
                "Resource": topic_arn,
            },
            {
                "Sid": "AlarmsAndBudgetsPublish",
                "Effect": "Allow",
                "Principal": {"Service": list(PUBLISHERS)},
                "Action": "SNS:Publish",
                "Resource": topic_arn,
                "Condition": {"StringEquals": {"aws:SourceAccount": account}},
            },
            deny_insecure_transport(topic_arn, "SNS:Publish"),
        ],
    }


def controller_alarm_queries(
    function_name: pulumi.Input[str],
) -> list[aws.cloudwatch.MetricAlarmMetricQueryArgsDict]:
    """The controller alarm's metric queries: its failures per window, from three metrics."""
    queries: list[aws.cloudwatch.MetricAlarmMetricQueryArgsDict] = [
        {
            "id": metric.lower(),
            "return_data": False,
            "metric": {
                "namespace": "AWS/Lambda",
                "metric_name": metric,
                "dimensions": {"FunctionName": function_name},
                "period": CONTROLLER_ALARM_PERIOD_SECONDS,
                "stat": "Sum",
            },
        }
        for metric in ("Errors", "Throttles", "Invocations")
    ]
    failures: aws.cloudwatch.MetricAlarmMetricQueryArgsDict = {
        "id": "failures",
        "expression": CONTROLLER_FAILURES,
        "label": "Failed or unable to run",
        "return_data": True,
    }
    return [*queries, failures]


def budget_filter_value(stack: str) -> str:
    """Budgets' TagKeyValue format: `user:<key>$<value>`."""
    return f"user:{COST_TAG_KEY}${stack}"


class Observability(pulumi.ComponentResource):
    alerts_topic_arn: pulumi.Output[str]
    dashboard_name: pulumi.Output[str]
    dashboard_url: pulumi.Output[str]
    dlq_alarm_name: pulumi.Output[str]
    queue_age_alarm_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:observability:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        account = args.account_id or aws.get_caller_identity_output(opts=invoke).account_id
        partition = args.partition or aws.get_partition_output(opts=invoke).partition
        key = aws.kms.Key(
            f"{name}-alerts-key",
            description=f"tts-fleet {args.stack}: alerts topic encryption",
            enable_key_rotation=True,
            policy=pulumi.Output.json_dumps(
                pulumi.Output.all(account, partition).apply(lambda ids: key_policy(ids[0], ids[1]))
            ),
            opts=child,
        )
        topic = aws.sns.Topic(f"{name}-alerts", kms_master_key_id=key.arn, opts=child)
        policy = aws.sns.TopicPolicy(
            f"{name}-alerts-policy",
            arn=topic.arn,
            policy=pulumi.Output.json_dumps(
                pulumi.Output.all(topic.arn, account).apply(
                    lambda ids: topic_policy(ids[0], ids[1])
                )
            ),
            opts=child,
        )
        if args.alerts.email:
            aws.sns.TopicSubscription(
                f"{name}-alerts-email",
                topic=topic.arn,
                protocol="email",
                endpoint=args.alerts.email,
                opts=child,
            )
        after_policy = pulumi.ResourceOptions(parent=self, depends_on=[policy])
        dlq_alarm = self._queue_alarm(
            f"{name}-dlq-messages", args.dlq_name, "ApproximateNumberOfMessagesVisible", 1,
            "A job reached the dead-letter queue: `tts-fleet dlq list` shows why",
            topic, after_policy,
        )  # fmt: skip
        age_alarm = self._queue_alarm(
            f"{name}-oldest-job", args.queue_name, "ApproximateAgeOfOldestMessage",
            args.alerts.max_queue_age_minutes * 60,
            f"A job has waited over {args.alerts.max_queue_age_minutes} min: "
            "the fleet is too small, stuck or at maxWorkers",
            topic, after_policy,
        )  # fmt: skip
        if args.controller_function_name is not None:
            self._controller_alarm(name, args.controller_function_name, topic, after_policy)
        board_name = pulumi.Output.from_input(args.region).apply(
            lambda region: dashboard_name(args.stack, region)
        )
        aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=board_name,
            dashboard_body=pulumi.Output.all(
                args.region,
                args.queue_name,
                args.dlq_name,
                args.cluster_name,
                args.service_name,
                *[args.pool_services[pool.name] for pool in args.pools],
            ).apply(
                lambda v: dashboard_body(
                    v[0],
                    v[1],
                    v[2],
                    v[3],
                    v[4],
                    args.stack,
                    args.scaling_widget,
                    pools_with_services(args.pools, v[5:]),
                    args.pool_scaling_widget,
                )
            ),
            opts=child,
        )
        if args.alerts.monthly_budget_usd is not None:
            self._budget(name, args, topic, after_policy)
        self.alerts_topic_arn = topic.arn
        self.dashboard_name = board_name
        self.dashboard_url = pulumi.Output.all(args.region, board_name).apply(
            lambda values: dashboard_url(*values)
        )
        self.dlq_alarm_name = dlq_alarm.name
        self.queue_age_alarm_name = age_alarm.name
        self.register_outputs(
            {
                "alerts_topic_arn": self.alerts_topic_arn,
                "dashboard_name": self.dashboard_name,
                "dashboard_url": self.dashboard_url,
                "dlq_alarm_name": self.dlq_alarm_name,
                "queue_age_alarm_name": self.queue_age_alarm_name,
            }
        )

    def _queue_alarm(
        self,
        name: str,
        queue_name: pulumi.Input[str],
        metric: str,
        threshold: int,
        description: str,
        topic: aws.sns.Topic,
        opts: pulumi.ResourceOptions,
    ) -> aws.cloudwatch.MetricAlarm:
        return aws.cloudwatch.MetricAlarm(
            name,
            alarm_description=description,
            namespace="AWS/SQS",
            metric_name=metric,
            dimensions={"QueueName": queue_name},
            statistic="Maximum",
            period=PERIOD_SECONDS,
            evaluation_periods=1,
            threshold=threshold,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="notBreaching",  # no metric: no messages
            alarm_actions=[topic.arn],
            ok_actions=[topic.arn],
            opts=opts,
        )

    def _controller_alarm(
        self,
        name: str,
        function_name: StrInput,
        topic: aws.sns.Topic,
        opts: pulumi.ResourceOptions,
    ) -> aws.cloudwatch.MetricAlarm:
        return aws.cloudwatch.MetricAlarm(
            f"{name}-controller-failing",
            alarm_description=(
                "The scaling controller failed or could not run: the worker count is stuck"
                " where it was. Its log group says why."
            ),
            metric_queries=controller_alarm_queries(function_name),
            evaluation_periods=1,
            threshold=1,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="notBreaching",  # no data: nothing failed
            alarm_actions=[topic.arn],
            ok_actions=[topic.arn],
            opts=opts,
        )

    def _budget(
        self, name: str, args: ObservabilityArgs, topic: aws.sns.Topic, opts: pulumi.ResourceOptions
    ) -> aws.budgets.Budget:
        # Budgets checks at creation that it may publish, hence after the topic policy.
        return aws.budgets.Budget(
            f"{name}-budget",
            budget_type="COST",
            time_unit="MONTHLY",
            limit_amount=f"{args.alerts.monthly_budget_usd:.2f}",
            limit_unit="USD",
            cost_filters=[{"name": "TagKeyValue", "values": [budget_filter_value(args.stack)]}],
            notifications=[
                {
                    "comparison_operator": "GREATER_THAN",
                    "threshold": percent,
                    "threshold_type": "PERCENTAGE",
                    "notification_type": "ACTUAL",
                    "subscriber_sns_topic_arns": [topic.arn],
                }
                for percent in BUDGET_THRESHOLDS_PERCENT
            ],
            opts=opts,
        )
