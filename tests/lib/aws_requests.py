"""The AWS API requests the Pulumi program would send, checked against botocore's service models.

Three steps, each explicit:
1. `record_main` / `record_platform` run the program under mocks whose outputs have the real
   formats (`vpc-…`, `arn:aws:iam::…:role/…`, autonamed `name-1a2b3c4`), so ids and ARNs that
   flow into other resources look like what AWS would return, and length and pattern checks
   on them mean something.
2. `requests_for` turns each recorded resource into the boto3 request(s) the Terraform AWS
   provider under pulumi-aws sends for it. The field mapping is written out per type; an
   input with no mapping raises, so a new argument cannot slip through unchecked.
3. `problems` validates one request: botocore's `ParamValidator` (types, required, min), then
   a walk of the input shape for what ParamValidator skips (enum, max, pattern, and min
   again), then the rules the AWS docs state but the model does not encode (`RULES`).

What this still cannot prove: permissions, quotas, lifecycle (update/replace/delete order),
and the provider's own defaults for fields the program leaves unset.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import runpy
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pulumi
from botocore.model import Shape, StructureShape
from botocore.validate import ParamValidator

from components.platform import Platform, PlatformArgs
from tests.lib.pulumi_harness import ACCOUNT, REGION, Recorded, RecordingMocks, stack_config
from tts_fleet.config.models import StackConfig

ROOT = Path(__file__).resolve().parents[2]
WORKER_DIR = ROOT / "worker"


@dataclass(frozen=True)
class Request:
    service: str  # botocore service name
    operation: str  # API operation name, e.g. "PutMetricAlarm"
    params: dict[str, Any]
    source: str  # "<type token> <resource name>", for the report

    def label(self) -> str:
        return f"{self.service}.{self.operation} ({self.source})"


# ---------------------------------------------------------------------------------------------
# 1. Mocks with API-shaped outputs
# ---------------------------------------------------------------------------------------------

# Which input Pulumi autonames when it is not set (the provider's `name` property), per type.
AUTONAMED = {
    "aws:iam/role:Role": "name",
    "aws:iam/policy:Policy": "name",
    "aws:iam/instanceProfile:InstanceProfile": "name",
    "aws:iam/rolePolicy:RolePolicy": "name",
    "aws:ecs/cluster:Cluster": "name",
    "aws:ecs/capacityProvider:CapacityProvider": "name",
    "aws:ecs/service:Service": "name",
    "aws:cloudwatch/logGroup:LogGroup": "name",
    "aws:cloudwatch/metricAlarm:MetricAlarm": "name",
    "aws:sqs/queue:Queue": "name",
    "aws:sns/topic:Topic": "name",
    "aws:s3/bucket:Bucket": "bucket",
    "aws:ecr/repository:Repository": "name",
    "aws:codebuild/project:Project": "name",
    "aws:appautoscaling/policy:Policy": "name",
    "aws:appautoscaling/scheduledAction:ScheduledAction": "name",
    "aws:budgets/budget:Budget": "name",
    "aws:ec2/securityGroup:SecurityGroup": "name",
    "aws:lambda/function:Function": "name",
    "aws:scheduler/schedule:Schedule": "name",
    "aws:cloudwatch/eventRule:EventRule": "name",
}
# EC2 id prefixes: the provider returns these as the resource id.
EC2_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/securityGroup:SecurityGroup": "sg",
    "aws:ec2/internetGateway:InternetGateway": "igw",
    "aws:ec2/eip:Eip": "eipalloc",
    "aws:ec2/natGateway:NatGateway": "nat",
    "aws:ec2/routeTable:RouteTable": "rtb",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce",
}
# Terraform's `name_prefix` appends a 26-character unique id (id.PrefixedUniqueId).
NAME_PREFIX_SUFFIX = 26


def _hex(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def _uuid(seed: str) -> str:
    h = _hex(seed, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def physical_name(typ: str, name: str, inputs: dict[str, Any]) -> str:
    """The name AWS sees: the given one, prefix + unique id, or Pulumi's autoname."""
    key = AUTONAMED.get(typ)
    if key and inputs.get(key):
        return str(inputs[key])
    if key and inputs.get("namePrefix"):
        prefix = str(inputs["namePrefix"])
        return prefix + str(int(_hex(name, 24), 16))[:NAME_PREFIX_SUFFIX].zfill(26)
    if key:
        # Pulumi autonaming: `<resource name>-<7 random hex>`; S3 names must be lowercase.
        auto = f"{name}-{_hex(name, 7)}"
        return auto.lower() if typ == "aws:s3/bucket:Bucket" else auto
    return name


def _arn(service: str, resource: str, region: str = REGION) -> str:
    return f"arn:aws:{service}:{region}:{ACCOUNT}:{resource}"


def api_outputs(typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(id, outputs) in the formats AWS and the provider return for this type."""
    physical = physical_name(typ, name, inputs)
    out: dict[str, Any] = {**inputs, "name": physical}
    if typ in EC2_ID_PREFIX:
        rid = f"{EC2_ID_PREFIX[typ]}-{_hex(name, 17)}"
        out["arn"] = _arn("ec2", f"{EC2_ID_PREFIX[typ].replace('eipalloc', 'elastic-ip')}/{rid}")
        if inputs.get("vpcEndpointType") == "Gateway":  # its service's prefix list
            out["prefixListId"] = f"pl-{_hex(name, 17)}"
        return rid, out
    identity = _identity(typ, physical, inputs)
    rid = str(identity.pop("_id", physical))
    return rid, {**out, **identity}


def _identity(typ: str, physical: str, inputs: dict[str, Any]) -> dict[str, Any]:
    service = typ.split(":")[1].split("/")[0]
    table: dict[str, Callable[[], dict[str, Any]]] = {
        "aws:iam/role:Role": lambda: {"arn": f"arn:aws:iam::{ACCOUNT}:role/{physical}"},
        "aws:iam/policy:Policy": lambda: {
            "arn": f"arn:aws:iam::{ACCOUNT}:policy/{physical}",
            "_id": f"arn:aws:iam::{ACCOUNT}:policy/{physical}",
        },
        "aws:iam/instanceProfile:InstanceProfile": lambda: {
            "arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/{physical}"
        },
        "aws:ecs/cluster:Cluster": lambda: {
            "arn": _arn("ecs", f"cluster/{physical}"),
            "_id": _arn("ecs", f"cluster/{physical}"),
        },
        "aws:ecs/capacityProvider:CapacityProvider": lambda: {
            "arn": _arn("ecs", f"capacity-provider/{physical}")
        },
        "aws:ecs/taskDefinition:TaskDefinition": lambda: {
            "arn": _arn("ecs", f"task-definition/{inputs.get('family', physical)}:1"),
            "revision": 1,
            "_id": inputs.get("family", physical),
        },
        "aws:ecs/service:Service": lambda: {
            "arn": _arn("ecs", f"service/{physical}"),
            "_id": _arn("ecs", f"service/{physical}"),
        },
        "aws:cloudwatch/logGroup:LogGroup": lambda: {"arn": _arn("logs", f"log-group:{physical}")},
        "aws:cloudwatch/metricAlarm:MetricAlarm": lambda: {
            "arn": _arn("cloudwatch", f"alarm:{physical}")
        },
        "aws:sqs/queue:Queue": lambda: {
            "arn": _arn("sqs", physical),
            "url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{physical}",
            "_id": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{physical}",
        },
        "aws:sns/topic:Topic": lambda: {
            "arn": _arn("sns", physical),
            "_id": _arn("sns", physical),
        },
        "aws:kms/key:Key": lambda: {
            "arn": _arn("kms", f"key/{_uuid(physical)}"),
            "keyId": _uuid(physical),
            "_id": _uuid(physical),
        },
        "aws:s3/bucket:Bucket": lambda: {
            "bucket": physical,
            "arn": f"arn:aws:s3:::{physical}",
        },
        "aws:ecr/repository:Repository": lambda: {
            "arn": _arn("ecr", f"repository/{physical}"),
            "repositoryUrl": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{physical}",
        },
        "aws:codebuild/project:Project": lambda: {"arn": _arn("codebuild", f"project/{physical}")},
        "aws:cloudwatch/eventRule:EventRule": lambda: {"arn": _arn("events", f"rule/{physical}")},
        "aws:appautoscaling/target:Target": lambda: {
            "arn": _arn("application-autoscaling", f"scalable-target/{_hex(physical, 20)}"),
            "_id": inputs.get("resourceId", physical),
        },
        "aws:lambda/function:Function": lambda: {
            "arn": _arn("lambda", f"function:{physical}"),
            "_id": physical,
        },
        "aws:scheduler/schedule:Schedule": lambda: {
            "arn": _arn("scheduler", f"schedule/default/{physical}"),
            "_id": f"default/{physical}",
        },
        "aws:appautoscaling/policy:Policy": lambda: {
            "arn": _arn(
                "autoscaling",
                f"scalingPolicy:{_uuid(physical)}:resource/ecs/"
                f"{inputs.get('resourceId', '')}:policyName/{physical}",
            )
        },
    }
    make = table.get(typ)
    return make() if make else {"arn": _arn(service, physical)}


@dataclass
class ApiShapedMocks(RecordingMocks):
    """RecordingMocks whose outputs look like AWS's; `outputs` keeps them per resource name."""

    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.resources.append(Recorded(args.typ, args.name, dict(args.inputs), args.provider))
        rid, out = api_outputs(args.typ, args.name, dict(args.inputs))
        self.outputs[args.name] = {**out, "id": rid}
        return rid, out


def _record(program: Callable[[], Any], config: dict[str, Any], stack: str) -> ApiShapedMocks:
    """`pulumi_harness.run_program`, with the API-shaped mocks."""
    mocks = ApiShapedMocks()
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    )
    pulumi.runtime.set_mocks(mocks, project="tts-fleet", stack=stack, preview=False)

    @pulumi.runtime.test
    def _run() -> Any:
        return program()

    _run()
    return mocks


