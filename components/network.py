"""Network: where the GPU hosts and tasks live — `nat`, `endpoints` or `existing` (DESIGN §3.1).

- `nat`: VPC, public + private subnets over `azCount` AZs, an internet gateway, NAT `single` or
  `one-per-az`, and the free S3 gateway endpoint (ECR layers come from S3, so a 14 GB image
  pull does not pay NAT data processing).
- `endpoints`: private subnets only, no internet route at all; the S3 gateway endpoint plus the
  interface endpoints (private DNS) that ECS Managed Instances hosts and tasks need. Each
  endpoint that takes a policy admits only this account's principals to this account's
  resources (`endpoint_policy`), and the hosts' security group sends HTTPS only to the
  endpoints' security group and the S3 prefix list (components/capacity.py).
- `existing`: nothing is created; the given VPC and private subnets are used as they are.
"""

from __future__ import annotations

import ipaddress

import pulumi
import pulumi_aws as aws

from components.args import ComponentArgs, StrInput
from tts_fleet.config.models import NetworkConfig

# What this component creates per config is in tts_fleet.config.topology (the cost model
# reads the same facts): the NAT gateway count and the interface endpoint services.
from tts_fleet.config.topology import INTERFACE_ENDPOINTS, nat_count

DEFAULT_CIDR = "10.0.0.0/16"
# Each subnet is a /20 (4,091 usable addresses): private subnets take the first slots, public
# subnets start at PUBLIC_OFFSET, so azCount ≤ 6 (config limit) never overlaps.
SUBNET_PREFIX = 20
PUBLIC_OFFSET = 8
HTTPS = 443
# ECR keeps image layers in this AWS-owned bucket; a pull fetches them through the S3 gateway
# endpoint by presigned URLs that an ECR account signs, so no account condition can apply.
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html#ecr-minimum-s3-perms
ECR_LAYER_BUCKET = "prod-{region}-starport-layer-bucket"
# No endpoint policy on the ECS agent's two endpoints: AWS's endpoint-policy examples do not
# cover them (whether they accept one could not be checked from here), and they carry only the
# hosts' own agent sessions with this cluster. Every other endpoint gets one.
WITHOUT_POLICY = ("ecs-agent", "ecs-telemetry")


