"""`tts-fleet preflight`: eligible types, offerings, quota, reachable workers and price.

moto answers DescribeInstanceTypes, DescribeInstanceTypeOfferings, DescribeAvailabilityZones
and DescribeSubnets from its recorded EC2 data. It implements neither
GetInstanceTypesFromInstanceRequirements nor EC2's Service Quotas, so those come from
botocore's Stubber, which checks each request and each canned response against the service
model (the responses below have the real shape).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from click.testing import CliRunner
from moto import mock_aws

from tts_fleet.cli.main import cli
from tts_fleet.cli.preflight import PreflightHooks
from tts_fleet.config.gpu import ec2_instance_requirements as instance_requirements
from tts_fleet.config.gpu import instance_requirements as provider_requirements
from tts_fleet.config.models import GpuConfig, StackConfig
from tts_fleet.config.stack_file import StackFile
from tts_fleet.deploy.preflight import ARCHITECTURES, VIRTUALIZATION, render, run_preflight

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
QUOTA_NAMES = {
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-417A185B": "Running On-Demand P instances",
    "L-7212CCBC": "All P Spot Instance Requests",
}


@pytest.fixture(autouse=True)
def fake_credentials(in_process_aws: None) -> None:
    """Every test here runs moto in process (or botocore's Stubber): never a real account."""


@pytest.fixture
def moto_ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


class SplitEc2:
    """moto's EC2 client, except the one call moto lacks, which the Stubber answers."""

    def __init__(self, moto: Any, stubbed: Any) -> None:
        self._moto, self._stubbed = moto, stubbed

    def get_paginator(self, name: str) -> Any:
        client = (
            self._stubbed if name == "get_instance_types_from_instance_requirements" else self._moto
        )
        return client.get_paginator(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._moto, name)


def requirements_stub(gpu: GpuConfig, pages: list[list[str]]) -> tuple[Any, Stubber]:
    client = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(client)
    for index, names in enumerate(pages):
        expected: dict[str, Any] = {
            "ArchitectureTypes": ARCHITECTURES,
            "VirtualizationTypes": VIRTUALIZATION,
            "InstanceRequirements": instance_requirements(gpu),
        }
        if index:
            expected["NextToken"] = f"page-{index}"
        response: dict[str, Any] = {"InstanceTypes": [{"InstanceType": n} for n in names]}
        if index + 1 < len(pages):
            response["NextToken"] = f"page-{index + 1}"
        stubber.add_response("get_instance_types_from_instance_requirements", response, expected)
    stubber.activate()
    return client, stubber


def quota_response(code: str, value: float) -> dict[str, Any]:
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:123456789012:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": QUOTA_NAMES[code],
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    }


def quotas_stub(values: dict[str, float | str]) -> tuple[Any, Stubber]:
    """A Service Quotas client answering `values` in order (a string is an error code)."""
    client = boto3.client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    for code, value in values.items():
        expected = {"ServiceCode": "ec2", "QuotaCode": code}
        if isinstance(value, str):
            stubber.add_client_error("get_service_quota", value, "denied", 400, None, expected)
        else:
            stubber.add_response("get_service_quota", quota_response(code, value), expected)
    stubber.activate()
    return client, stubber


def prod() -> StackConfig:
    return StackFile.load(ROOT / "Pulumi.prod.yaml").config()


def dev() -> StackConfig:
    return StackFile.load(ROOT / "Pulumi.dev.yaml").config()


def test_the_requirements_are_the_capacity_providers_in_ec2_names() -> None:
    gpu = GpuConfig.model_validate(
        {"minGpuMemoryGib": 40, "gpuCount": 2, "allowedInstanceTypes": ["g6e.12xlarge"]}
    )
    provider = provider_requirements(gpu)

    def pair(value: dict[str, int]) -> dict[str, int]:
        return {k.capitalize(): v for k, v in value.items()}

    assert instance_requirements(gpu) == {
        "AcceleratorTypes": provider["accelerator_types"],
        "AcceleratorManufacturers": provider["accelerator_manufacturers"],
        "AcceleratorCount": pair(provider["accelerator_count"]),
        "AcceleratorTotalMemoryMiB": pair(provider["accelerator_total_memory_mib"]),
        "VCpuCount": pair(provider["vcpu_count"]),
        "MemoryMiB": pair(provider["memory_mib"]),
        "AllowedInstanceTypes": provider["allowed_instance_types"],
    }