def record_main(config: dict[str, Any], stack: str) -> ApiShapedMocks:
    """__main__.py (the explicit provider and its default tags included)."""
    return _record(
        lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"), config, stack
    )


def record_platform(raw: dict[str, Any], stack: str = "dev") -> ApiShapedMocks:
    """The Platform alone from a `{section: value}` config (no provider, so no default tags)."""
    config = StackConfig.from_raw(raw)

    def program() -> None:
        Platform("tts", PlatformArgs(config=config, stack=stack, worker_dir=str(WORKER_DIR)))

    return _record(program, stack_config(raw), stack)


# ---------------------------------------------------------------------------------------------
# 2. Recorded inputs → requests (explicit field mapping per type)
# ---------------------------------------------------------------------------------------------


class UnmappedInput(KeyError):
    """An input the per-type mapping does not know: extend the mapping, do not skip it."""


@dataclass(frozen=True)
class Context:
    resource: Recorded
    out: dict[str, Any]  # the mock's outputs for this resource (physical name, arn, id)
    default_tags: dict[str, str]

    @property
    def inputs(self) -> dict[str, Any]:
        return self.resource.inputs

    @property
    def name(self) -> str:
        return str(self.out["name"])

    def tags(self) -> dict[str, str]:
        """Provider default tags merged with the resource's own, as the provider's tags_all."""
        return {**self.default_tags, **(self.inputs.get("tags") or {})}

    def request(self, service: str, operation: str, params: dict[str, Any]) -> Request:
        source = f"{self.resource.type} {self.resource.name}"
        return Request(service, operation, _drop_none(params), source)


def rename(values: dict[str, Any], mapping: dict[str, str], where: str) -> dict[str, Any]:
    """Terraform field names → API names; any field not in `mapping` raises UnmappedInput."""
    unknown = sorted(set(values) - set(mapping))
    if unknown:
        raise UnmappedInput(f"{where}: no API mapping for {unknown}")
    return {mapping[k]: v for k, v in values.items()}


def only(values: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(values) - known)
    if unknown:
        raise UnmappedInput(f"{where}: no API mapping for {unknown}")


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _policy_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _tag_list(tags: dict[str, str], key: str = "Key", value: str = "Value") -> list[dict] | None:
    return [{key: k, value: v} for k, v in tags.items()] or None


# Provider-only arguments: they steer the provider and are not sent in the create request.
PROVIDER_ONLY = {"tags", "tagsAll", "region"}


def capacity_provider(c: Context) -> list[Request]:
    only(c.inputs, {"cluster", "managedInstancesProvider", "name", *PROVIDER_ONLY}, "cp")
    mip = c.inputs["managedInstancesProvider"]
    provider = rename(
        mip,
        {
            "infrastructureRoleArn": "infrastructureRoleArn",
            "instanceLaunchTemplate": "instanceLaunchTemplate",
            "propagateTags": "propagateTags",
            "infrastructureOptimization": "infrastructureOptimization",
            "autoRepairConfiguration": "autoRepairConfiguration",
        },
        "managedInstancesProvider",
    )
    template = rename(
        mip["instanceLaunchTemplate"],
        {
            "ec2InstanceProfileArn": "ec2InstanceProfileArn",
            "networkConfiguration": "networkConfiguration",
            "storageConfiguration": "storageConfiguration",
            "monitoring": "monitoring",
            "capacityOptionType": "capacityOptionType",
            "instanceRequirements": "instanceRequirements",
        },
        "instanceLaunchTemplate",
    )
    if "storageConfiguration" in template:
        template["storageConfiguration"] = rename(
            template["storageConfiguration"],
            {"storageSizeGib": "storageSizeGiB"},
            "storageConfiguration",
        )
    if "instanceRequirements" in template:
        template["instanceRequirements"] = rename(
            template["instanceRequirements"], INSTANCE_REQUIREMENTS, "instanceRequirements"
        )
    provider["instanceLaunchTemplate"] = template
    params = {
        "name": c.name,
        "cluster": c.inputs.get("cluster"),
        "managedInstancesProvider": provider,
        "tags": _tag_list(c.tags(), "key", "value"),
    }
    return [c.request("ecs", "CreateCapacityProvider", params)]


# Terraform `instance_requirements` (camelCased by Pulumi) → ECS InstanceRequirementsRequest.
INSTANCE_REQUIREMENTS = {
    "vcpuCount": "vCpuCount",
    "memoryMib": "memoryMiB",
    "acceleratorTypes": "acceleratorTypes",
    "acceleratorManufacturers": "acceleratorManufacturers",
    "acceleratorNames": "acceleratorNames",
    "acceleratorCount": "acceleratorCount",
    "acceleratorTotalMemoryMib": "acceleratorTotalMemoryMiB",
    "allowedInstanceTypes": "allowedInstanceTypes",
    "excludedInstanceTypes": "excludedInstanceTypes",
    "cpuManufacturers": "cpuManufacturers",
    "instanceGenerations": "instanceGenerations",
    "bareMetal": "bareMetal",
    "burstablePerformance": "burstablePerformance",
    "localStorage": "localStorage",
    "localStorageTypes": "localStorageTypes",
    "memoryGibPerVcpu": "memoryGiBPerVCpu",
    "totalLocalStorageGb": "totalLocalStorageGB",
    "baselineEbsBandwidthMbps": "baselineEbsBandwidthMbps",
    "networkBandwidthGbps": "networkBandwidthGbps",
    "networkInterfaceCount": "networkInterfaceCount",
    "onDemandMaxPricePercentageOverLowestPrice": "onDemandMaxPricePercentageOverLowestPrice",
    "spotMaxPricePercentageOverLowestPrice": "spotMaxPricePercentageOverLowestPrice",
    "requireHibernateSupport": "requireHibernateSupport",
}


