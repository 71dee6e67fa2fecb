"""GpuCapacity: cluster, Managed Instances capacity provider from `tts-fleet:gpu`, IAM, SG.

Mocks do not validate enum values or that the AWS managed policies exist, so the accepted
values are pinned here as literals; only `pulumi preview`/`up` prove AWS accepts them.
"""

from __future__ import annotations

import json

import pulumi

from components.capacity import ON_DEMAND, SPOT, GpuCapacity, GpuCapacityArgs
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import policy
from tts_fleet.config.models import GpuConfig, Range

PROVIDER = "aws:ecs/capacityProvider:CapacityProvider"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
SUBNETS = ["subnet-0abc12345", "subnet-0def67890"]


def build(gpu: GpuConfig, host_idle_seconds: int = 300) -> RecordingMocks:
    args = GpuCapacityArgs(
        gpu=gpu, host_idle_seconds=host_idle_seconds, vpc_id="vpc-0abc12345", subnet_ids=SUBNETS
    )
    return run_program(lambda: GpuCapacity("gpu", args))


def test_capacity_option_constants_are_the_values_ecs_accepts() -> None:
    assert (ON_DEMAND, SPOT) == ("ON_DEMAND", "SPOT")


def test_capacity_provider_instance_requirements_come_from_config() -> None:
    gpu = GpuConfig(
        gpu_count=2,
        min_gpu_memory_gib=40,
        vcpu=Range(min=8, max=64),
        memory_gib=Range(min=32, max=256),
        capacity_type="spot",
        allowed_instance_types=("g6e.12xlarge", "g5.12xlarge"),
        storage_gib=250,
    )
    mocks = build(gpu, host_idle_seconds=900)
    provider = mocks.one(PROVIDER).inputs
    assert provider["cluster"] == "gpu-cluster"  # attached through its own `cluster` argument
    managed = provider["managedInstancesProvider"]
    template = managed["instanceLaunchTemplate"]
    assert template["instanceRequirements"] == {
        "acceleratorTypes": ["gpu"],
        "acceleratorManufacturers": ["nvidia"],
        "acceleratorCount": {"min": 2, "max": 2},
        "acceleratorTotalMemoryMib": {"min": 40 * 1024},
        "vcpuCount": {"min": 8, "max": 64},
        "memoryMib": {"min": 32 * 1024, "max": 256 * 1024},
        "allowedInstanceTypes": ["g6e.12xlarge", "g5.12xlarge"],
    }
    assert template["capacityOptionType"] == "SPOT"
    assert template["storageConfiguration"] == {"storageSizeGib": 250}
    assert template["networkConfiguration"] == {
        "subnets": SUBNETS,
        "securityGroups": ["gpu-sg-id"],
    }
    assert (
        template["ec2InstanceProfileArn"]
        == "arn:aws:iam:us-east-1:123456789012:gpu-instance-profile"
    )
    assert managed["infrastructureOptimization"] == {"scaleInAfter": 900}
    assert managed["autoRepairConfiguration"] == {"actionsStatus": "ENABLED"}
    assert managed["infrastructureRoleArn"] == (
        "arn:aws:iam:us-east-1:123456789012:gpu-infrastructure-role"
    )


def test_defaults_are_on_demand_without_pinned_types() -> None:
    template = (
        build(GpuConfig())
        .one(PROVIDER)
        .inputs["managedInstancesProvider"]["instanceLaunchTemplate"]
    )
    assert template["capacityOptionType"] == "ON_DEMAND"
    assert "allowedInstanceTypes" not in template["instanceRequirements"]
    assert template["instanceRequirements"]["acceleratorTotalMemoryMib"] == {"min": 20 * 1024}


def test_cluster_roles_and_no_cluster_capacity_providers_association() -> None:
    mocks = build(GpuConfig())
    assert mocks.counts() == {
        "tts-fleet:capacity:GpuCapacity": 1,
        "aws:ecs/cluster:Cluster": 1,
        "aws:ec2/securityGroup:SecurityGroup": 1,
        "aws:iam/role:Role": 2,
        ATTACH: 2,
        "aws:iam/instanceProfile:InstanceProfile": 1,
        "aws:iam/rolePolicy:RolePolicy": 1,
        PROVIDER: 1,
        "pulumi-python:dynamic:Resource": 1,  # CapacityProviderReady
    }  # no aws:ecs/clusterCapacityProviders (pulumi-aws#6061)
    cluster = mocks.one("aws:ecs/cluster:Cluster").inputs
    assert cluster["settings"] == [{"name": "containerInsights", "value": "enabled"}]
    attached = {a.inputs["role"]: a.inputs["policyArn"] for a in mocks.of_type(ATTACH)}
    roles = {r.name: r.inputs for r in mocks.of_type("aws:iam/role:Role")}
    instance_role = roles["gpu-instance-role"]
    assert instance_role["namePrefix"] == "ecsInstanceRole-"  # the managed policy's PassRole scope
    assert attached == {
        "gpu-instance-role": (
            "arn:aws:iam::aws:policy/AmazonECSInstanceRolePolicyForManagedInstances"
        ),
        "gpu-infrastructure-role": (
            "arn:aws:iam::aws:policy/AmazonECSInfrastructureRolePolicyForManagedInstances"
        ),
    }
    trust = {
        name: json.loads(r["assumeRolePolicy"])["Statement"][0]["Principal"]
        for name, r in roles.items()
    }
    assert trust == {
        "gpu-instance-role": {"Service": "ec2.amazonaws.com"},
        "gpu-infrastructure-role": {"Service": "ecs.amazonaws.com"},
    }
    assert policy(mocks.one("aws:iam/rolePolicy:RolePolicy"))["Statement"] == [
        {
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": "arn:aws:iam:us-east-1:123456789012:gpu-instance-role",
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        }
    ]


