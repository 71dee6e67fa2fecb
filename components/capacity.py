"""GpuCapacity: the ECS cluster and the ECS Managed Instances capacity provider for GPU hosts.

The capacity provider is attached through its own `cluster` argument. It is deliberately NOT
also listed in `aws.ecs.ClusterCapacityProviders`: PutClusterCapacityProviders rejects Managed
Instances providers and pulumi-aws#6061 fails while the provider is not yet ACTIVE.

Creating a Managed Instances provider returns while it is still PROVISIONING, so
`capacity_provider_name` is the output of a CapacityProviderReady waiter
(components/capacity_ready.py): whatever takes the name (the service) starts once it is ACTIVE.

Managed Instances needs two roles: an infrastructure role ECS assumes to launch and terminate
hosts, and an instance profile for the hosts' ECS agent. The AWS managed policies below are
the ones the ECS developer guide names for Managed Instances; their ARNs (no `service-role/`
path) could not be checked against AWS from this machine — `pulumi preview` will say if wrong.
"""

from __future__ import annotations

from typing import cast

import pulumi
import pulumi_aws as aws
from pulumi_aws.ecs import (
    CapacityProviderManagedInstancesProviderInstanceLaunchTemplateInstanceRequirementsArgsDict as Requirements,  # noqa: E501
)

from components.args import ComponentArgs, StrInput
from components.capacity_ready import CapacityProviderReady
from components.iam import assume_role
from tts_fleet.config.gpu import instance_requirements
from tts_fleet.config.models import GpuConfig

INFRASTRUCTURE_POLICY = "AmazonECSInfrastructureRolePolicyForManagedInstances"
INSTANCE_POLICY = "AmazonECSInstanceRolePolicyForManagedInstances"
# The managed infrastructure policy scopes iam:PassRole to role/ecsInstanceRole*, so the
# instance role's name must start with this (ECS guide, "Managed Instances instance profile").
INSTANCE_ROLE_PREFIX = "ecsInstanceRole-"
# Valid capacity_option_type values (pulumi-aws docs; mocks do not validate enums).
ON_DEMAND = "ON_DEMAND"
SPOT = "SPOT"
CAPACITY_OPTION = {"on-demand": ON_DEMAND, "spot": SPOT}
AUTO_REPAIR_ENABLED = "ENABLED"
HTTPS = 443


def managed_policy_arn(name: str, partition: str = "aws") -> str:
    """An AWS managed policy's ARN in the stack's partition (`aws`, `aws-cn`, `aws-us-gov`)."""
    return f"arn:{partition}:iam::aws:policy/{name}"


def managed_instances_provider(
    args: GpuCapacityArgs,
    infrastructure_role_arn: pulumi.Input[str],
    instance_profile_arn: pulumi.Input[str],
    security_group_id: pulumi.Input[str],
) -> aws.ecs.CapacityProviderManagedInstancesProviderArgsDict:
    """The `managed_instances_provider` block: where, what and how long hosts live."""
    # The requirements are plain data from tts_fleet/config/gpu.py (no pulumi there), in the
    # provider's shape; tests/unit/components/test_capacity.py checks them against its schema.
    requirements = cast(Requirements, instance_requirements(args.gpu))
    return {
        "infrastructure_role_arn": infrastructure_role_arn,
        "propagate_tags": "CAPACITY_PROVIDER",
        "auto_repair_configuration": {"actions_status": AUTO_REPAIR_ENABLED},
        # How long an idle GPU host (and its pulled 14 GB image) is kept for reuse.
        "infrastructure_optimization": {"scale_in_after": args.host_idle_seconds},
        "instance_launch_template": {
            "ec2_instance_profile_arn": instance_profile_arn,
            "capacity_option_type": CAPACITY_OPTION[args.gpu.capacity_type],
            "network_configuration": {
                "subnets": args.subnet_ids,
                "security_groups": [security_group_id],
            },
            "storage_configuration": {"storage_size_gib": args.gpu.storage_gib},
            "instance_requirements": requirements,
            # `gpu.localStorage`: the data volume (image layers, the task's /data) on the
            # instance's NVMe; the requirements above admit only types that have it.
            "local_storage_configuration": (
                {"use_local_storage": True} if args.gpu.local_storage else None
            ),
        },
    }


class EndpointEgress(ComponentArgs):
    """Where the hosts' HTTPS goes in `network.mode: endpoints` (no internet route there)."""

    security_group_id: StrInput  # the interface endpoints' security group
    s3_prefix_list_id: StrInput  # the S3 gateway endpoint's prefix list