def task_definition(c: Context) -> list[Request]:
    mapping = {
        "family": "family",
        "taskRoleArn": "taskRoleArn",
        "executionRoleArn": "executionRoleArn",
        "networkMode": "networkMode",
        "containerDefinitions": "containerDefinitions",
        "requiresCompatibilities": "requiresCompatibilities",
        "cpu": "cpu",
        "memory": "memory",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"skipDestroy"}), mapping, "taskDef")
    # The provider takes the container definitions as the API's own JSON.
    params["containerDefinitions"] = json.loads(params["containerDefinitions"])
    params["tags"] = _tag_list(c.tags(), "key", "value")
    return [c.request("ecs", "RegisterTaskDefinition", params)]


def _without(values: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in keys}


# Steer the provider only: `forceNewDeployment` goes into UpdateService (below), the others
# are waits and replacement triggers.
SERVICE_PROVIDER_ONLY = {"forceNewDeployment", "waitForSteadyState", "triggers", "forceDelete"}


def _service_common(c: Context) -> dict[str, Any]:
    values = _without(c.inputs, PROVIDER_ONLY | SERVICE_PROVIDER_ONLY | {"name"})
    mapping = {
        "cluster": "cluster",
        "taskDefinition": "taskDefinition",
        "desiredCount": "desiredCount",
        "capacityProviderStrategies": "capacityProviderStrategy",
        "networkConfiguration": "networkConfiguration",
        "deploymentCircuitBreaker": "deploymentCircuitBreaker",
        "deploymentMaximumPercent": "maximumPercent",
        "deploymentMinimumHealthyPercent": "minimumHealthyPercent",
        "propagateTags": "propagateTags",
        "enableEcsManagedTags": "enableECSManagedTags",
        "availabilityZoneRebalancing": "availabilityZoneRebalancing",
    }
    params = rename(values, mapping, "service")
    params["capacityProviderStrategy"] = [
        rename(
            s, {"capacityProvider": "capacityProvider", "weight": "weight", "base": "base"}, "cps"
        )
        for s in params.get("capacityProviderStrategy", [])
    ] or None
    network = params.pop("networkConfiguration", None)
    if network is not None:
        vpc = rename(
            network,
            {
                "subnets": "subnets",
                "securityGroups": "securityGroups",
                "assignPublicIp": "assignPublicIp",
            },
            "networkConfiguration",
        )
        if "assignPublicIp" in vpc:  # a bool in the provider, an enum in the API
            vpc["assignPublicIp"] = "ENABLED" if vpc["assignPublicIp"] else "DISABLED"
        params["networkConfiguration"] = {"awsvpcConfiguration": vpc}
    deployment = {
        api: params.pop(api)
        for api in ("deploymentCircuitBreaker", "maximumPercent", "minimumHealthyPercent")
        if api in params
    }
    params["deploymentConfiguration"] = deployment or None
    return params


def service(c: Context) -> list[Request]:
    create = {
        **_service_common(c),
        "serviceName": c.name,
        "tags": _tag_list(c.tags(), "key", "value"),
    }
    update = _service_common(c)
    update.pop("desiredCount", None)  # ignore_changes: the provider leaves it out of updates
    update["service"] = c.name
    update["forceNewDeployment"] = c.inputs.get("forceNewDeployment")
    return [
        c.request("ecs", "CreateService", create),
        c.request("ecs", "UpdateService", update),
    ]


def scalable_target(c: Context) -> list[Request]:
    mapping = {
        "serviceNamespace": "ServiceNamespace",
        "resourceId": "ResourceId",
        "scalableDimension": "ScalableDimension",
        "minCapacity": "MinCapacity",
        "maxCapacity": "MaxCapacity",
        "roleArn": "RoleARN",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY), mapping, "target")
    params["Tags"] = c.tags() or None
    return [c.request("application-autoscaling", "RegisterScalableTarget", params)]


def scaling_policy(c: Context) -> list[Request]:
    mapping = {
        "policyType": "PolicyType",
        "serviceNamespace": "ServiceNamespace",
        "resourceId": "ResourceId",
        "scalableDimension": "ScalableDimension",
        "stepScalingPolicyConfiguration": "StepScalingPolicyConfiguration",
    }
    params = rename(_without(c.inputs, {"name"}), mapping, "policy")
    step = params.get("StepScalingPolicyConfiguration")
    if step is not None:
        step = rename(
            step,
            {
                "adjustmentType": "AdjustmentType",
                "cooldown": "Cooldown",
                "metricAggregationType": "MetricAggregationType",
                "minAdjustmentMagnitude": "MinAdjustmentMagnitude",
                "stepAdjustments": "StepAdjustments",
            },
            "stepScalingPolicyConfiguration",
        )
        step["StepAdjustments"] = [_step(s) for s in step.get("StepAdjustments", [])]
        params["StepScalingPolicyConfiguration"] = step
    params["PolicyName"] = c.name
    return [c.request("application-autoscaling", "PutScalingPolicy", params)]


def _step(adjustment: dict[str, Any]) -> dict[str, Any]:
    step = rename(
        adjustment,
        {
            "metricIntervalLowerBound": "MetricIntervalLowerBound",
            "metricIntervalUpperBound": "MetricIntervalUpperBound",
            "scalingAdjustment": "ScalingAdjustment",
        },
        "stepAdjustment",
    )
    # The provider schema holds the bounds as strings; the API takes doubles.
    for bound in ("MetricIntervalLowerBound", "MetricIntervalUpperBound"):
        if bound in step:
            step[bound] = float(step[bound])
    return step


def scheduled_action(c: Context) -> list[Request]:
    mapping = {
        "serviceNamespace": "ServiceNamespace",
        "resourceId": "ResourceId",
        "scalableDimension": "ScalableDimension",
        "schedule": "Schedule",
        "timezone": "Timezone",
        "scalableTargetAction": "ScalableTargetAction",
    }
    params = rename(_without(c.inputs, {"name"}), mapping, "scheduledAction")
    params["ScalableTargetAction"] = rename(
        params["ScalableTargetAction"],
        {"minCapacity": "MinCapacity", "maxCapacity": "MaxCapacity"},
        "scalableTargetAction",
    )
    params["ScheduledActionName"] = c.name
    return [c.request("application-autoscaling", "PutScheduledAction", params)]


ALARM_FIELDS = {
    "alarmDescription": "AlarmDescription",
    "actionsEnabled": "ActionsEnabled",
    "okActions": "OKActions",
    "alarmActions": "AlarmActions",
    "insufficientDataActions": "InsufficientDataActions",
    "metricName": "MetricName",
    "namespace": "Namespace",
    "statistic": "Statistic",
    "extendedStatistic": "ExtendedStatistic",
    "dimensions": "Dimensions",
    "period": "Period",
    "unit": "Unit",
    "evaluationPeriods": "EvaluationPeriods",
    "datapointsToAlarm": "DatapointsToAlarm",
    "threshold": "Threshold",
    "comparisonOperator": "ComparisonOperator",
    "treatMissingData": "TreatMissingData",
    "evaluateLowSampleCountPercentiles": "EvaluateLowSampleCountPercentile",
    "metricQueries": "Metrics",
    "thresholdMetricId": "ThresholdMetricId",
}


