"""`tts-fleet preflight` with `gpu.localStorage`: the types that remain, and those the
instance-storage requirement leaves out.

EC2's GetInstanceTypesFromInstanceRequirements is answered by botocore's Stubber (moto lacks
it), which checks that the first request carries the local-storage requirements and the second
the same requirements without them; the rest is moto's EC2 data, as in test_preflight.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tests.integration.deploy.test_preflight import SplitEc2, quotas_stub
from tts_fleet.config.gpu import ec2_instance_requirements
from tts_fleet.config.models import GpuConfig, StackConfig
from tts_fleet.deploy.preflight import ARCHITECTURES, VIRTUALIZATION, render, run_preflight

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def fake_credentials(in_process_aws: None) -> None:
    """moto in process and the Stubber only: never a real account."""


@pytest.fixture
def moto_ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def stub_with_and_without(gpu: GpuConfig, kept: list[str], all_types: list[str]) -> Any:
    client = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(client)
    without = gpu.model_copy(update={"local_storage": False})
    for requirements, names in ((gpu, kept), (without, all_types)):
        expected = {
            "ArchitectureTypes": ARCHITECTURES,
            "VirtualizationTypes": VIRTUALIZATION,
            "InstanceRequirements": ec2_instance_requirements(requirements),
        }
        response = {"InstanceTypes": [{"InstanceType": n} for n in names]}
        stubber.add_response("get_instance_types_from_instance_requirements", response, expected)
    stubber.activate()
    return client, stubber


def test_the_requirements_ask_ec2_for_ssd_instance_storage_of_storage_gib() -> None:
    gpu = GpuConfig.model_validate({"localStorage": True, "storageGib": 200})
    requirements = ec2_instance_requirements(gpu)
    assert {k: requirements[k] for k in requirements if k.startswith(("Local", "Total"))} == {
        "LocalStorage": "required",
        "LocalStorageTypes": ["ssd"],
        "TotalLocalStorageGB": {"Min": 200},
    }
    assert "LocalStorage" not in ec2_instance_requirements(GpuConfig())


def test_preflight_lists_what_remains_and_what_local_storage_leaves_out(moto_ec2: Any) -> None:
    cfg = StackConfig.from_raw({"gpu": {"localStorage": True}})
    requirements, stubber = stub_with_and_without(
        cfg.gpu, ["g6.xlarge"], ["g6.xlarge", "g6e.xlarge", "p5.4xlarge"]
    )
    quotas, _ = quotas_stub({"L-DB2E81BA": 64.0})
    result = run_preflight(cfg, "dev", REGION, SplitEc2(moto_ec2, requirements), quotas)
    stubber.assert_no_pending_responses()
    assert [t.name for t in result.eligible] == ["g6.xlarge"]
    assert result.local_storage_excluded == ["g6e.xlarge", "p5.4xlarge"]
    assert result.as_json()["local_storage_excluded"] == ["g6e.xlarge", "p5.4xlarge"]
    assert (
        "gpu.localStorage: only types with SSD instance storage; left out: g6e.xlarge, "
        "p5.4xlarge" in render(result).splitlines()
    )


def test_nothing_left_is_warned_naming_the_setting(moto_ec2: Any) -> None:
    cfg = StackConfig.from_raw({"gpu": {"localStorage": True, "storageGib": 16384}})
    requirements, _ = stub_with_and_without(cfg.gpu, [], ["g6.xlarge"])
    quotas, _ = quotas_stub({})
    result = run_preflight(cfg, "dev", REGION, SplitEc2(moto_ec2, requirements), quotas)
    assert result.warnings[0] == (
        "gpu.localStorage leaves no instance type in us-east-1: g6.xlarge match "
        "tts-fleet:gpu but lack SSD instance storage of gpu.storageGib (lower it, or turn "
        "gpu.localStorage off)"
    )


def test_without_local_storage_nothing_changes(moto_ec2: Any) -> None:
    cfg = StackConfig.from_raw({})
    client = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(client)
    stubber.add_response(
        "get_instance_types_from_instance_requirements",
        {"InstanceTypes": [{"InstanceType": "g6.xlarge"}]},
    )  # one call only: a second would find no response and fail
    stubber.activate()
    quotas, _ = quotas_stub({"L-DB2E81BA": 64.0})
    result = run_preflight(cfg, "dev", REGION, SplitEc2(moto_ec2, client), quotas)
    assert result.local_storage_excluded is None
    assert "gpu.localStorage" not in render(result)
