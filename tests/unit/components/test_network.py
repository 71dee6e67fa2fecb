"""Network per mode: exact resource counts per type token and the inputs that matter.

Mocks cannot prove that AWS accepts these requests (e.g. that an endpoint service exists in
the region); they pin what the program asks for.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from components.network import Network, NetworkArgs, endpoint_policy, subnet_cidrs
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tts_fleet.config.models import NetworkConfig
from tts_fleet.config.topology import INTERFACE_ENDPOINTS, nat_count

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
IGW = "aws:ec2/internetGateway:InternetGateway"
EIP = "aws:ec2/eip:Eip"
NAT = "aws:ec2/natGateway:NatGateway"
RT = "aws:ec2/routeTable:RouteTable"
RTA = "aws:ec2/routeTableAssociation:RouteTableAssociation"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
SG = "aws:ec2/securityGroup:SecurityGroup"
COMPONENT = "tts-fleet:network:Network"


def build(cfg: NetworkConfig) -> tuple[RecordingMocks, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def program() -> pulumi.Output[Any]:
        net = Network("net", NetworkArgs(config=cfg))
        return pulumi.Output.all(net.vpc_id, net.private_subnet_ids).apply(
            lambda v: seen.update(vpc_id=v[0], subnets=v[1])
        )

    return run_program(program), seen


@pytest.mark.parametrize(
    ("az_count", "private", "public"),
    [
        (1, ["10.0.0.0/20"], ["10.0.128.0/20"]),
        (2, ["10.0.0.0/20", "10.0.16.0/20"], ["10.0.128.0/20", "10.0.144.0/20"]),
        (
            3,
            ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"],
            ["10.0.128.0/20", "10.0.144.0/20", "10.0.160.0/20"],
        ),
    ],
)
def test_subnet_cidrs(az_count: int, private: list[str], public: list[str]) -> None:
    assert subnet_cidrs("10.0.0.0/16", az_count) == (private, public)


def test_nat_single_has_exactly_one_nat_and_the_s3_gateway() -> None:
    mocks, seen = build(NetworkConfig(mode="nat", az_count=2, nat_gateways="single"))
    assert mocks.counts() == {
        COMPONENT: 1, VPC: 1, SUBNET: 4, IGW: 1, EIP: 1, NAT: 1, RT: 2, RTA: 4, ENDPOINT: 1,
    }  # fmt: skip
    s3 = mocks.one(ENDPOINT).inputs
    assert (s3["serviceName"], s3["vpcEndpointType"]) == ("com.amazonaws.us-east-1.s3", "Gateway")
    # The gateway serves the private route table (where the GPU hosts pull layers from).
    assert s3["routeTableIds"] == ["net-private-0-rt-id"]
    assert seen == {"vpc_id": "net-vpc-id", "subnets": ["net-private-0-id", "net-private-1-id"]}
    azs = [s.inputs["availabilityZone"] for s in mocks.of_type(SUBNET)]
    assert sorted(azs) == ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"]
    assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in mocks.of_type(SUBNET))


def test_nat_one_per_az_over_three_azs_has_three_nats_one_per_public_subnet() -> None:
    mocks, seen = build(NetworkConfig(mode="nat", az_count=3, nat_gateways="one-per-az"))
    assert mocks.counts() == {
        COMPONENT: 1, VPC: 1, SUBNET: 6, IGW: 1, EIP: 3, NAT: 3, RT: 4, RTA: 6, ENDPOINT: 1,
    }  # fmt: skip
    nats = {n.name: n.inputs["subnetId"] for n in mocks.of_type(NAT)}
    assert nats == {f"net-nat-{i}": f"net-public-{i}-id" for i in range(3)}
    private_routes = {
        rt.name: rt.inputs["routes"][0]["natGatewayId"]
        for rt in mocks.of_type(RT)
        if rt.name.startswith("net-private")
    }
    assert private_routes == {f"net-private-{i}-rt": f"net-nat-{i}-id" for i in range(3)}
    associations = {a.inputs["subnetId"]: a.inputs["routeTableId"] for a in mocks.of_type(RTA)}
    assert {s: associations[s] for s in seen["subnets"]} == {
        f"net-private-{i}-id": f"net-private-{i}-rt-id" for i in range(3)
    }
    public_rt = next(rt for rt in mocks.of_type(RT) if rt.name == "net-public-rt")
    assert public_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "gatewayId": "net-igw-id"}]


def test_endpoints_mode_has_no_internet_path_and_the_interface_endpoint_set() -> None:
    mocks, _ = build(NetworkConfig(mode="endpoints", az_count=2))
    assert mocks.counts() == {
        COMPONENT: 1, VPC: 1, SUBNET: 2, RT: 1, RTA: 2, SG: 1, ENDPOINT: 9,
    }  # fmt: skip
    assert NAT not in mocks.counts() and IGW not in mocks.counts()
    assert mocks.one(RT).inputs.get("routes", []) == []  # local route only
    interface = [
        e.inputs for e in mocks.of_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Interface"
    ]
    assert sorted(e["serviceName"] for e in interface) == sorted(
        f"com.amazonaws.us-east-1.{s}"
        for s in ("ecr.api", "ecr.dkr", "sqs", "logs", "ecs", "ecs-agent", "ecs-telemetry", "sts")
    )
    for endpoint in interface:
        assert endpoint["privateDnsEnabled"] is True
        assert endpoint["subnetIds"] == ["net-private-0-id", "net-private-1-id"]
        assert endpoint["securityGroupIds"] == ["net-endpoints-sg-id"]
    sg = mocks.one(SG).inputs
    assert [
        (r["protocol"], r["fromPort"], r["toPort"], r["cidrBlocks"]) for r in sg["ingress"]
    ] == [("tcp", 443, 443, ["10.0.0.0/16"])]


def test_existing_mode_creates_nothing_and_passes_the_ids_through() -> None:
    cfg = NetworkConfig(
        mode="existing", vpc_id="vpc-0abc12345", subnet_ids=("subnet-0abc12345", "subnet-0def67890")
    )
    mocks, seen = build(cfg)
    assert mocks.counts() == {COMPONENT: 1}
    assert seen == {"vpc_id": "vpc-0abc12345", "subnets": ["subnet-0abc12345", "subnet-0def67890"]}


@pytest.mark.parametrize(
    "cfg",
    [
        NetworkConfig(mode="nat", az_count=1, nat_gateways="single"),
        NetworkConfig(mode="nat", az_count=3, nat_gateways="single"),
        NetworkConfig(mode="nat", az_count=3, nat_gateways="one-per-az"),
        NetworkConfig(mode="endpoints", az_count=1),
        NetworkConfig(mode="endpoints", az_count=3),
    ],
    ids=lambda cfg: f"{cfg.mode}-{cfg.az_count}-{cfg.nat_gateways}",
)
def test_the_component_creates_what_the_topology_says(cfg: NetworkConfig) -> None:
    """The cost model prices tts_fleet.config.topology; this pins the component to it."""
    mocks, _ = build(cfg)
    interface = [e for e in mocks.of_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Interface"]
    services = INTERFACE_ENDPOINTS if cfg.mode == "endpoints" else ()
    assert len(interface) == len(services)
    assert sorted(e.inputs["serviceName"] for e in interface) == sorted(
        f"com.amazonaws.us-east-1.{s}" for s in services
    )
    assert len(mocks.of_type(NAT)) == (nat_count(cfg) if cfg.mode == "nat" else 0)


# ---- endpoint policies: this account's principals to this account's resources --------------

OWN = {
    "Sid": "ThisAccountsPrincipalsToThisAccountsResources",
    "Effect": "Allow",
    "Principal": {"AWS": "*"},
    "Action": "*",
    "Resource": "*",
    "Condition": {
        "StringEquals": {
            "aws:PrincipalAccount": "111122223333",
            "aws:ResourceAccount": "111122223333",
        }
    },
}


def layers(resource: str) -> dict[str, Any]:
    return {
        "Sid": "EcrImageLayers",
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": "s3:GetObject",
        "Resource": resource,
    }


@pytest.mark.parametrize(
    ("service", "partition", "region", "statements"),
    [
        ("sqs", "aws", "us-east-1", [OWN]),
        ("ecr.api", "aws", "us-east-1", [OWN]),
        (
            "s3",
            "aws",
            "eu-west-1",
            [OWN, layers("arn:aws:s3:::prod-eu-west-1-starport-layer-bucket/*")],
        ),
        (
            "s3",
            "aws-cn",
            "cn-north-1",
            [OWN, layers("arn:aws-cn:s3:::prod-cn-north-1-starport-layer-bucket/*")],
        ),
    ],
)
def test_endpoint_policy(
    service: str, partition: str, region: str, statements: list[dict[str, Any]]
) -> None:
    assert endpoint_policy(service, "111122223333", partition, region) == {
        "Version": "2012-10-17",
        "Statement": statements,
    }


def test_endpoints_mode_puts_a_policy_on_every_endpoint_that_takes_one() -> None:
    mocks, _ = build(NetworkConfig(mode="endpoints", az_count=2))
    policies = {
        e.name.removeprefix("net-"): json.loads(e.inputs["policy"])
        if "policy" in e.inputs
        else None
        for e in mocks.of_type(ENDPOINT)
    }
    account = "123456789012"  # the recording mocks' caller identity
    own = {**OWN, "Condition": {"StringEquals": {
        "aws:PrincipalAccount": account, "aws:ResourceAccount": account}}}  # fmt: skip
    s3 = layers("arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*")
    expected: dict[str, Any] = {
        short.replace(".", "-"): {"Version": "2012-10-17", "Statement": [own]}
        for short in INTERFACE_ENDPOINTS
    }
    expected |= {"ecs-agent": None, "ecs-telemetry": None}
    expected["s3"] = {"Version": "2012-10-17", "Statement": [own, s3]}
    assert policies == expected
    # ...and it tells the hosts' security group where HTTPS may go.
    group, prefix_list = egress_targets(NetworkConfig(mode="endpoints", az_count=2))
    assert (group, prefix_list) == ("net-endpoints-sg-id", "pl-net-s3")


def test_nat_mode_leaves_the_s3_gateway_open_and_names_no_egress_targets() -> None:
    mocks, _ = build(NetworkConfig(mode="nat", az_count=2))
    assert "policy" not in mocks.one(ENDPOINT).inputs
    assert egress_targets(NetworkConfig(mode="nat", az_count=2)) == (None, None)


def egress_targets(cfg: NetworkConfig) -> tuple[Any, Any]:
    seen: dict[str, Any] = {}

    def program() -> None:
        net = Network("net", NetworkArgs(config=cfg))
        targets = {"group": net.endpoints_security_group_id, "s3": net.s3_prefix_list_id}
        for key, value in targets.items():
            seen[key] = None
            if value is not None:
                value.apply(lambda v, key=key: seen.update({key: v}))

    run_program(program)
    return seen["group"], seen["s3"]