def _dimensions(values: dict[str, str] | None) -> list[dict[str, str]] | None:
    return [{"Name": k, "Value": v} for k, v in values.items()] if values else None


def metric_alarm(c: Context) -> list[Request]:
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"name"}), ALARM_FIELDS, "alarm")
    params["Dimensions"] = _dimensions(params.get("Dimensions"))
    params["Metrics"] = [_metric_query(q) for q in params.get("Metrics", [])] or None
    params["AlarmName"] = c.name
    params["Tags"] = _tag_list(c.tags())
    return [c.request("cloudwatch", "PutMetricAlarm", params)]


def _metric_query(query: dict[str, Any]) -> dict[str, Any]:
    out = rename(
        query,
        {
            "id": "Id",
            "expression": "Expression",
            "label": "Label",
            "returnData": "ReturnData",
            "period": "Period",
            "accountId": "AccountId",
            "metric": "MetricStat",
        },
        "metricQuery",
    )
    if "MetricStat" in out:
        metric = rename(
            out["MetricStat"],
            {
                "namespace": "Namespace",
                "metricName": "MetricName",
                "dimensions": "Dimensions",
                "period": "Period",
                "stat": "Stat",
                "unit": "Unit",
            },
            "metricQuery.metric",
        )
        out["MetricStat"] = {
            "Metric": {
                "Namespace": metric.get("Namespace"),
                "MetricName": metric.get("MetricName"),
                "Dimensions": _dimensions(metric.get("Dimensions")),
            },
            "Period": metric.get("Period"),
            "Stat": metric.get("Stat"),
            "Unit": metric.get("Unit"),
        }
    return out


def dashboard(c: Context) -> list[Request]:
    params = rename(
        c.inputs, {"dashboardName": "DashboardName", "dashboardBody": "DashboardBody"}, "dashboard"
    )
    return [c.request("cloudwatch", "PutDashboard", params)]


def budget(c: Context) -> list[Request]:
    only(
        c.inputs,
        {
            "budgetType", "timeUnit", "limitAmount", "limitUnit", "costFilters",
            "notifications", "accountId", "name", *PROVIDER_ONLY,
        },
        "budget",
    )  # fmt: skip
    i = c.inputs
    body = {
        "BudgetName": c.name,
        "BudgetType": i["budgetType"],
        "TimeUnit": i["timeUnit"],
        "BudgetLimit": {"Amount": i.get("limitAmount"), "Unit": i.get("limitUnit")},
        "CostFilters": {f["name"]: f["values"] for f in i.get("costFilters", [])} or None,
    }
    params = {
        "AccountId": i.get("accountId", ACCOUNT),
        "Budget": body,
        "NotificationsWithSubscribers": [_notification(n) for n in i.get("notifications", [])],
        "ResourceTags": _tag_list(c.tags()),
    }
    return [c.request("budgets", "CreateBudget", params)]


def _notification(n: dict[str, Any]) -> dict[str, Any]:
    only(
        n,
        {
            "notificationType", "comparisonOperator", "threshold", "thresholdType",
            "subscriberSnsTopicArns", "subscriberEmailAddresses",
        },
        "budget.notification",
    )  # fmt: skip
    subscribers = [
        {"SubscriptionType": "SNS", "Address": a} for a in n.get("subscriberSnsTopicArns", [])
    ]
    subscribers += [
        {"SubscriptionType": "EMAIL", "Address": a} for a in n.get("subscriberEmailAddresses", [])
    ]
    return {
        "Notification": {
            "NotificationType": n["notificationType"],
            "ComparisonOperator": n["comparisonOperator"],
            "Threshold": n["threshold"],
            "ThresholdType": n.get("thresholdType"),
        },
        "Subscribers": subscribers,
    }


def vpc_endpoint(c: Context) -> list[Request]:
    mapping = {
        "vpcId": "VpcId",
        "serviceName": "ServiceName",
        "vpcEndpointType": "VpcEndpointType",
        "routeTableIds": "RouteTableIds",
        "subnetIds": "SubnetIds",
        "securityGroupIds": "SecurityGroupIds",
        "privateDnsEnabled": "PrivateDnsEnabled",
        "policy": "PolicyDocument",
        "ipAddressType": "IpAddressType",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY), mapping, "vpcEndpoint")
    tags = _tag_list(c.tags())
    if tags:
        params["TagSpecifications"] = [{"ResourceType": "vpc-endpoint", "Tags": tags}]
    return [c.request("ec2", "CreateVpcEndpoint", params)]


# Terraform queue argument → SQS attribute; values travel as strings.
QUEUE_ATTRIBUTES = {
    "visibilityTimeoutSeconds": "VisibilityTimeout",
    "messageRetentionSeconds": "MessageRetentionPeriod",
    "receiveWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
    "delaySeconds": "DelaySeconds",
    "maxMessageSize": "MaximumMessageSize",
    "sqsManagedSseEnabled": "SqsManagedSseEnabled",
    "kmsMasterKeyId": "KmsMasterKeyId",
    "kmsDataKeyReusePeriodSeconds": "KmsDataKeyReusePeriodSeconds",
    "redrivePolicy": "RedrivePolicy",
    "redriveAllowPolicy": "RedriveAllowPolicy",
    "policy": "Policy",
    "fifoQueue": "FifoQueue",
    "contentBasedDeduplication": "ContentBasedDeduplication",
}


