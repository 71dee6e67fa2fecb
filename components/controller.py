"""ScalingController: the Lambda that runs the scaling policy (`scaling.mode: controller`).

EventBridge Scheduler invokes it every minute (and `tts-fleet submit` right after sending);
it samples the queue every 10 s while anything is outstanding or running and sets the
service's desired count with `tts_fleet.scaling.controller.decide` (tts_fleet/controller/handler.py
says how and why through UpdateService). Its code is this repo's `tts_fleet/scaling` and
`tts_fleet/controller`, zipped here; boto3 comes with the runtime.

Its state is one S3 object, `controller/state.json`, in the stack's outputs bucket: no new
resource to create or pay for (a DynamoDB table would be both), and S3 reads its own writes.
Reserved concurrency 1 keeps invocations apart, and the write is conditional on the ETag read
(`If-Match`, or `If-None-Match: *`), so an old and a new function during a replace, or a
manual run, cannot interleave (tts_fleet/controller/handler.py). About 1,440 GETs and PUTs a
day: cents a month.

IAM is scoped to this queue (GetQueueAttributes), this service (DescribeServices,
UpdateService), the state object and the function's log group. DescribeScalableTargets has
no resource-level permissions, so it alone is on `*`; it reads min/max, nothing else.

With capacity pools (`gpu.pools`, issue #22) the function sizes exactly the pools' services,
and reads their tasks (ListTasks on this cluster only, DescribeTasks on its tasks) to see a
task waiting for capacity or taken by Spot; its environment lists the pools
(TTS_FLEET_POOLS, TTS_FLEET_PLACEMENT).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pulumi
import pulumi_aws as aws
from pydantic import Field, model_validator

import tts_fleet
from components.args import ComponentArgs, StrInput
from components.iam import cluster_task_arns, trust_policy
from tts_fleet.controller import metrics
from tts_fleet.controller.settings import HANDLER, STATE_KEY, Settings
from tts_fleet.scaling.batches import BATCHES_PREFIX, FORECASTS_KEY
from tts_fleet.scaling.controller import ControllerParams
from tts_fleet.scaling.pools import PlacementParams, PoolSpec

RUNTIME = "python3.12"
# Sampling stops after 50 s (settings.SAMPLING_BUDGET_S); the rest is for the last calls.
TIMEOUT_SECONDS = 60
MEMORY_MB = 128  # a few boto3 calls every 10 s
LOG_RETENTION_DAYS = 30
SCHEDULE = "rate(1 minute)"
SCHEDULE_GROUP = "default"
# A late tick is worth nothing once the next one is due: drop it rather than queue it
# (Lambda would otherwise retry a throttled event for up to 6 hours).
MAX_EVENT_AGE_SECONDS = 60
# The Lambda's code: these packages of the repo and nothing else (no pydantic there).
CODE_PACKAGES = ("scaling", "controller")
# Lambda function names: letters, digits, '-' and '_', at most 64 characters.
_FUNCTION_NAME_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def function_name(project: str, stack: str) -> str:
    """A fixed name (like the task family), so the producer policy can name the function's
    ARN before the function exists: JobQueue is built first."""
    return _FUNCTION_NAME_INVALID.sub("-", f"{project}-{stack}-controller")[:64]


def function_arn(same_place_arn: str, name: str) -> str:
    """The ARN of function `name` in the account and region of any other ARN there."""
    _, partition, _, region, account = same_place_arn.split(":")[:5]
    return f"arn:{partition}:lambda:{region}:{account}:function:{name}"


def service_arn(cluster_arn: str, cluster: str, service: str) -> str:
    """`arn:<partition>:ecs:<region>:<account>:service/<cluster>/<service>`."""
    _, partition, _, region, account = cluster_arn.split(":")[:5]
    return f"arn:{partition}:ecs:{region}:{account}:service/{cluster}/{service}"


def code_archive(root: Path | None = None) -> pulumi.AssetArchive:
    """`tts_fleet/__init__.py` + the CODE_PACKAGES' modules, sorted, without caches."""
    base = root or Path(tts_fleet.__file__).resolve().parent
    files = [base / "__init__.py"]
    for package in CODE_PACKAGES:
        files += sorted((base / package).glob("*.py"))
    assets: dict[str, pulumi.Asset | pulumi.Archive] = {
        f"tts_fleet/{p.relative_to(base).as_posix()}": pulumi.FileAsset(str(p)) for p in files
    }
    return pulumi.AssetArchive(assets)