def test_prod_on_demand_quota_below_max_workers_is_warned(moto_ec2: Any) -> None:
    cfg = prod()
    requirements, req_stub = requirements_stub(
        cfg.gpu, [["g6e.2xlarge", "g6e.xlarge"], ["p5.4xlarge"]]
    )
    quotas, quota_stub = quotas_stub({"L-DB2E81BA": 64.0, "L-417A185B": 0.0})
    result = run_preflight(cfg, "prod", REGION, SplitEc2(moto_ec2, requirements), quotas)
    req_stub.assert_no_pending_responses()
    quota_stub.assert_no_pending_responses()

    assert result.zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert [(t.name, t.vcpus, t.gpus, t.zones) for t in result.eligible] == [
        ("g6e.2xlarge", 8, 1, ("us-east-1a", "us-east-1b", "us-east-1c")),
        ("g6e.xlarge", 4, 1, ("us-east-1a", "us-east-1b", "us-east-1c")),
        ("p5.4xlarge", 16, 1, ("us-east-1a", "us-east-1b", "us-east-1c")),
    ]
    assert [(q.code, q.vcpus, q.smallest_type, q.workers) for q in result.quotas] == [
        ("L-DB2E81BA", 64.0, "g6e.xlarge", 16),  # 64 vCPU // 4
        ("L-417A185B", 0.0, "p5.4xlarge", 0),
    ]
    assert result.reachable_workers == 16
    assert result.price is not None
    assert (result.price.instance_type, result.price.hourly_usd) == ("g6e.xlarge", 1.861)
    assert result.unpriced == ["g6e.2xlarge"]
    assert result.warnings == [
        "the account's quota allows 16 workers, below scaling.maxWorkers 40: request 160 vCPU "
        "of 'Running On-Demand G and VT instances' (L-DB2E81BA) for 40 × g6e.xlarge or 640 "
        "vCPU of 'Running On-Demand P instances' (L-417A185B) for 40 × p5.4xlarge"
    ]


def test_dev_spot_checks_the_spot_quota_and_fits(moto_ec2: Any) -> None:
    cfg = dev()
    requirements, _ = requirements_stub(cfg.gpu, [["g6.xlarge", "g5.xlarge"]])
    quotas, quota_stub = quotas_stub({"L-3819A6DF": 16.0})
    result = run_preflight(cfg, "dev", REGION, SplitEc2(moto_ec2, requirements), quotas)
    quota_stub.assert_no_pending_responses()
    assert result.zones == ["us-east-1a", "us-east-1b"]
    assert [(q.code, q.smallest_type, q.workers) for q in result.quotas] == [
        ("L-3819A6DF", "g5.xlarge", 4)
    ]
    assert result.reachable_workers == 4 == result.max_workers
    assert result.warnings == []
    # Cheapest on the price table, at the Spot table's price (the middle of $0.349-0.401).
    assert result.price is not None
    assert (result.price.instance_type, result.price.hourly_usd) == ("g6.xlarge", 0.375)


def test_with_pools_each_purchase_option_s_quota_is_checked_over_its_pools_types(
    moto_ec2: Any,
) -> None:
    group = "arn:aws:resource-groups:us-east-1:123456789012:group/tts-nightly"
    cfg = StackConfig.from_raw(
        {
            "scaling": {"maxWorkers": 8},
            "gpu": {
                "pools": [
                    {"name": "spot", "capacityType": "spot", "allowedInstanceTypes": ["g5.xlarge"]},
                    {"name": "od", "capacityType": "on-demand"},
                    {
                        "name": "res",
                        "capacityType": "reserved",
                        "capacityReservationGroupArn": group,
                        "allowedInstanceTypes": ["g6e.xlarge"],
                    },
                ]
            },
        }
    )
    requirements, _ = requirements_stub(cfg.gpu, [["g5.xlarge", "g6.xlarge", "g6e.xlarge"]])
    # On-Demand first (the reserved pool draws on it too), then Spot: one call each.
    quotas, quota_stub = quotas_stub({"L-DB2E81BA": 8.0, "L-3819A6DF": 16.0})
    result = run_preflight(cfg, "nightly", REGION, SplitEc2(moto_ec2, requirements), quotas)
    quota_stub.assert_no_pending_responses()
    assert result.pools == ["spot:spot", "od:on-demand", "res:reserved"]
    assert [(q.code, q.smallest_type, q.workers) for q in result.quotas] == [
        ("L-DB2E81BA", "g5.xlarge", 2),  # od admits every type; the smallest takes 4 vCPU
        ("L-3819A6DF", "g5.xlarge", 4),  # spot admits g5.xlarge only
    ]
    assert result.reachable_workers == 6
    assert render(result).splitlines()[0] == (
        "preflight nightly: us-east-1, pools spot:spot, od:on-demand, res:reserved, "
        "zones us-east-1a, us-east-1b"
    )


def test_existing_subnets_in_zones_without_the_type_are_warned(moto_ec2: Any) -> None:
    vpc = moto_ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        moto_ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"][
            "SubnetId"
        ]
        for cidr, zone in (("10.1.0.0/20", "us-east-1e"), ("10.1.16.0/20", "us-east-1f"))
    ]
    cfg = StackConfig.from_raw(
        {"network": {"mode": "existing", "vpcId": vpc, "subnetIds": subnets}}
    )
    # moto's offerings data has g6e.xlarge in us-east-1a..d only.
    requirements, _ = requirements_stub(cfg.gpu, [["g6e.xlarge"]])
    quotas, quota_stub = quotas_stub({})
    result = run_preflight(cfg, "dev", REGION, SplitEc2(moto_ec2, requirements), quotas)
    quota_stub.assert_no_pending_responses()
    assert result.zones == ["us-east-1e", "us-east-1f"]
    assert [(t.name, t.zones) for t in result.eligible] == [("g6e.xlarge", ())]
    assert result.quotas == []
    assert result.reachable_workers == 0
    assert result.warnings[0] == (
        "no eligible type is offered in the stack's zones (us-east-1e, us-east-1f)"
    )