def _attribute(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def queue(c: Context) -> list[Request]:
    attributes = rename(_without(c.inputs, PROVIDER_ONLY | {"name"}), QUEUE_ATTRIBUTES, "queue")
    params = {
        "QueueName": c.name,
        "Attributes": {k: _attribute(v) for k, v in attributes.items()},
        "tags": c.tags() or None,
    }
    return [c.request("sqs", "CreateQueue", params)]


def queue_policy(c: Context) -> list[Request]:
    i = rename(c.inputs, {"queueUrl": "QueueUrl", "policy": "Policy"}, "queuePolicy")
    params = {"QueueUrl": i["QueueUrl"], "Attributes": {"Policy": _policy_text(i["Policy"])}}
    return [c.request("sqs", "SetQueueAttributes", params)]


def redrive_allow(c: Context) -> list[Request]:
    i = rename(
        _without(c.inputs, {"region"}),
        {"queueUrl": "QueueUrl", "redriveAllowPolicy": "RedriveAllowPolicy"},
        "redriveAllowPolicy",
    )
    params = {
        "QueueUrl": i["QueueUrl"],
        "Attributes": {"RedriveAllowPolicy": i["RedriveAllowPolicy"]},
    }
    return [c.request("sqs", "SetQueueAttributes", params)]


def bucket_policy(c: Context) -> list[Request]:
    i = rename(
        _without(c.inputs, {"region"}), {"bucket": "Bucket", "policy": "Policy"}, "bucketPolicy"
    )
    return [
        c.request(
            "s3", "PutBucketPolicy", {"Bucket": i["Bucket"], "Policy": _policy_text(i["Policy"])}
        )
    ]


def bucket_lifecycle(c: Context) -> list[Request]:
    only(c.inputs, {"bucket", "rules", "expectedBucketOwner"}, "bucketLifecycle")
    rules = [_lifecycle_rule(r) for r in c.inputs["rules"]]
    params = {
        "Bucket": c.inputs["bucket"],
        "ExpectedBucketOwner": c.inputs.get("expectedBucketOwner"),
        "LifecycleConfiguration": {"Rules": rules},
    }
    return [c.request("s3", "PutBucketLifecycleConfiguration", params)]


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    out = rename(
        rule,
        {
            "id": "ID",
            "status": "Status",
            "filter": "Filter",
            "expiration": "Expiration",
            "abortIncompleteMultipartUpload": "AbortIncompleteMultipartUpload",
            "noncurrentVersionExpiration": "NoncurrentVersionExpiration",
        },
        "lifecycleRule",
    )
    if "Filter" in out:
        # An empty `filter {}` is sent as an empty prefix: the rule applies to every object.
        out["Filter"] = rename(out["Filter"], {"prefix": "Prefix"}, "filter") or {"Prefix": ""}
    if "Expiration" in out:
        out["Expiration"] = rename(
            out["Expiration"],
            {"days": "Days", "expiredObjectDeleteMarker": "ExpiredObjectDeleteMarker"},
            "expiration",
        )
    if "AbortIncompleteMultipartUpload" in out:
        out["AbortIncompleteMultipartUpload"] = rename(
            out["AbortIncompleteMultipartUpload"],
            {"daysAfterInitiation": "DaysAfterInitiation"},
            "abortIncompleteMultipartUpload",
        )
    if "NoncurrentVersionExpiration" in out:
        out["NoncurrentVersionExpiration"] = rename(
            out["NoncurrentVersionExpiration"],
            {"noncurrentDays": "NoncurrentDays"},
            "noncurrentVersionExpiration",
        )
    return out


def codebuild_project(c: Context) -> list[Request]:
    mapping = {
        "serviceRole": "serviceRole",
        "buildTimeout": "timeoutInMinutes",
        "queuedTimeout": "queuedTimeoutInMinutes",
        "source": "source",
        "artifacts": "artifacts",
        "environment": "environment",
        "logsConfig": "logsConfig",
        "description": "description",
        "encryptionKey": "encryptionKey",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"name"}), mapping, "project")
    params["source"] = rename(
        params["source"],
        {"type": "type", "location": "location", "buildspec": "buildspec"},
        "project.source",
    )
    params["artifacts"] = rename(params["artifacts"], {"type": "type"}, "project.artifacts")
    env = rename(
        params["environment"],
        {
            "type": "type",
            "image": "image",
            "computeType": "computeType",
            "privilegedMode": "privilegedMode",
            "imagePullCredentialsType": "imagePullCredentialsType",
            "environmentVariables": "environmentVariables",
        },
        "project.environment",
    )
    env["environmentVariables"] = [
        {
            "type": "PLAINTEXT",
            **rename(v, {"name": "name", "value": "value", "type": "type"}, "env"),
        }
        for v in env.get("environmentVariables", [])
    ] or None
    params["environment"] = env
    if "logsConfig" in params:
        logs = rename(params["logsConfig"], {"cloudwatchLogs": "cloudWatchLogs"}, "logsConfig")
        cw = rename(
            logs["cloudWatchLogs"],
            {"groupName": "groupName", "streamName": "streamName", "status": "status"},
            "cloudwatchLogs",
        )
        params["logsConfig"] = {"cloudWatchLogs": {"status": "ENABLED", **cw}}
    params["name"] = c.name
    params["tags"] = _tag_list(c.tags(), "key", "value")
    return [c.request("codebuild", "CreateProject", params)]


# KMS's own default for the deletion window when `deletion_window_in_days` is unset.
KMS_DEFAULT_PENDING_DAYS = 30


def kms_key(c: Context) -> list[Request]:
    mapping = {
        "description": "Description",
        "policy": "Policy",
        "keyUsage": "KeyUsage",
        "customerMasterKeySpec": "KeySpec",
        "multiRegion": "MultiRegion",
        "bypassPolicyLockoutSafetyCheck": "BypassPolicyLockoutSafetyCheck",
        "enableKeyRotation": "enableKeyRotation",
        "rotationPeriodInDays": "rotationPeriodInDays",
        "deletionWindowInDays": "deletionWindowInDays",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY), mapping, "kmsKey")
    rotate = params.pop("enableKeyRotation", False)
    period = params.pop("rotationPeriodInDays", None)
    window = params.pop("deletionWindowInDays", KMS_DEFAULT_PENDING_DAYS)
    if "Policy" in params:
        params["Policy"] = _policy_text(params["Policy"])
    params["Tags"] = _tag_list(c.tags(), "TagKey", "TagValue")
    key_id = c.out["id"]
    requests = [c.request("kms", "CreateKey", params)]
    if rotate:
        rotation = {"KeyId": key_id, "RotationPeriodInDays": period}
        requests.append(c.request("kms", "EnableKeyRotation", rotation))
    # `pulumi destroy` schedules the deletion; a window outside 7..30 fails only then.
    deletion = {"KeyId": key_id, "PendingWindowInDays": window}
    requests.append(c.request("kms", "ScheduleKeyDeletion", deletion))
    return requests


def iam_role(c: Context) -> list[Request]:
    mapping = {
        "assumeRolePolicy": "AssumeRolePolicyDocument",
        "description": "Description",
        "path": "Path",
        "maxSessionDuration": "MaxSessionDuration",
        "permissionsBoundary": "PermissionsBoundary",
    }
    values = _without(c.inputs, PROVIDER_ONLY | {"name", "namePrefix", "forceDetachPolicies"})
    params = rename(values, mapping, "role")
    params["AssumeRolePolicyDocument"] = _policy_text(params["AssumeRolePolicyDocument"])
    params["RoleName"] = c.name
    params["Tags"] = _tag_list(c.tags())
    return [c.request("iam", "CreateRole", params)]


def iam_role_policy(c: Context) -> list[Request]:
    only(c.inputs, {"role", "policy", "name", "namePrefix"}, "rolePolicy")
    params = {
        "RoleName": c.inputs["role"],
        "PolicyName": c.name,
        "PolicyDocument": _policy_text(c.inputs["policy"]),
    }
    return [c.request("iam", "PutRolePolicy", params)]


def iam_attachment(c: Context) -> list[Request]:
    params = rename(c.inputs, {"role": "RoleName", "policyArn": "PolicyArn"}, "attachment")
    return [c.request("iam", "AttachRolePolicy", params)]


def pull_through_cache_rule(c: Context) -> list[Request]:
    # The provider infers upstreamRegistry from the URL; it sends the fields it is given.
    mapping = {
        "ecrRepositoryPrefix": "ecrRepositoryPrefix",
        "upstreamRegistryUrl": "upstreamRegistryUrl",
        "credentialArn": "credentialArn",
        "customRoleArn": "customRoleArn",
        "upstreamRepositoryPrefix": "upstreamRepositoryPrefix",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY), mapping, "pullThroughCacheRule")
    return [c.request("ecr", "CreatePullThroughCacheRule", params)]


def iam_policy(c: Context) -> list[Request]:
    mapping = {"policy": "PolicyDocument", "description": "Description", "path": "Path"}
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"name", "namePrefix"}), mapping, "policy")
    params["PolicyDocument"] = _policy_text(params["PolicyDocument"])
    params["PolicyName"] = c.name
    params["Tags"] = _tag_list(c.tags())
    return [c.request("iam", "CreatePolicy", params)]


def instance_profile(c: Context) -> list[Request]:
    only(c.inputs, {"role", "path", "name", *PROVIDER_ONLY}, "instanceProfile")
    create = {
        "InstanceProfileName": c.name,
        "Path": c.inputs.get("path"),
        "Tags": _tag_list(c.tags()),
    }
    add = {"InstanceProfileName": c.name, "RoleName": c.inputs["role"]}
    return [
        c.request("iam", "CreateInstanceProfile", create),
        c.request("iam", "AddRoleToInstanceProfile", add),
    ]