def pool_task_statements(cluster_arn: str, cluster: str) -> list[dict]:
    """With pools: read the cluster's tasks. ListTasks names no task, so it is scoped by the
    `ecs:cluster` condition key; DescribeTasks takes the cluster's task ARNs (Service
    Authorization Reference, Amazon ECS)."""
    return [
        {"Sid": "ListPoolTasks", "Effect": "Allow", "Action": "ecs:ListTasks", "Resource": "*",
         "Condition": {"ArnEquals": {"ecs:cluster": cluster_arn}}},
        {"Sid": "ReadPoolTasks", "Effect": "Allow", "Action": "ecs:DescribeTasks",
         "Resource": cluster_task_arns(cluster_arn, cluster)},
    ]  # fmt: skip


def function_policy(
    queue_arn: str,
    service: str | list[str],
    bucket_arn: str,
    log_group_arn: str,
    extra: list[dict] | None = None,
) -> dict:
    """The function's role: read this queue, read and size this service (or each pool's),
    keep its state; `extra`: the pools' task statements."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadQueue", "Effect": "Allow", "Action": "sqs:GetQueueAttributes",
             "Resource": queue_arn},
            {"Sid": "SizeService", "Effect": "Allow",
             "Action": ["ecs:DescribeServices", "ecs:UpdateService"], "Resource": service},
            *(extra or []),
            # No resource-level permissions exist for Describe* in Application Auto Scaling.
            {"Sid": "ReadTargetBounds", "Effect": "Allow",
             "Action": "application-autoscaling:DescribeScalableTargets", "Resource": "*"},
            {"Sid": "KeepState", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
             "Resource": f"{bucket_arn}/{STATE_KEY}"},
            # Without ListBucket a missing object reads as AccessDenied, not NoSuchKey.
            {"Sid": "FindState", "Effect": "Allow", "Action": "s3:ListBucket",
             "Resource": bucket_arn, "Condition": {"StringEquals": {"s3:prefix": STATE_KEY}}},
            *batch_statements(bucket_arn),
            {"Sid": "WriteLogs", "Effect": "Allow",
             "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
             "Resource": f"{log_group_arn}:*"},
        ],
    }  # fmt: skip


def batch_statements(bucket_arn: str) -> list[dict]:
    """Deadline batches (issue #23): read and retire the batch records, keep the forecasts
    `status` reads; list both, so a missing object reads as NoSuchKey, not AccessDenied."""
    return [
        {"Sid": "ReadBatches", "Effect": "Allow", "Action": ["s3:GetObject", "s3:DeleteObject"],
         "Resource": f"{bucket_arn}/{BATCHES_PREFIX}*"},
        {"Sid": "KeepForecasts", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
         "Resource": f"{bucket_arn}/{FORECASTS_KEY}"},
        {"Sid": "FindBatches", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": bucket_arn,
         "Condition": {"StringEquals": {"s3:prefix": [BATCHES_PREFIX, FORECASTS_KEY]}}},
    ]  # fmt: skip


def invoke_policy(arn: str) -> dict:
    """The scheduler's role: invoke this function only."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": arn}],
    }


def schedule_arn(same_place_arn: str, name: str) -> str:
    """The ARN of schedule `name` (default group) in the account and region of another ARN."""
    _, partition, _, region, account = same_place_arn.split(":")[:5]
    return f"arn:{partition}:scheduler:{region}:{account}:schedule/{SCHEDULE_GROUP}/{name}"


def schedule_group_arn(schedule: str) -> str:
    """The ARN of the group a schedule ARN (`...:schedule/<group>/<name>`) belongs to."""
    head, _, path = schedule.partition(":schedule/")
    return f"{head}:schedule-group/{path.split('/')[0]}"


def scheduler_trust(schedule: pulumi.Input[str]) -> dict:
    """EventBridge Scheduler, for this account and this schedule (the confused deputy).
    Scheduler sends the schedule GROUP's ARN as aws:SourceArn (accounts allowlisted before
    7 September 2023 still send the schedule's own): both are accepted, or the role would
    refuse every tick. Both are known before the schedule exists (the role comes first)."""
    arn = pulumi.Output.from_input(schedule)
    account = arn.apply(lambda a: a.split(":")[4])
    sources = arn.apply(lambda a: [schedule_group_arn(a), a])
    return trust_policy(
        "scheduler.amazonaws.com",
        {"StringEquals": {"aws:SourceAccount": account}, "ArnEquals": {"aws:SourceArn": sources}},
    )