def test_security_group_has_no_ingress_and_https_only_egress() -> None:
    sg = build(GpuConfig()).one("aws:ec2/securityGroup:SecurityGroup").inputs
    assert sg.get("ingress", []) == []
    assert [(e["protocol"], e["fromPort"], e["toPort"], e["cidrBlocks"]) for e in sg["egress"]] == [
        ("tcp", 443, 443, ["0.0.0.0/0"])
    ]
    assert sg["vpcId"] == "vpc-0abc12345"


def test_capacity_provider_waits_for_its_roles_permissions() -> None:
    # depends_on is a resource option, invisible to MockResourceArgs: record it through a
    # transformation. Without it ECS could launch before, or outlive on destroy, the grants.
    waits: dict[str, list[str]] = {}

    def record(t: pulumi.ResourceTransformationArgs) -> None:
        waits[t.name] = sorted(d._name for d in (t.opts.depends_on or []))  # type: ignore[union-attr]
        return None

    args = GpuCapacityArgs(
        gpu=GpuConfig(), host_idle_seconds=300, vpc_id="vpc-0abc12345", subnet_ids=SUBNETS
    )
    run_program(lambda: GpuCapacity("gpu", args, pulumi.ResourceOptions(transformations=[record])))
    assert waits["gpu-gpu"] == [
        "gpu-infrastructure-passrole",
        "gpu-infrastructure-policy",
        "gpu-instance-policy",
    ]


class ChinaMocks(RecordingMocks):
    """The recording mocks in the `aws-cn` partition."""

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        if args.token == "aws:index/getPartition:getPartition":
            self.calls.append((args.token, dict(args.args)))
            return {"partition": "aws-cn", "dnsSuffix": "amazonaws.com.cn"}
        return super().call(args)


def test_managed_policy_arns_take_the_stacks_partition() -> None:
    mocks = ChinaMocks()
    pulumi.runtime.set_mocks(mocks, project="tts-fleet", stack="dev", preview=False)
    args = GpuCapacityArgs(
        gpu=GpuConfig(), host_idle_seconds=300, vpc_id="vpc-0abc12345", subnet_ids=SUBNETS
    )

    @pulumi.runtime.test
    def run() -> None:
        GpuCapacity("gpu", args)

    run()
    attached = sorted(a.inputs["policyArn"] for a in mocks.of_type(ATTACH))
    assert attached == [
        "arn:aws-cn:iam::aws:policy/AmazonECSInfrastructureRolePolicyForManagedInstances",
        "arn:aws-cn:iam::aws:policy/AmazonECSInstanceRolePolicyForManagedInstances",
    ]


def test_the_provider_name_is_given_out_only_through_the_active_waiter() -> None:
    seen: dict[str, str] = {}

    def program() -> None:
        args = GpuCapacityArgs(
            gpu=GpuConfig(), host_idle_seconds=300, vpc_id="vpc-0abc12345", subnet_ids=SUBNETS
        )
        capacity = GpuCapacity("gpu", args)
        capacity.capacity_provider_name.apply(lambda n: seen.update(name=n))

    mocks = run_program(program)
    [waiter] = mocks.of_type("pulumi-python:dynamic:Resource")
    assert waiter.name == "gpu-gpu-active"
    assert {k: waiter.inputs[k] for k in ("name", "cluster", "region")} == {
        "name": "gpu-gpu",
        "cluster": "gpu-cluster",
        "region": "us-east-1",
    }
    # The mock echoes the waiter's inputs; in an `up` its `name` resolves once ACTIVE.
    assert seen == {"name": "gpu-gpu"}


def test_capacity_and_preflight_share_one_requirements_source() -> None:
    from components import capacity
    from tts_fleet.config import gpu
    from tts_fleet.deploy import preflight

    assert capacity.instance_requirements is gpu.instance_requirements
    assert preflight.ec2_instance_requirements is gpu.ec2_instance_requirements
