"""What a stack creates, by config, as plain facts: NAT gateways, interface endpoints, alarms,
the dashboard, the customer-managed KMS keys and the scaling controller's parameters.

Pure, so the cost model reads the very numbers the Pulumi components build from
(`components/network.py` imports these; tests pin the components against them) instead of
copies that drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from tts_fleet.config.models import NetworkConfig, StackConfig
from tts_fleet.scaling.controller import ControllerParams
from tts_fleet.scaling.physics import DEFAULT_PROFILE

# Interface endpoints for `endpoints` mode, and why each is needed without internet egress:
#   ecr.api, ecr.dkr  — image manifest and auth (the layers themselves come via the S3 gateway)
#   sqs               — the worker's receive/delete/heartbeat calls
#   logs              — awslogs driver and the worker's EMF metric lines
#   ecs, ecs-agent, ecs-telemetry — the Managed Instances host agent registers, gets tasks and
#                       reports metrics (Container Insights) through these three
#   sts               — not used by the worker itself (task credentials come from the ECS
#                       agent); kept so tools that do call STS inside the VPC (caller identity
#                       checks, AssumeRole from a debugging shell) resolve privately instead of
#                       timing out on a VPC with no internet route.
INTERFACE_ENDPOINTS = (
    "ecr.api",
    "ecr.dkr",
    "sqs",
    "logs",
    "ecs",
    "ecs-agent",
    "ecs-telemetry",
    "sts",
)


def nat_count(cfg: NetworkConfig) -> int:
    """NAT gateways of `nat` mode: one per AZ with `one-per-az`, else one."""
    return cfg.az_count if cfg.nat_gateways == "one-per-az" else 1


@dataclass(frozen=True)
class Alarm:
    """One CloudWatch alarm a stack creates; CloudWatch bills per metric it evaluates."""

    name: str  # the alarm's resource-name suffix
    component: str  # the components/ module that creates it
    metrics: int
    high_resolution: bool = False  # 10 s periods: 3x the standard price per metric


# The scaling alarms are metric math over visible + in flight (components/autoscaling.py
# `outstanding_queries`); the queue alarms read one SQS metric each.
OUTSTANDING_METRICS = 2


# The controller's safety net reads visible messages and the service's running and desired
# task counts (components/autoscaling.py `stranded_queries`).
SAFETY_NET_METRICS = 3
# The alarm on the controller failing reads its Errors, Throttles and Invocations
# (components/observability.py `controller_alarm_queries`).
CONTROLLER_ALARM_METRICS = 3
# The controller's EMF metrics (tts_fleet/controller/metrics.py METRIC_NAMES), one series each
# under the Stack dimension, emitted every minute: billed as custom metrics all month.
CONTROLLER_METRICS = 4
# With gpu.pools, per pool and decision (tts_fleet/controller/metrics.py POOL_METRIC_NAMES).
CONTROLLER_POOL_METRICS = 4
# EventBridge Scheduler runs the controller once a minute (components/controller.py SCHEDULE).
CONTROLLER_RUNS_PER_HOUR = 60


def safety_net_metrics(cfg: StackConfig) -> int:
    """Without pools: visible, running and desired; with gpu.pools: visible and each pool's
    desired (components/autoscaling.py `pooled_stranded_queries`)."""
    return 1 + len(cfg.gpu.pools) if cfg.gpu.pools else SAFETY_NET_METRICS


def alarms(cfg: StackConfig) -> tuple[Alarm, ...]:
    """Every alarm the stack creates: the two scaling alarms in `alarms` mode, the safety net
    and the controller's own alarm in `controller` mode, and the two queue alarms either way."""
    if cfg.scaling.mode == "controller":
        scaling: tuple[Alarm, ...] = (
            Alarm("safety-net", "autoscaling", safety_net_metrics(cfg)),
            Alarm("controller-failing", "observability", CONTROLLER_ALARM_METRICS),
        )
    else:
        scaling = (
            Alarm("scale-out", "autoscaling", OUTSTANDING_METRICS),
            Alarm("idle", "autoscaling", OUTSTANDING_METRICS),
        )
    return (
        *scaling,
        Alarm("dlq-messages", "observability", 1),
        Alarm("oldest-job", "observability", 1),
    )


def controller_functions(cfg: StackConfig) -> int:
    """components/controller.py: one scaling-controller function in `controller` mode."""
    return 1 if cfg.scaling.mode == "controller" else 0


def custom_metrics_always_on(cfg: StackConfig) -> int:
    """Custom metrics emitted while the fleet is idle (the worker's only while it runs): the
    controller's, and with gpu.pools its per-pool series (Stack and Pool dimensions)."""
    per_pool = CONTROLLER_POOL_METRICS * len(cfg.gpu.pools)
    return (CONTROLLER_METRICS + per_pool) * controller_functions(cfg)


def alarm_metrics(cfg: StackConfig, *, high_resolution: bool = False) -> int:
    """The alarm metrics CloudWatch bills for this stack, standard or high resolution."""
    return sum(a.metrics for a in alarms(cfg) if a.high_resolution == high_resolution)


def dashboards(cfg: StackConfig) -> int:
    """components/observability.py: one CloudWatch dashboard per stack."""
    return 1


def kms_keys(cfg: StackConfig) -> int:
    """Customer-managed KMS keys: the alerts topic's (components/observability.py; CloudWatch
    alarms and Budgets cannot publish to a topic under the AWS-managed SNS key). The queues
    use SQS-managed SSE and the bucket SSE-S3: no key of their own."""
    return 1


def controller_params(cfg: StackConfig) -> ControllerParams:
    """What a deployed controller is configured with (components/controller.py puts it in the
    function's environment; `tts-fleet scaling` prints it): the stack's scaling, its worker
    slots, and the timings the simulator models a default stack with
    (tts_fleet/scaling/physics.py DEFAULT_PROFILE)."""
    concurrency = cfg.worker.concurrency
    return ControllerParams.from_config(
        cfg.scaling,
        cold_start_s=DEFAULT_PROFILE.cold_task_s,
        seconds_per_job=DEFAULT_PROFILE.batching.seconds_per_job(concurrency),
        concurrency=concurrency,
        cold_start_work=cfg.scaling.cold_start_work,
        host_idle_seconds=cfg.scaling.host_idle_seconds,
    )