def dashboard_widget(stack: str) -> tuple[str, list[list], str]:
    """(title, metrics, stat) of the dashboard graph of the controller's decisions: the EMF
    metrics its log lines carry (tts_fleet/controller/metrics.py), for this stack only."""
    mine = (metrics.STACK_DIMENSION, stack)
    lines = [
        [metrics.NAMESPACE, metrics.DESIRED, *mine, {"label": "Desired (controller)"}],
        [metrics.NAMESPACE, metrics.OUTSTANDING, *mine, {"label": "Outstanding (sampled)"}],
        [metrics.NAMESPACE, metrics.RUNNING, *mine, {"label": "Running"}],
        [metrics.NAMESPACE, metrics.PENDING, *mine, {"label": "Pending (cold starts)"}],
    ]
    return "Scaling controller: its decisions, 10-s samples", lines, "Maximum"


def pool_service_names(args: ScalingControllerArgs) -> list[StrInput]:
    """Each pool's service name, in the pools' order."""
    return [args.pool_services[pool.name] for pool in args.pools]


def pools_with_services(pools: tuple[PoolSpec, ...], names: list[str]) -> tuple[PoolSpec, ...]:
    """The one place the controller's pools get their ECS service names (resolved, in the
    pools' order) before they go into its environment."""
    return tuple(replace(pool, service=name) for pool, name in zip(pools, names, strict=True))


def pool_dashboard_widget(stack: str, pools: tuple[PoolSpec, ...]) -> tuple[str, list[list], str]:
    """(title, metrics, stat) of the graph of the controller's placement per pool: each pool's
    desired count and whether it is unavailable (its EMF lines with the Pool dimension)."""
    lines: list[list] = []
    for pool in pools:
        mine = (metrics.STACK_DIMENSION, stack, metrics.POOL_DIMENSION, pool.name)
        lines += [
            [metrics.NAMESPACE, metrics.POOL_DESIRED, *mine, {"label": f"{pool.name} desired"}],
            [metrics.NAMESPACE, metrics.POOL_UNAVAILABLE, *mine,
             {"label": f"{pool.name} unavailable (1)", "yAxis": "right"}],
        ]  # fmt: skip
    return "Scaling controller per pool: desired, and unavailable after a failure", lines, "Maximum"


class ScalingControllerArgs(ComponentArgs):
    stack: str
    function_name: str
    params: ControllerParams
    queue_url: StrInput
    queue_arn: StrInput
    cluster_name: StrInput
    cluster_arn: StrInput
    service_name: StrInput
    bucket_name: StrInput
    bucket_arn: StrInput
    # Capacity pools (gpu.pools), priced (tts_fleet/cost/pools.py::pool_specs) with `service`
    # still "": each pool's service name comes from `pool_services` once the service exists.
    # Empty: one service, `service_name`, and the environment and role of a stack before pools.
    pools: tuple[PoolSpec, ...] = ()
    pool_services: dict[str, StrInput] = Field(default_factory=dict)
    placement: PlacementParams | None = None  # with pools

    @model_validator(mode="after")
    def _each_pool_has_a_service(self) -> ScalingControllerArgs:
        missing = [pool.name for pool in self.pools if pool.name not in self.pool_services]
        if missing or (self.pools and self.placement is None):
            raise ValueError(f"pools without a service ({missing}) or without placement")
        return self