def egress_rules(
    endpoints: EndpointEgress | None,
) -> list[aws.ec2.SecurityGroupEgressArgsDict]:
    """HTTPS to the AWS APIs: through the VPC's endpoints only when it has them, else anywhere
    (`nat` and `existing` reach the APIs through their own routes)."""
    https: aws.ec2.SecurityGroupEgressArgsDict = {
        "protocol": "tcp",
        "from_port": HTTPS,
        "to_port": HTTPS,
    }
    if endpoints is None:
        return [
            {
                **https,
                "cidr_blocks": ["0.0.0.0/0"],
                "description": "AWS APIs: SQS, S3, ECR, ECS, CloudWatch Logs",
            }
        ]
    return [
        {
            **https,
            "security_groups": [endpoints.security_group_id],
            "description": "AWS APIs through the interface endpoints: SQS, ECR, ECS, Logs, STS",
        },
        {
            **https,
            "prefix_list_ids": [endpoints.s3_prefix_list_id],
            "description": "S3 through the gateway endpoint: outputs and ECR image layers",
        },
    ]


class GpuCapacityArgs(ComponentArgs):
    gpu: GpuConfig
    host_idle_seconds: int
    vpc_id: str | pulumi.Output[str]
    subnet_ids: list[str] | pulumi.Output[list[str]]
    # The stack's partition and region as Platform looked them up once; looked up here only
    # when the component is built on its own.
    partition: str | pulumi.Output[str] | None = None
    region: str | pulumi.Output[str] | None = None
    endpoints: EndpointEgress | None = None  # `network.mode: endpoints`: egress to them only


class GpuCapacity(pulumi.ComponentResource):
    cluster_name: pulumi.Output[str]
    cluster_arn: pulumi.Output[str]
    capacity_provider_name: pulumi.Output[str]
    security_group_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: GpuCapacityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:capacity:GpuCapacity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster = aws.ecs.Cluster(
            f"{name}-cluster",
            settings=[{"name": "containerInsights", "value": "enabled"}],
            opts=child,
        )
        sg = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="GPU hosts and worker tasks: no ingress, HTTPS egress only",
            egress=egress_rules(args.endpoints),
            opts=child,
        )
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition: pulumi.Output[str] = (
            pulumi.Output.from_input(args.partition)
            if args.partition is not None
            else aws.get_partition_output(opts=invoke).partition
        )
        region = args.region or aws.get_region_output(opts=invoke).region
        infrastructure_role, profile, grants = self._roles(name, partition)
        # The provider must not start (or, on destroy, outlive) its roles' permissions:
        # without them ECS can neither launch nor terminate the GPU hosts.
        provider = aws.ecs.CapacityProvider(
            f"{name}-gpu",
            cluster=cluster.name,
            managed_instances_provider=managed_instances_provider(
                args, infrastructure_role.arn, profile.arn, sg.id
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=grants),
        )
        ready = CapacityProviderReady(
            f"{name}-gpu-active",
            name=provider.name,
            cluster=cluster.name,
            region=region,
            opts=child,
        )
        self.cluster_name, self.cluster_arn = cluster.name, cluster.arn
        self.capacity_provider_name = ready.name
        self.security_group_id = sg.id
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "cluster_arn": self.cluster_arn,
                "capacity_provider_name": self.capacity_provider_name,
                "security_group_id": self.security_group_id,
            }
        )

    def _roles(
        self, name: str, partition: pulumi.Output[str]
    ) -> tuple[aws.iam.Role, aws.iam.InstanceProfile, list[pulumi.Resource]]:
        child = pulumi.ResourceOptions(parent=self)
        instance_role = aws.iam.Role(
            f"{name}-instance-role",
            name_prefix=INSTANCE_ROLE_PREFIX,
            assume_role_policy=assume_role("ec2.amazonaws.com"),
            opts=child,
        )
        instance_grant = aws.iam.RolePolicyAttachment(
            f"{name}-instance-policy",
            role=instance_role.name,
            policy_arn=partition.apply(lambda p: managed_policy_arn(INSTANCE_POLICY, p)),
            opts=child,
        )
        profile = aws.iam.InstanceProfile(
            f"{name}-instance-profile", role=instance_role.name, opts=child
        )
        infrastructure_role = aws.iam.Role(
            f"{name}-infrastructure-role",
            assume_role_policy=assume_role("ecs.amazonaws.com"),
            opts=child,
        )
        infrastructure_grant = aws.iam.RolePolicyAttachment(
            f"{name}-infrastructure-policy",
            role=infrastructure_role.name,
            policy_arn=partition.apply(lambda p: managed_policy_arn(INFRASTRUCTURE_POLICY, p)),
            opts=child,
        )
        # Belt and braces: an explicit PassRole for exactly this instance role, so the
        # capacity provider works even if the managed policy's name pattern changes.
        passrole = aws.iam.RolePolicy(
            f"{name}-infrastructure-passrole",
            role=infrastructure_role.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": "iam:PassRole",
                            "Resource": instance_role.arn,
                            "Condition": {
                                "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
                            },
                        }
                    ],
                }
            ),
            opts=child,
        )
        return infrastructure_role, profile, [instance_grant, infrastructure_grant, passrole]