def lambda_function(c: Context) -> list[Request]:
    mapping = {
        "runtime": "Runtime",
        "role": "Role",
        "handler": "Handler",
        "code": "Code",
        "description": "Description",
        "timeout": "Timeout",
        "memorySize": "MemorySize",
        "environment": "Environment",
        "reservedConcurrentExecutions": "ReservedConcurrentExecutions",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"name"}), mapping, "function")
    reserved = params.pop("ReservedConcurrentExecutions", None)
    # The provider zips the archive and sends its bytes; the mock only has the asset.
    assert isinstance(params["Code"], pulumi.AssetArchive), params["Code"]
    params["Code"] = {"ZipFile": b"PK"}
    if "Environment" in params:
        params["Environment"] = rename(
            params["Environment"], {"variables": "Variables"}, "environment"
        )
    params["FunctionName"] = c.name
    params["Tags"] = c.tags() or None
    requests = [c.request("lambda", "CreateFunction", params)]
    if reserved is not None:
        concurrency = {"FunctionName": c.name, "ReservedConcurrentExecutions": reserved}
        requests.append(c.request("lambda", "PutFunctionConcurrency", concurrency))
    return requests


def lambda_event_invoke_config(c: Context) -> list[Request]:
    mapping = {
        "functionName": "FunctionName",
        "maximumEventAgeInSeconds": "MaximumEventAgeInSeconds",
        "maximumRetryAttempts": "MaximumRetryAttempts",
        "qualifier": "Qualifier",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY), mapping, "functionEventInvokeConfig")
    return [c.request("lambda", "PutFunctionEventInvokeConfig", params)]


def schedule(c: Context) -> list[Request]:
    mapping = {
        "description": "Description",
        "scheduleExpression": "ScheduleExpression",
        "scheduleExpressionTimezone": "ScheduleExpressionTimezone",
        "flexibleTimeWindow": "FlexibleTimeWindow",
        "groupName": "GroupName",
        "state": "State",
        "target": "Target",
    }
    params = rename(_without(c.inputs, PROVIDER_ONLY | {"name", "namePrefix"}), mapping, "schedule")
    params["FlexibleTimeWindow"] = rename(
        params["FlexibleTimeWindow"],
        {"mode": "Mode", "maximumWindowInMinutes": "MaximumWindowInMinutes"},
        "flexibleTimeWindow",
    )
    target = rename(
        params["Target"],
        {"arn": "Arn", "roleArn": "RoleArn", "input": "Input", "retryPolicy": "RetryPolicy"},
        "target",
    )
    if "RetryPolicy" in target:
        target["RetryPolicy"] = rename(
            target["RetryPolicy"],
            {
                "maximumEventAgeInSeconds": "MaximumEventAgeInSeconds",
                "maximumRetryAttempts": "MaximumRetryAttempts",
            },
            "retryPolicy",
        )
    params["Target"] = target
    params["Name"] = c.name
    return [c.request("scheduler", "CreateSchedule", params)]


def bucket_notification(c: Context) -> list[Request]:
    # Only the EventBridge switch is mapped: queue, topic and Lambda configurations raise.
    i = rename(c.inputs, {"bucket": "Bucket", "eventbridge": "EventBridge"}, "bucketNotification")
    config = {"EventBridgeConfiguration": {}} if i.get("EventBridge") else {}
    params = {"Bucket": i["Bucket"], "NotificationConfiguration": config}
    return [c.request("s3", "PutBucketNotificationConfiguration", params)]


def event_rule(c: Context) -> list[Request]:
    i = rename(
        _without(c.inputs, PROVIDER_ONLY | {"name"}),
        {"description": "Description", "eventPattern": "EventPattern", "state": "State"},
        "eventRule",
    )
    params = {"Name": c.name, **i, "Tags": _tag_list(c.tags())}
    return [c.request("events", "PutRule", params)]


def event_target(c: Context) -> list[Request]:
    i = rename(
        _without(c.inputs, {"region"}),
        {"rule": "Rule", "arn": "Arn", "targetId": "Id", "eventBusName": "EventBusName"},
        "eventTarget",
    )
    target = {"Id": i["Id"], "Arn": i["Arn"]}
    params = {"Rule": i["Rule"], "EventBusName": i.get("EventBusName"), "Targets": [target]}
    return [c.request("events", "PutTargets", params)]


CONVERTERS: dict[str, Callable[[Context], list[Request]]] = {
    "aws:ecs/capacityProvider:CapacityProvider": capacity_provider,
    "aws:ecs/taskDefinition:TaskDefinition": task_definition,
    "aws:ecs/service:Service": service,
    "aws:appautoscaling/target:Target": scalable_target,
    "aws:appautoscaling/policy:Policy": scaling_policy,
    "aws:appautoscaling/scheduledAction:ScheduledAction": scheduled_action,
    "aws:cloudwatch/metricAlarm:MetricAlarm": metric_alarm,
    "aws:cloudwatch/dashboard:Dashboard": dashboard,
    "aws:budgets/budget:Budget": budget,
    "aws:ec2/vpcEndpoint:VpcEndpoint": vpc_endpoint,
    "aws:sqs/queue:Queue": queue,
    "aws:sqs/queuePolicy:QueuePolicy": queue_policy,
    "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy": redrive_allow,
    "aws:s3/bucketPolicy:BucketPolicy": bucket_policy,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": bucket_lifecycle,
    "aws:codebuild/project:Project": codebuild_project,
    "aws:kms/key:Key": kms_key,
    "aws:iam/role:Role": iam_role,
    "aws:iam/rolePolicy:RolePolicy": iam_role_policy,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": iam_attachment,
    "aws:iam/policy:Policy": iam_policy,
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": pull_through_cache_rule,
    "aws:iam/instanceProfile:InstanceProfile": instance_profile,
    "aws:lambda/function:Function": lambda_function,
    "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig": lambda_event_invoke_config,
    "aws:scheduler/schedule:Schedule": schedule,
    "aws:s3/bucketNotification:BucketNotification": bucket_notification,
    "aws:cloudwatch/eventRule:EventRule": event_rule,
    "aws:cloudwatch/eventTarget:EventTarget": event_target,
}


def default_tags(mocks: RecordingMocks) -> dict[str, str]:
    """The explicit provider's `defaultTags.tags` (empty when the graph has no provider)."""
    providers = mocks.of_type("pulumi:providers:aws")
    if not providers:
        return {}
    raw = providers[0].inputs.get("defaultTags") or "{}"
    return dict((json.loads(raw) if isinstance(raw, str) else raw).get("tags") or {})


def requests_for(mocks: ApiShapedMocks) -> list[Request]:
    """Every converted request of the graph, in registration order."""
    tags = default_tags(mocks)
    requests: list[Request] = []
    for resource in mocks.resources:
        convert = CONVERTERS.get(resource.type)
        if convert is not None:
            context = Context(resource, mocks.outputs[resource.name], tags)
            requests.extend(convert(context))
    return requests


# ---------------------------------------------------------------------------------------------
# 3. Validation: the model, then the documented rules it does not encode
# ---------------------------------------------------------------------------------------------


@cache
def _service_model(service: str) -> Any:
    return botocore.session.get_session().get_service_model(service)


def input_shape(request: Request) -> StructureShape:
    return _service_model(request.service).operation_model(request.operation).input_shape


def problems(request: Request) -> list[str]:
    """Every problem with one request, one line each; empty when AWS would accept its form."""
    shape = input_shape(request)
    params = coerce_integers(request.params, shape)
    found: list[str] = []
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        found += [line.strip() for line in report.generate_report().splitlines()]
    found += constraint_problems(params, shape, "")
    rule = RULES.get((request.service, request.operation))
    if rule is not None:
        found += rule(params)
    return [f"{request.label()}: {p}" for p in found]