def endpoint_policy(service: str, account: str, partition: str, region: str) -> dict:
    """This account's principals to this account's resources only: the pattern of AWS's data
    perimeter examples (aws-samples/data-perimeter-policy-examples, vpc_endpoint_policies:
    `AllowRequestsByOrgsIdentitiesToOrgsResources`, by account here instead of organization),
    plus, for S3, ECR's layer bucket (its `AllowRequestsToAWSOwnedResources`). A request of
    the worker or the hosts (SQS, S3 outputs, ECR pulls, CloudWatch Logs, ECS) is made with
    this account's roles on this account's queue, bucket, repository, log groups and cluster.
    Another account's bucket or queue is out of reach: the obvious exfiltration path."""
    statements: list[dict] = [
        {
            "Sid": "ThisAccountsPrincipalsToThisAccountsResources",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": "*",
            "Resource": "*",
            "Condition": {
                "StringEquals": {"aws:PrincipalAccount": account, "aws:ResourceAccount": account}
            },
        }
    ]
    if service == "s3":
        statements.append(
            {
                "Sid": "EcrImageLayers",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "s3:GetObject",
                "Resource": f"arn:{partition}:s3:::{ECR_LAYER_BUCKET.format(region=region)}/*",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def subnet_cidrs(vpc_cidr: str, az_count: int) -> tuple[list[str], list[str]]:
    """(private, public) /20 CIDRs for `az_count` AZs inside `vpc_cidr`."""
    blocks = list(ipaddress.ip_network(vpc_cidr).subnets(new_prefix=SUBNET_PREFIX))
    private = [str(blocks[i]) for i in range(az_count)]
    public = [str(blocks[PUBLIC_OFFSET + i]) for i in range(az_count)]
    return private, public


class NetworkArgs(ComponentArgs):
    config: NetworkConfig
    cidr: str = DEFAULT_CIDR
    region: str | pulumi.Output[str] | None = None  # None: looked up when first needed
    # The stack's account and partition for the endpoint policies (else looked up here).
    account_id: StrInput | None = None
    partition: StrInput | None = None


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    # `endpoints` mode only (else None): where the hosts' HTTPS may go.
    endpoints_security_group_id: pulumi.Output[str] | None
    s3_prefix_list_id: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:network:Network", name, None, opts)
        self._name = name
        self._args = args
        self._region = None if args.region is None else pulumi.Output.from_input(args.region)
        cfg = args.config
        self.endpoints_security_group_id = self.s3_prefix_list_id = None
        if cfg.mode == "existing":
            self.vpc_id = pulumi.Output.from_input(cfg.vpc_id)
            self.private_subnet_ids = pulumi.Output.from_input(list(cfg.subnet_ids))
        else:
            self._build_vpc(cfg)
        self.register_outputs(
            {"vpc_id": self.vpc_id, "private_subnet_ids": self.private_subnet_ids}
        )

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _build_vpc(self, cfg: NetworkConfig) -> None:
        name, child = self._name, self._child()
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=self._args.cidr,
            enable_dns_support=True,  # interface endpoints' private DNS needs both
            enable_dns_hostnames=True,
            tags={"Name": f"{name}-vpc"},
            opts=child,
        )
        azs = aws.get_availability_zones_output(
            state="available", opts=pulumi.InvokeOptions(parent=self)
        ).names
        private_cidrs, public_cidrs = subnet_cidrs(self._args.cidr, cfg.az_count)
        private = [
            self._subnet(f"private-{i}", vpc, cidr, azs[i]) for i, cidr in enumerate(private_cidrs)
        ]
        if cfg.mode == "nat":
            public = [
                self._subnet(f"public-{i}", vpc, cidr, azs[i])
                for i, cidr in enumerate(public_cidrs)
            ]
            tables = self._nat_routing(vpc, public, nat_count(cfg))
        else:
            tables = [aws.ec2.RouteTable(f"{name}-private-rt", vpc_id=vpc.id, opts=child)]
            self.endpoints_security_group_id = self._interface_endpoints(vpc, private)
        for i, subnet in enumerate(private):
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{i}-rta",
                subnet_id=subnet.id,
                route_table_id=tables[i % len(tables)].id,
                opts=child,
            )
        s3 = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=self._service("s3"),
            vpc_endpoint_type="Gateway",
            route_table_ids=[t.id for t in tables],
            policy=self._policy("s3") if cfg.mode == "endpoints" else None,
            opts=child,
        )
        if cfg.mode == "endpoints":
            self.s3_prefix_list_id = s3.prefix_list_id
        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private])

    def _subnet(
        self, suffix: str, vpc: aws.ec2.Vpc, cidr: str, az: pulumi.Input[str]
    ) -> aws.ec2.Subnet:
        return aws.ec2.Subnet(
            f"{self._name}-{suffix}",
            vpc_id=vpc.id,
            cidr_block=cidr,
            availability_zone=az,
            map_public_ip_on_launch=False,  # nothing here needs a public address
            tags={"Name": f"{self._name}-{suffix}"},
            opts=self._child(),
        )

    def _region_output(self) -> pulumi.Output[str]:
        if self._region is None:
            self._region = aws.get_region_output(opts=pulumi.InvokeOptions(parent=self)).region
        return self._region

    def _service(self, short: str) -> pulumi.Output[str]:
        return self._region_output().apply(lambda r: f"com.amazonaws.{r}.{short}")

    def _policy(self, short: str) -> pulumi.Output[str] | None:
        if short in WITHOUT_POLICY:
            return None
        invoke = pulumi.InvokeOptions(parent=self)
        account = self._args.account_id or aws.get_caller_identity_output(opts=invoke).account_id
        partition = self._args.partition or aws.get_partition_output(opts=invoke).partition
        return pulumi.Output.json_dumps(
            pulumi.Output.all(account, partition, self._region_output()).apply(
                lambda v: endpoint_policy(short, v[0], v[1], v[2])
            )
        )

    def _nat_routing(
        self, vpc: aws.ec2.Vpc, public: list[aws.ec2.Subnet], nats: int
    ) -> list[aws.ec2.RouteTable]:
        """IGW + public route table + NAT gateways; returns one private table per NAT."""
        name, child = self._name, self._child()
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            opts=child,
        )
        for i, subnet in enumerate(public):
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{i}-rta",
                subnet_id=subnet.id,
                route_table_id=public_rt.id,
                opts=child,
            )
        tables = []
        for i in range(nats):
            eip = aws.ec2.Eip(f"{name}-nat-{i}-eip", domain="vpc", opts=child)
            nat = aws.ec2.NatGateway(
                f"{name}-nat-{i}",
                allocation_id=eip.id,
                subnet_id=public[i].id,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
            )
            tables.append(
                aws.ec2.RouteTable(
                    f"{name}-private-{i}-rt",
                    vpc_id=vpc.id,
                    routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                    opts=child,
                )
            )
        return tables

    def _interface_endpoints(
        self, vpc: aws.ec2.Vpc, private: list[aws.ec2.Subnet]
    ) -> pulumi.Output[str]:
        name, child = self._name, self._child()
        # The endpoints' own SG: HTTPS in from this VPC only. The worker SG still has no ingress.
        sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints-sg",
            vpc_id=vpc.id,
            description="VPC interface endpoints: HTTPS from inside the VPC only",
            ingress=[
                {
                    "protocol": "tcp",
                    "from_port": HTTPS,
                    "to_port": HTTPS,
                    "cidr_blocks": [vpc.cidr_block],
                    "description": "HTTPS from the VPC",
                }
            ],
            opts=child,
        )
        for short in INTERFACE_ENDPOINTS:
            aws.ec2.VpcEndpoint(
                f"{name}-{short.replace('.', '-')}",
                vpc_id=vpc.id,
                service_name=self._service(short),
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[s.id for s in private],
                security_group_ids=[sg.id],
                policy=self._policy(short),
                opts=child,
            )
        return sg.id