def test_an_unreadable_quota_is_a_warning_not_a_crash(moto_ec2: Any) -> None:
    cfg = prod()
    requirements, _ = requirements_stub(cfg.gpu, [["g6e.xlarge"]])
    quotas, _ = quotas_stub({"L-DB2E81BA": "AccessDeniedException"})
    result = run_preflight(cfg, "prod", REGION, SplitEc2(moto_ec2, requirements), quotas)
    assert result.quotas[0].vcpus is None
    assert result.reachable_workers == 0
    assert result.warnings[0] == (
        "quota L-DB2E81BA (Running On-Demand G and VT instances) could not be read: "
        "AccessDeniedException: denied"
    )


def test_no_matching_type_is_warned(moto_ec2: Any) -> None:
    cfg = prod()
    requirements, _ = requirements_stub(cfg.gpu, [[]])
    quotas, _ = quotas_stub({})
    result = run_preflight(cfg, "prod", REGION, SplitEc2(moto_ec2, requirements), quotas)
    assert result.eligible == [] and result.reachable_workers == 0
    assert result.warnings[0].startswith("no instance type in us-east-1 matches tts-fleet:gpu")


class FakeSession:
    """What the command needs of a boto3 Session, with canned clients."""

    def __init__(self, clients: dict[str, Any], region_name: str | None) -> None:
        self.clients, self.region_name = clients, region_name

    def get_credentials(self) -> object:
        return object()

    def client(self, service: str) -> Any:
        return self.clients[service]


def invoke(hooks: PreflightHooks | None, *args: str) -> Any:
    return CliRunner().invoke(
        cli, ["preflight", "--project-dir", str(ROOT), *args], obj=hooks, catch_exceptions=False
    )


def test_cli_prints_the_check_and_exits_1_on_the_warning(moto_ec2: Any) -> None:
    cfg = prod()
    requirements, _ = requirements_stub(cfg.gpu, [["g6e.xlarge"]])
    quotas, _ = quotas_stub({"L-DB2E81BA": 64.0})
    clients = {"ec2": SplitEc2(moto_ec2, requirements), "service-quotas": quotas}
    seen: dict[str, Any] = {}

    def session(region_name: str | None = None) -> FakeSession:
        seen["region"] = region_name
        return FakeSession(clients, region_name)

    result = invoke(PreflightHooks(session=session), "--stack", "prod")
    assert seen["region"] == "us-east-1"  # from the stack file's aws:region
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "preflight prod: us-east-1, on-demand, zones us-east-1a, us-east-1b, us-east-1c",
        "eligible instance types (1):",
        "  g6e.xlarge         4 vCPU  1 GPU  us-east-1a us-east-1b us-east-1c",
        "quota L-DB2E81BA Running On-Demand G and VT instances: 64 vCPU → 16 workers on "
        "g6e.xlarge (4 vCPU)",
        "reachable workers: 16 (scaling.maxWorkers 40)",
        "cheapest eligible: g6e.xlarge $1.861/h on-demand + $0.1452/h management fee = "
        "$2.0062/h (prices as of 2026-12-01)",
        "warning: the account's quota allows 16 workers, below scaling.maxWorkers 40: request "
        "160 vCPU of 'Running On-Demand G and VT instances' (L-DB2E81BA) for 40 × g6e.xlarge",
    ]


def test_cli_json_has_the_reachable_workers(moto_ec2: Any) -> None:
    cfg = dev()
    requirements, _ = requirements_stub(cfg.gpu, [["g6.xlarge"]])
    quotas, _ = quotas_stub({"L-3819A6DF": 32.0})
    clients = {"ec2": SplitEc2(moto_ec2, requirements), "service-quotas": quotas}
    hooks = PreflightHooks(session=lambda region_name=None: FakeSession(clients, region_name))
    result = invoke(hooks, "--stack", "dev", "--json", "--region", "us-east-1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["reachable_workers"], data["max_workers"], data["warnings"]) == (8, 4, [])
    assert data["quotas"][0]["code"] == "L-3819A6DF"


def test_cli_without_credentials_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata probe
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    result = CliRunner().invoke(cli, ["preflight", "--project-dir", str(ROOT), "--stack", "prod"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or log in"
    ]


def test_cli_without_a_region_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.bare.yaml").write_text("config: {}\n")

    def session(region_name: str | None = None) -> FakeSession:
        return FakeSession({}, region_name)

    result = CliRunner().invoke(
        cli,
        ["preflight", "--project-dir", str(tmp_path), "--stack", "bare"],
        obj=PreflightHooks(session=session),
    )
    assert result.exit_code == 2
    assert "no AWS region: pass --region or set aws:region in the stack file" in result.output
