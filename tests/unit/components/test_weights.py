"""`worker.weights: s3` and `gpu.localStorage` under the Pulumi mocks: exactly what they add.

The same stack is built with and without each setting and every recorded resource compared:
`s3` adds the snapshot's location to the task's environment, a data volume mounted at /data,
read-only `weights/*` and read-write `cache/*` for the task role, and a bucket-policy deny on
`cache/*` writes by anyone else; `localStorage` puts the hosts' data volume on instance
store and admits only types with SSD instance storage. Nothing else changes. What a mock
cannot prove: that ECS accepts the volume on Managed Instances and that EC2 finds such types
(`tts-fleet preflight` asks EC2).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from tests.lib.pulumi_harness import RecordingMocks
from tests.lib.stack_support import PREBUILT, policy, run_platform

TASK = "aws:ecs/taskDefinition:TaskDefinition"
PROVIDER = "aws:ecs/capacityProvider:CapacityProvider"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
SNAPSHOT = "weights/Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice/0c0e3051f131929182e2c023b9537f8b1c68adfe/"


def build(weights: str = "image", local_storage: bool = False) -> RecordingMocks:
    return run_platform(
        {
            "worker": {"image": PREBUILT, "weights": weights},
            "gpu": {"localStorage": local_storage},
        }
    )


@pytest.fixture(scope="module")
def image() -> RecordingMocks:
    return build()


@pytest.fixture(scope="module")
def s3() -> RecordingMocks:
    return build("s3")


def comparable(value: Any) -> Any:
    """Inputs as data: an asset (the controller's zip) compares by what it holds, not by id."""
    if isinstance(value, pulumi.AssetArchive):
        return {name: comparable(asset) for name, asset in value.assets.items()}
    if isinstance(value, pulumi.FileAsset | pulumi.FileArchive):
        return ("file", value.path)
    if isinstance(value, pulumi.StringAsset):
        return ("text", value.text)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def by_name(mocks: RecordingMocks) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.type, r.name): comparable(r.inputs) for r in mocks.resources}


def changed(before: RecordingMocks, after: RecordingMocks) -> set[tuple[str, str]]:
    old, new = by_name(before), by_name(after)
    assert set(old) == set(new), "no resource is added or removed"
    return {key for key in old if old[key] != new[key]}


def container(mocks: RecordingMocks) -> dict[str, Any]:
    [definition] = json.loads(mocks.one(TASK).inputs["containerDefinitions"])
    return dict(definition)


def task_statements(mocks: RecordingMocks) -> list[dict[str, Any]]:
    [role_policy] = [r for r in mocks.of_type(ROLE_POLICY) if r.name.endswith("-task-policy")]
    return list(policy(role_policy)["Statement"])


def test_s3_changes_only_the_task_definition_the_task_role_and_the_bucket_policy(
    image: RecordingMocks, s3: RecordingMocks
) -> None:
    assert {kind for kind, _ in changed(image, s3)} == {TASK, ROLE_POLICY, BUCKET_POLICY}
    [(_, role_policy)] = [key for key in changed(image, s3) if key[0] == ROLE_POLICY]
    assert role_policy.endswith("-task-policy")


def test_s3_gives_the_task_the_snapshots_location_and_a_data_volume(
    image: RecordingMocks, s3: RecordingMocks
) -> None:
    bucket = s3.one("aws:s3/bucket:Bucket").name
    before, after = container(image), container(s3)
    env_before = {e["name"]: e["value"] for e in before.pop("environment")}
    env_after = {e["name"]: e["value"] for e in after.pop("environment")}
    assert {k: v for k, v in env_after.items() if k not in env_before} == {
        "WEIGHTS_URI": f"s3://{bucket}/{SNAPSHOT}",
        "WEIGHTS_DIR": "/data/weights",
    }
    assert {k: v for k, v in env_after.items() if k in env_before} == env_before
    assert after.pop("mountPoints") == [{"sourceVolume": "data", "containerPath": "/data"}]
    assert after == before
    assert "volumes" not in image.one(TASK).inputs
    assert [dict(v) for v in s3.one(TASK).inputs["volumes"]] == [{"name": "data"}]


def test_s3_grants_read_only_weights_and_read_write_cache(
    image: RecordingMocks, s3: RecordingMocks
) -> None:
    bucket_arn = f"arn:aws:s3:::{s3.one('aws:s3/bucket:Bucket').name}"
    before, after = task_statements(image), task_statements(s3)
    assert after[: len(before)] == before
    assert after[len(before) :] == [
        {
            "Sid": "ReadModelWeights",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": f"{bucket_arn}/weights/*",
        },
        {
            "Sid": "ReadWriteCompileCaches",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": f"{bucket_arn}/cache/*",
        },
    ]


def test_s3_names_the_task_role_the_only_writer_of_cache(
    image: RecordingMocks, s3: RecordingMocks
) -> None:
    bucket_arn = f"arn:aws:s3:::{s3.one('aws:s3/bucket:Bucket').name}"
    task_role = next(r for r in s3.resources if r.name.endswith("-task-role"))
    before = policy(image.one(BUCKET_POLICY))["Statement"]
    after = policy(s3.one(BUCKET_POLICY))["Statement"]
    added = [s for s in after if s not in before]
    assert [s for s in after if s in before] == before
    assert added == [
        {
            "Sid": "OnlyTheWorkerWritesCompileCaches",
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["s3:PutObject", "s3:DeleteObject"],
            "Resource": f"{bucket_arn}/cache/*",
            "Condition": {
                "ArnNotEquals": {
                    "aws:PrincipalArn": [f"arn:aws:iam:us-east-1:123456789012:{task_role.name}"]
                }
            },
        }
    ]


def test_local_storage_changes_only_the_capacity_provider(image: RecordingMocks) -> None:
    local = build(local_storage=True)
    assert changed(image, local) == {(PROVIDER, "tts-capacity-gpu")}
    before = image.one(PROVIDER).inputs["managedInstancesProvider"]["instanceLaunchTemplate"]
    after = dict(local.one(PROVIDER).inputs["managedInstancesProvider"]["instanceLaunchTemplate"])
    assert "localStorageConfiguration" not in before
    assert after.pop("localStorageConfiguration") == {"useLocalStorage": True}
    requirements = dict(after.pop("instanceRequirements"))
    assert {k: v for k, v in requirements.items() if k not in before["instanceRequirements"]} == {
        "localStorage": "required",
        "localStorageTypes": ["ssd"],
        "totalLocalStorageGb": {"min": 100},
    }
    assert after == {k: v for k, v in before.items() if k != "instanceRequirements"}


def test_s3_with_local_storage_is_both_and_nothing_more(
    image: RecordingMocks, s3: RecordingMocks
) -> None:
    both = build("s3", local_storage=True)
    assert changed(image, both) == changed(image, s3) | {(PROVIDER, "tts-capacity-gpu")}
    assert by_name(both)[(TASK, s3.one(TASK).name)] == s3.one(TASK).inputs
