"""WorkerImage: content-hash tags, prebuilt URIs build nothing, and the build resource's
create/update logic against moto (CodeBuild start/batch-get, ECR describe-images).

moto's CodeBuild reports every build SUCCEEDED on its first poll and ignores overrides, so
the failure and timeout paths of `wait_for_build` go through its status-getter seam with a
scripted sequence. Mocks and moto cannot prove the real build (docker in CodeBuild) works.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from components import image_build
from components.image import BUILDSPEC, WorkerImage, WorkerImageArgs
from components.image_build import BuildFailed, WorkerImageBuildProvider, wait_for_build
from components.image_source import ecr_repository_arn, image_tag, source_files
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import PREBUILT, WORKER_DIR
from tts_fleet.config.models import DEFAULT_BASE_IMAGE, WorkerConfig

ACCOUNT = "123456789012"
PINNED_REVISION = WorkerConfig().model_revision
DEFAULT_BUILD_ARGS = {
    "BASE_IMAGE": DEFAULT_BASE_IMAGE,
    "MODEL_REVISION": PINNED_REVISION,
    "WEIGHTS": "image",
}


@pytest.fixture
def worker_copy(tmp_path: Path) -> Path:
    target = tmp_path / "worker"
    target.mkdir()
    (target / "loop.py").write_text("print('work')\n")
    (target / "Dockerfile").write_text("FROM scratch\n")
    return target


def test_tag_changes_when_a_source_file_changes(worker_copy: Path) -> None:
    before = image_tag(worker_copy, "m")
    (worker_copy / "loop.py").write_text("print('work harder')\n")
    assert image_tag(worker_copy, "m") != before


def test_tag_changes_with_each_build_arg(worker_copy: Path) -> None:
    before = image_tag(worker_copy, "m", DEFAULT_BUILD_ARGS)
    assert image_tag(worker_copy, "m", {**DEFAULT_BUILD_ARGS, "MODEL_REVISION": "abc"}) != before
    assert image_tag(worker_copy, "m", {**DEFAULT_BUILD_ARGS, "BASE_IMAGE": "x:1"}) != before
    assert image_tag(worker_copy, "m", {**DEFAULT_BUILD_ARGS, "WEIGHTS": "s3"}) != before
    assert image_tag(worker_copy, "m", dict(reversed(DEFAULT_BUILD_ARGS.items()))) == before


def test_tag_changes_when_a_file_is_added_or_the_model_changes(worker_copy: Path) -> None:
    before = image_tag(worker_copy, "m")
    assert image_tag(worker_copy, "other/model") != before
    (worker_copy / "extra.py").write_text("")
    assert image_tag(worker_copy, "m") != before


def test_caches_do_not_change_the_tag(worker_copy: Path) -> None:
    before = image_tag(worker_copy, "m")
    (worker_copy / "__pycache__").mkdir()
    (worker_copy / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\x00\x01")
    (worker_copy / "stray.pyc").write_bytes(b"\x02")
    (worker_copy / ".pytest_cache").mkdir()
    (worker_copy / ".pytest_cache" / "v").write_text("x")
    assert image_tag(worker_copy, "m") == before
    assert [p.name for p in source_files(worker_copy)] == ["Dockerfile", "loop.py"]


def test_tag_is_stable_across_copies(worker_copy: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    shutil.copytree(worker_copy, other)
    assert image_tag(other, "m") == image_tag(worker_copy, "m")


@pytest.mark.parametrize(
    ("uri", "arn"),
    [
        (PREBUILT, f"arn:aws:ecr:us-east-1:{ACCOUNT}:repository/tts-worker"),
        (
            f"{ACCOUNT}.dkr.ecr.cn-north-1.amazonaws.com.cn/team/tts@sha256:abc",
            f"arn:aws-cn:ecr:cn-north-1:{ACCOUNT}:repository/team/tts",
        ),
        ("docker.io/acme/tts:1", None),
        ("public.ecr.aws/acme/tts:1", None),
    ],
)
def test_ecr_repository_arn(uri: str, arn: str | None) -> None:
    assert ecr_repository_arn(uri) == arn


def build(image: str, **args: Any) -> tuple[RecordingMocks, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def program() -> Any:
        img = WorkerImage(
            "img",
            WorkerImageArgs(
                image=image,
                worker_dir=str(WORKER_DIR),
                model="m",
                **{"model_revision": DEFAULT_BUILD_ARGS["MODEL_REVISION"], **args},
            ),
        )
        return img.image_uri.apply(lambda uri: seen.update(uri=uri))

    return run_program(program), seen


def test_a_prebuilt_image_builds_nothing() -> None:
    mocks, seen = build(PREBUILT)
    assert mocks.counts() == {"tts-fleet:image:WorkerImage": 1}
    assert seen == {"uri": PREBUILT}


def test_an_empty_image_builds_worker_dir_with_codebuild_under_the_content_tag() -> None:
    mocks, seen = build("")
    assert mocks.counts() == {
        "tts-fleet:image:WorkerImage": 1,
        "aws:ecr/repository:Repository": 1,
        "aws:ecr/lifecyclePolicy:LifecyclePolicy": 1,
        "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": 1,  # the ECR Public default base
        "tts-fleet:storage:OutputBucket": 1,
        "aws:s3/bucket:Bucket": 1,
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": 1,
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls": 1,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": 1,
        "aws:s3/bucketPolicy:BucketPolicy": 1,
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": 1,
        "aws:s3/bucketObjectv2:BucketObjectv2": 1,
        "aws:cloudwatch/logGroup:LogGroup": 1,
        "aws:iam/role:Role": 1,
        "aws:iam/rolePolicy:RolePolicy": 1,
        "aws:codebuild/project:Project": 1,
        "pulumi-python:dynamic:Resource": 1,
    }
    tag = image_tag(WORKER_DIR, "m", DEFAULT_BUILD_ARGS)
    repo = mocks.one("aws:ecr/repository:Repository").inputs
    assert repo["forceDelete"] is True  # destroy deletes it with the images it holds
    assert repo["imageTagMutability"] == "IMMUTABLE"
    assert repo["imageScanningConfiguration"] == {"scanOnPush": True}
    assert (
        '"countNumber": 10' in mocks.one("aws:ecr/lifecyclePolicy:LifecyclePolicy").inputs["policy"]
    )
    obj = mocks.one("aws:s3/bucketObjectv2:BucketObjectv2").inputs
    assert obj["key"] == f"worker-source/{tag}.zip"
    assert sorted(obj["source"].assets) == sorted(
        p.relative_to(WORKER_DIR).as_posix() for p in source_files(WORKER_DIR)
    )
    project = mocks.one("aws:codebuild/project:Project").inputs
    assert project["source"]["location"] == f"img-source-bucket/worker-source/{tag}.zip"
    assert project["source"]["buildspec"] == BUILDSPEC
    assert project["environment"]["privilegedMode"] is True
    build_inputs = mocks.one("pulumi-python:dynamic:Resource").inputs
    uri = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/img-repo:{tag}"
    assert {k: build_inputs[k] for k in ("image_uri", "project_name", "region")} == {
        "image_uri": uri,
        "project_name": "img-build",
        "region": "us-east-1",
    }
    assert seen == {"uri": uri}


# ── the dynamic resource's create/update logic against moto ──────────────────────────────


@pytest.fixture
def project(aws_env: dict[str, str]) -> Iterator[dict[str, Any]]:
    image_build.clients.cache_clear()  # clients are per process; bind them to this emulator
    codebuild = boto3.client("codebuild")
    ecr = boto3.client("ecr")
    repo = ecr.create_repository(repositoryName="worker", imageTagMutability="IMMUTABLE")
    codebuild.create_project(
        name="worker-build",
        source={"type": "S3", "location": "src-bucket/worker-source/a.zip"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_LARGE",
        },
        serviceRole=f"arn:aws:iam::{ACCOUNT}:role/build",
    )
    uri = repo["repository"]["repositoryUri"]
    yield {
        "image_uri": f"{uri}:tag-a",
        "project_name": "worker-build",
        "source_location": "src-bucket/worker-source/a.zip",
        "region": "us-east-1",
        "build_id": None,
    }
    image_build.clients.cache_clear()


def builds(project: str) -> list[str]:
    ids: list[str] = boto3.client("codebuild").list_builds_for_project(projectName=project)["ids"]
    return ids


def no_sleep(_: float) -> None:
    return None


def test_create_starts_one_build_and_returns_its_id(
    project: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image_build, "POLL_SECONDS", 0.0)
    result = WorkerImageBuildProvider().create(project)
    started = builds("worker-build")
    assert len(started) == 1
    assert result.id == project["image_uri"]
    # moto's build pushes nothing, so there is no manifest to measure.
    assert result.outs == {**project, "build_id": started[0], "layer_bytes": []}


ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
LAYER_BYTES = [29_150_000, 1_402_000_000, 1_790_000_000, 531_000_000, 372_000_000, 1_200, 9_800]


def manifest(sizes: list[int]) -> str:
    """An OCI image manifest as buildx pushes it with zstd layers."""
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:" + "0" * 64,
                "size": 1,
            },
            "layers": [
                {"mediaType": ZSTD_LAYER, "digest": f"sha256:{i:064x}", "size": size}
                for i, size in enumerate(sizes, start=1)
            ],
        }
    )


def test_an_image_already_in_ecr_is_reused_without_a_build(project: dict[str, Any]) -> None:
    ecr = boto3.client("ecr")
    ecr.put_image(repositoryName="worker", imageManifest=manifest(LAYER_BYTES), imageTag="tag-a")
    outs = image_build.ensure_image(project, sleep=no_sleep)
    assert outs == {**project, "build_id": "", "layer_bytes": LAYER_BYTES}
    assert builds("worker-build") == []


def test_layer_sizes_read_the_pushed_manifest_in_pull_order(project: dict[str, Any]) -> None:
    ecr = boto3.client("ecr")
    ecr.put_image(repositoryName="worker", imageManifest=manifest([5, 7, 3]), imageTag="t")
    uri = project["image_uri"].replace(":tag-a", ":t")
    assert image_build.layer_sizes(ecr, uri) == [5, 7, 3]
    assert image_build.layer_sizes(ecr, uri.replace(":t", ":absent")) == []


def test_update_builds_the_new_tag_and_diff_sees_only_real_changes(
    project: dict[str, Any],
) -> None:
    provider = WorkerImageBuildProvider()
    newer = {**project, "image_uri": project["image_uri"].replace("tag-a", "tag-b")}
    assert provider.diff("id", project, {**project}).changes is False
    assert provider.diff("id", project, newer).changes is True
    outs = image_build.ensure_image(newer, sleep=no_sleep)
    assert outs["build_id"] == builds("worker-build")[0]
    assert outs["image_uri"].endswith(":tag-b")


# ── wait_for_build through its seam (moto cannot fail a build) ──────────────────────────


def scripted(*statuses: str) -> Any:
    remaining = list(statuses)

    def get_build(build_id: str) -> dict[str, Any]:
        return {
            "id": build_id,
            "buildStatus": remaining.pop(0),
            "currentPhase": "BUILD",
            "logs": {"deepLink": "https://console/logs"},
        }

    return get_build


def test_wait_returns_once_the_build_succeeds() -> None:
    sleeps: list[float] = []
    build = wait_for_build(
        scripted("IN_PROGRESS", "IN_PROGRESS", "SUCCEEDED"),
        "b:1",
        sleep=sleeps.append,
        poll_seconds=5,
    )
    assert build["buildStatus"] == "SUCCEEDED"
    assert sleeps == [5, 5, 5]


@pytest.mark.parametrize("status", ["FAILED", "FAULT", "STOPPED", "TIMED_OUT"])
def test_wait_raises_with_status_phase_and_logs(status: str) -> None:
    with pytest.raises(BuildFailed) as caught:
        wait_for_build(scripted("IN_PROGRESS", status), "b:1", sleep=no_sleep)
    assert str(caught.value) == (
        f"worker image build b:1 ended {status} in phase BUILD; see https://console/logs"
    )


def test_wait_gives_up_after_its_timeout() -> None:
    now = [0.0]

    def tick(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(BuildFailed, match="still running after 30 s"):
        wait_for_build(
            scripted(*["IN_PROGRESS"] * 10),
            "b:1",
            sleep=tick,
            clock=lambda: now[0],
            timeout_seconds=30,
            poll_seconds=10,
        )
    assert now[0] == 30


def test_codebuild_role_trusts_only_this_accounts_projects() -> None:
    mocks, _ = build("")
    trust = json.loads(mocks.one("aws:iam/role:Role").inputs["assumeRolePolicy"])
    assert trust["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "codebuild.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": ACCOUNT},
                "ArnLike": {"aws:SourceArn": f"arn:aws:codebuild:us-east-1:{ACCOUNT}:*"},
            },
        }
    ]