class ScalingController(pulumi.ComponentResource):
    function_name: pulumi.Output[str]
    function_arn: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    log_group_name: pulumi.Output[str]
    schedule_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ScalingControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:controller:ScalingController", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Lambda's own log group name, created here so it has a retention and the role
        # needs no logs:CreateLogGroup.
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/lambda/{args.function_name}",
            retention_in_days=LOG_RETENTION_DAYS,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=pulumi.Output.json_dumps(trust_policy("lambda.amazonaws.com")),
            opts=child,
        )
        grant = aws.iam.RolePolicy(
            f"{name}-policy", role=role.id, policy=self._policy(args, logs), opts=child
        )
        function = self._function(name, args, role, [logs, grant])
        aws.lambda_.FunctionEventInvokeConfig(
            f"{name}-async",
            function_name=function.name,
            maximum_event_age_in_seconds=MAX_EVENT_AGE_SECONDS,
            maximum_retry_attempts=0,
            opts=child,
        )
        schedule = self._schedule(name, function, args.queue_arn, args.function_name)
        self.function_name = function.name
        self.function_arn = function.arn
        self.role_arn = role.arn  # the one writer of controller/
        self.log_group_name = logs.name
        self.schedule_name = schedule.name
        self.register_outputs(
            {
                "function_name": self.function_name,
                "function_arn": self.function_arn,
                "log_group_name": self.log_group_name,
                "schedule_name": self.schedule_name,
            }
        )

    @staticmethod
    def _policy(args: ScalingControllerArgs, logs: aws.cloudwatch.LogGroup) -> pulumi.Output[str]:
        place = (args.cluster_arn, args.cluster_name)
        if not args.pools:
            service = pulumi.Output.all(*place, args.service_name).apply(
                lambda values: service_arn(values[0], values[1], values[2])
            )
            return pulumi.Output.json_dumps(
                pulumi.Output.all(args.queue_arn, service, args.bucket_arn, logs.arn).apply(
                    lambda values: function_policy(*values)
                )
            )
        services = pulumi.Output.all(*place, *pool_service_names(args)).apply(
            lambda values: [service_arn(values[0], values[1], name) for name in values[2:]]
        )
        tasks = pulumi.Output.all(*place).apply(
            lambda values: pool_task_statements(values[0], values[1])
        )
        return pulumi.Output.json_dumps(
            pulumi.Output.all(args.queue_arn, services, args.bucket_arn, logs.arn, tasks).apply(
                lambda values: function_policy(*values)
            )
        )

    def _function(
        self,
        name: str,
        args: ScalingControllerArgs,
        role: aws.iam.Role,
        after: list[pulumi.Resource],
    ) -> aws.lambda_.Function:
        env = pulumi.Output.all(
            args.queue_url,
            args.cluster_name,
            args.service_name,
            args.bucket_name,
            *pool_service_names(args),
        ).apply(
            lambda values: Settings(
                queue_url=values[0],
                cluster=values[1],
                service=values[2],
                bucket=values[3],
                stack=args.stack,
                params=args.params,
                pools=pools_with_services(args.pools, values[4:]),
                placement=args.placement,
            ).to_env()
        )
        return aws.lambda_.Function(
            f"{name}-function",
            name=args.function_name,
            description=f"tts-fleet {args.stack}: sets the worker count from the queue",
            runtime=RUNTIME,
            handler=HANDLER,
            role=role.arn,
            code=code_archive(),
            timeout=TIMEOUT_SECONDS,
            memory_size=MEMORY_MB,
            # One at a time: two invocations must never race on the state or the count.
            reserved_concurrent_executions=1,
            environment={"variables": env},
            # The role's permissions and the log group exist before the first invocation.
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )

    def _schedule(
        self, name: str, function: aws.lambda_.Function, queue_arn: StrInput, schedule_name: str
    ) -> aws.scheduler.Schedule:
        child = pulumi.ResourceOptions(parent=self)
        # A fixed name (the function's, unique in the account and region like it), so the
        # role's trust names the schedule's ARN before the schedule exists: it needs the role.
        arn = pulumi.Output.from_input(queue_arn).apply(
            lambda queue: schedule_arn(queue, schedule_name)
        )
        role = aws.iam.Role(
            f"{name}-scheduler-role",
            assume_role_policy=pulumi.Output.json_dumps(scheduler_trust(arn)),
            opts=child,
        )
        grant = aws.iam.RolePolicy(
            f"{name}-scheduler-policy",
            role=role.id,
            policy=pulumi.Output.json_dumps(function.arn.apply(invoke_policy)),
            opts=child,
        )
        return aws.scheduler.Schedule(
            f"{name}-schedule",
            name=schedule_name,
            group_name=SCHEDULE_GROUP,
            description="Wake the scaling controller every minute",
            schedule_expression=SCHEDULE,
            flexible_time_window={"mode": "OFF"},
            target={
                "arn": function.arn,
                "role_arn": role.arn,
                "input": '{"source":"schedule"}',
                "retry_policy": {
                    "maximum_retry_attempts": 0,
                    "maximum_event_age_in_seconds": MAX_EVENT_AGE_SECONDS,
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[grant]),
        )