def coerce_integers(value: Any, shape: Shape) -> Any:
    """The engine carries every number as a double; the provider's typed schema sends whole
    numbers as integers. A fractional value for an integer field stays, and fails."""
    if shape.type_name in ("integer", "long") and isinstance(value, float) and value.is_integer():
        return int(value)
    if shape.type_name == "structure" and isinstance(value, dict):
        return {
            k: coerce_integers(v, shape.members[k]) if k in shape.members else v
            for k, v in value.items()
        }
    if shape.type_name == "list" and isinstance(value, list):
        return [coerce_integers(v, shape.member) for v in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {k: coerce_integers(v, shape.value) for k, v in value.items()}
    return value


def constraint_problems(value: Any, shape: Shape, path: str) -> list[str]:
    """enum, min, max and pattern from the model, at every depth (ParamValidator checks
    `min` only, and neither enums nor patterns)."""
    found = _scalar_constraints(value, shape, path or shape.name)
    if shape.type_name == "structure" and isinstance(value, dict):
        for key, item in value.items():
            if key in shape.members:
                found += constraint_problems(item, shape.members[key], _join(path, key))
    elif shape.type_name == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            found += constraint_problems(item, shape.member, f"{path}[{index}]")
    elif shape.type_name == "map" and isinstance(value, dict):
        for key, item in value.items():
            found += constraint_problems(key, shape.key, f"{path}<key {key!r}>")
            found += constraint_problems(item, shape.value, f"{path}[{key!r}]")
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _scalar_constraints(value: Any, shape: Shape, path: str) -> list[str]:
    found: list[str] = []
    meta = shape.metadata
    size = _size(value, shape)
    if size is not None and "min" in meta and size < meta["min"]:
        found.append(f"{path}: {size} is below the model's min {meta['min']}")
    if size is not None and "max" in meta and size > meta["max"]:
        found.append(f"{path}: {size} is above the model's max {meta['max']}")
    enum = getattr(shape, "enum", None)  # only string shapes carry one
    if isinstance(value, str) and enum and value not in enum:
        found.append(f"{path}: {value!r} is not one of {list(enum)}")
    if isinstance(value, str) and "pattern" in meta:
        pattern = python_pattern(meta["pattern"])
        if not pattern.fullmatch(value):
            found.append(f"{path}: {_short(value)} does not match the model's {meta['pattern']!r}")
    return found


def _size(value: Any, shape: Shape) -> float | None:
    """What min/max bound: a string's or list's length, a map's entries, a number's value."""
    if shape.type_name in ("string", "list", "map") and isinstance(value, (str, list, dict)):
        return len(value)
    if shape.type_name in ("integer", "long", "double", "float") and isinstance(
        value, (int, float)
    ):
        return value
    return None


def _short(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


# Java regex syntax the models use that Python's `re` lacks: the class body each stands for.
# The Unicode classes are over-permissive outside ASCII only; every value sent is ASCII.
_JAVA_CLASSES = {
    r"\p{Print}": r"\x20-\x7E",
    r"\p{L}": r"A-Za-z\u00C0-\U0010FFFF",
    r"\p{M}": r"\u0300-\u036F",
    r"\p{N}": r"0-9",
    r"\p{P}": r"!-/:-@\[-`{-~",
    r"\p{S}": r"$+<=>^`|~",
    r"\p{Zs}": r" \u00A0\u2000-\u200A\u3000",
    r"\p{Z}": r" \u00A0\u2000-\u200A\u2028\u2029\u3000",
}
_JAVA_TEXT = (
    (r"\uD800\uDC00-\uDBFF\uDFFF", r"\U00010000-\U0010FFFF"),  # a surrogate-pair range
    (r"[\w-_]", r"[\w_-]"),  # Java reads a `-` after a class escape as a literal
)
_JAVA_CLASS = re.compile(r"\\p\{[A-Za-z]+\}")


@cache
def python_pattern(pattern: str) -> re.Pattern[str]:
    """A model pattern (Java syntax, matched whole) as a compiled Python regex."""
    text = pattern
    for java, python in _JAVA_TEXT:
        text = text.replace(java, python)
    text = _translate_classes(text)
    if "(?i)" in text[1:]:  # Java allows inline flags mid-pattern; Python wants them first
        text = "(?i)" + text.replace("(?i)", "")
    return re.compile(text, re.DOTALL)


def _translate_classes(text: str) -> str:
    """`\\p{..}` inside `[...]` becomes the class body, outside it a bracketed class."""
    out, index, in_class = [], 0, False
    while index < len(text):
        match = _JAVA_CLASS.match(text, index)
        if match:
            body = _JAVA_CLASSES[match.group()]
            out.append(body if in_class else f"[{body}]")
            index = match.end()
            continue
        char = text[index]
        if char == "\\":
            out.append(text[index : index + 2])
            index += 2
            continue
        in_class = (in_class or char == "[") and not (in_class and char == "]")
        out.append(char)
        index += 1
    return "".join(out)


# --- documented rules the model does not encode ------------------------------------------------

# https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-limits.html
MAX_STEP_ADJUSTMENTS = 20
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
TREAT_MISSING_DATA = ("breaching", "notBreaching", "ignore", "missing")
MAX_EVALUATION_SECONDS = 86_400
_METRIC_ID = re.compile(r"^[a-z][A-Za-z0-9_]*$")
_EXPRESSION_NAME = re.compile(r"\b[a-z][A-Za-z0-9_]*\b")
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_InfrastructureOptimization.html
SCALE_IN_AFTER_MAX = 3600
# IAM quotas, characters excluding whitespace.
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html
MAX_MANAGED_POLICY = 6144
MAX_INLINE_ROLE_POLICY = 10_240
MAX_TRUST_POLICY = 2048
# https://docs.aws.amazon.com/kms/latest/developerguide/resource-limits.html
MAX_KEY_POLICY_BYTES = 32_768
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-bucket-policies.html
MAX_BUCKET_POLICY_BYTES = 20_480
# https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-access.html
MAX_ENDPOINT_POLICY = 20_480
# RedriveAllowPolicy: `byQueue` names 1..10 source queues; the others name none.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
REDRIVE_PERMISSIONS = ("allowAll", "denyAll", "byQueue")
MAX_REDRIVE_SOURCES = 10
# SQS attribute ranges. https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
SQS_RANGES = {
    "VisibilityTimeout": (0, 43_200),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, 1_048_576),
}


def step_problems(params: dict[str, Any]) -> list[str]:
    """PutScalingPolicy StepAdjustment rules: no gaps, no overlaps, one open end each side."""
    config = params.get("StepScalingPolicyConfiguration")
    if not config:
        return []
    steps = config.get("StepAdjustments", [])
    found: list[str] = []
    if len(steps) > MAX_STEP_ADJUSTMENTS:
        found.append(f"{len(steps)} step adjustments; at most {MAX_STEP_ADJUSTMENTS}")
    lows = [s.get("MetricIntervalLowerBound") for s in steps]
    highs = [s.get("MetricIntervalUpperBound") for s in steps]
    if lows.count(None) > 1 or highs.count(None) > 1:
        found.append("more than one step with an open lower (or upper) bound")
    for low, high in zip(lows, highs, strict=True):
        if low is None and high is None:
            found.append("a step with both bounds open")
        elif low is not None and high is not None and low >= high:
            found.append(f"a step whose lower bound {low} is not below its upper bound {high}")
    if any(x is not None and x < 0 for x in lows) and None not in lows:
        found.append("a negative lower bound needs a step with an open lower bound")
    if any(x is not None and x > 0 for x in highs) and None not in highs:
        found.append("a positive upper bound needs a step with an open upper bound")
    ordered = sorted(steps, key=lambda s: s.get("MetricIntervalLowerBound", float("-inf")))
    for before, after in itertools.pairwise(ordered):
        high, low = before.get("MetricIntervalUpperBound"), after.get("MetricIntervalLowerBound")
        if high is not None and low is not None and high < low:
            found.append(f"gap between steps: nothing covers {high}..{low}")
        elif high is None or low is None or high > low:
            found.append(f"overlapping steps at {low}..{high}")
    return found


def alarm_problems(params: dict[str, Any]) -> list[str]:
    found: list[str] = []
    treat = params.get("TreatMissingData")
    if treat is not None and treat not in TREAT_MISSING_DATA:
        found.append(f"TreatMissingData {treat!r} is not one of {list(TREAT_MISSING_DATA)}")
    metrics = params.get("Metrics")
    if (metrics is None) == (params.get("MetricName") is None):
        found.append("exactly one of MetricName and Metrics must be set")
    periods = [params["Period"]] if "Period" in params else []
    if metrics:
        found += _metric_math_problems(metrics)
        periods += [q["MetricStat"]["Period"] for q in metrics if "MetricStat" in q]
    evaluations = params.get("EvaluationPeriods", 0)
    if periods and evaluations * max(periods) > MAX_EVALUATION_SECONDS:
        found.append(
            f"EvaluationPeriods × Period = {evaluations} × {max(periods)} "
            f"> {MAX_EVALUATION_SECONDS} s"
        )
    if params.get("DatapointsToAlarm", 0) > evaluations:
        found.append("DatapointsToAlarm is greater than EvaluationPeriods")
    return found


def _metric_math_problems(metrics: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    ids = [q.get("Id", "") for q in metrics]
    found += [f"metric id {i!r} must start lowercase, letters/digits/_" for i in ids
              if not _METRIC_ID.match(i)]  # fmt: skip
    if len(set(ids)) != len(ids):
        found.append(f"duplicate metric ids in {ids}")
    # ReturnData defaults to true: an alarm needs exactly one query that returns data.
    returning = [q.get("Id") for q in metrics if q.get("ReturnData", True)]
    if len(returning) != 1:
        found.append(f"exactly one query must have ReturnData true, got {returning}")
    for query in metrics:
        if ("MetricStat" in query) == ("Expression" in query):
            found.append(f"query {query.get('Id')!r} needs exactly one of MetricStat, Expression")
        for name in _EXPRESSION_NAME.findall(query.get("Expression", "")):
            if name not in ids:
                found.append(f"expression {query['Expression']!r} names unknown id {name!r}")
    return found


def capacity_provider_problems(params: dict[str, Any]) -> list[str]:
    optimization = params.get("managedInstancesProvider", {}).get("infrastructureOptimization")
    value = (optimization or {}).get("scaleInAfter")
    if value is not None and value != -1 and not 0 <= value <= SCALE_IN_AFTER_MAX:
        return [f"scaleInAfter {value} is neither -1 nor 0..{SCALE_IN_AFTER_MAX}"]
    return []


def policy_document_problems(
    text: str, limit: int, *, principal: bool = False, resource: bool = True
) -> list[str]:
    """An IAM policy document: JSON, the current grammar version, the size quota."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return [f"policy is not JSON: {error}"]
    found: list[str] = []
    if document.get("Version") != "2012-10-17":
        found.append(f"policy Version {document.get('Version')!r} is not '2012-10-17'")
    statements = document.get("Statement")
    statements = [statements] if isinstance(statements, dict) else statements or []
    if not statements:
        found.append("policy has no Statement")
    for index, statement in enumerate(statements):
        found += _statement_problems(index, statement, principal, resource)
    size = len(re.sub(r"\s", "", text))
    if size > limit:
        found.append(f"policy is {size} non-whitespace characters; the quota is {limit}")
    return found


def _statement_problems(
    index: int, statement: dict[str, Any], principal: bool, resource: bool
) -> list[str]:
    found: list[str] = []
    if statement.get("Effect") not in ("Allow", "Deny"):
        found.append(f"Statement[{index}].Effect {statement.get('Effect')!r}")
    if ("Action" in statement) == ("NotAction" in statement):
        found.append(f"Statement[{index}] needs exactly one of Action, NotAction")
    if principal and "Principal" not in statement:
        found.append(f"Statement[{index}] has no Principal")
    if resource and ("Resource" in statement) == ("NotResource" in statement):
        found.append(f"Statement[{index}] needs exactly one of Resource, NotResource")
    return found


def queue_problems(params: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for name, (low, high) in SQS_RANGES.items():
        value = params.get("Attributes", {}).get(name)
        if value is not None and not low <= int(value) <= high:
            found.append(f"{name} {value} is outside {low}..{high}")
    redrive = params.get("Attributes", {}).get("RedrivePolicy")
    if redrive is not None:
        count = json.loads(redrive).get("maxReceiveCount")
        if not isinstance(count, int) or not 1 <= count <= 1000:
            found.append(f"RedrivePolicy maxReceiveCount {count!r} is outside 1..1000")
    return found


def redrive_allow_problems(params: dict[str, Any]) -> list[str]:
    text = params.get("Attributes", {}).get("RedriveAllowPolicy")
    if text is None:
        return []
    allow = json.loads(text)
    permission, sources = allow.get("redrivePermission"), allow.get("sourceQueueArns", [])
    if permission not in REDRIVE_PERMISSIONS:
        return [f"RedriveAllowPolicy redrivePermission {permission!r} is not one of the three"]
    if permission == "byQueue" and not 1 <= len(sources) <= MAX_REDRIVE_SOURCES:
        return [f"RedriveAllowPolicy byQueue names {len(sources)} queues, not 1..10"]
    if permission != "byQueue" and sources:
        return [f"RedriveAllowPolicy {permission} names source queues"]
    return []


RULES: dict[tuple[str, str], Callable[[dict[str, Any]], list[str]]] = {
    ("application-autoscaling", "PutScalingPolicy"): step_problems,
    ("cloudwatch", "PutMetricAlarm"): alarm_problems,
    ("ecs", "CreateCapacityProvider"): capacity_provider_problems,
    ("iam", "CreateRole"): lambda p: policy_document_problems(
        p["AssumeRolePolicyDocument"], MAX_TRUST_POLICY, principal=True, resource=False
    ),
    ("iam", "PutRolePolicy"): lambda p: policy_document_problems(
        p["PolicyDocument"], MAX_INLINE_ROLE_POLICY
    ),
    ("iam", "CreatePolicy"): lambda p: policy_document_problems(
        p["PolicyDocument"], MAX_MANAGED_POLICY
    ),
    ("kms", "CreateKey"): lambda p: (
        policy_document_problems(p["Policy"], MAX_KEY_POLICY_BYTES, principal=True)
        if "Policy" in p
        else []
    ),
    ("sqs", "CreateQueue"): queue_problems,
    ("sqs", "SetQueueAttributes"): redrive_allow_problems,
    ("ec2", "CreateVpcEndpoint"): lambda p: (
        policy_document_problems(p["PolicyDocument"], MAX_ENDPOINT_POLICY, principal=True)
        if "PolicyDocument" in p
        else []
    ),
    ("s3", "PutBucketPolicy"): lambda p: policy_document_problems(
        p["Policy"], MAX_BUCKET_POLICY_BYTES, principal=True
    ),
}


def mutated(request: Request, change: Callable[[dict[str, Any]], None]) -> Request:
    """A deep copy of `request` with `change` applied to its params (for negative tests)."""
    params = copy.deepcopy(request.params)
    change(params)
    return Request(request.service, request.operation, params, request.source)
