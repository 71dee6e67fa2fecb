"""The `pulumi up` step that builds the worker image: start a CodeBuild build and wait for it.

A Pulumi dynamic resource (runs in the engine's provider process, not while the program is
constructing). The image tag is a content hash of `worker/` plus the model, and ECR tags are
immutable, so an image that already exists under that tag is reused instead of rebuilt.

The resource's outputs also say what the image weighs: `layer_bytes`, the compressed size of
each layer in pull order, read from the pushed manifest (ECR BatchGetImage), which is what
a host downloads on a cold start (the stack output `imageLayerBytes`).

The logic is plain functions over boto3 clients (tested against moto: CodeBuild start/batch-get,
ECR describe-images and batch-get-image) plus `wait_for_build`, which takes the status getter
as a parameter:
moto's CodeBuild reports every build SUCCEEDED on the first poll, so the failure and timeout
paths are tested with a scripted status sequence through that seam.

The provider is pickled by reference (dill), so `components` must be importable where the
engine runs it; `pip install -e .` (what `make test` does) provides that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import cache
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

# CodeBuild's own limit for the project (buildTimeoutInMinutes ≤ 2160); our wait gives the
# build a little longer than the project timeout so CodeBuild, not we, reports the timeout.
# https://docs.aws.amazon.com/codebuild/latest/APIReference/API_CreateProject.html
BUILD_TIMEOUT_MINUTES = 120
WAIT_TIMEOUT_SECONDS = (BUILD_TIMEOUT_MINUTES + 10) * 60
POLL_SECONDS = 15.0
DONE = "SUCCEEDED"
IN_PROGRESS = "IN_PROGRESS"
# A single-platform image manifest, as buildx pushes it with OCI media types (zstd layers need
# them) or as `docker push` does; an index (several platforms) is not what the build makes.
MANIFEST_MEDIA_TYPES = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
]


class BuildFailed(Exception):
    """The image build did not succeed; the message says where to look."""


@cache
def clients(region: str) -> tuple[Any, Any]:
    """One boto3 client per service per process (DESIGN §7.6)."""
    import boto3

    return boto3.client("codebuild", region_name=region), boto3.client("ecr", region_name=region)


def split_image_uri(image_uri: str) -> tuple[str, str]:
    """`acct.dkr.ecr.region.amazonaws.com/repo:tag` → (repo, tag)."""
    path = image_uri.split("/", 1)[1]
    repository, _, tag = path.rpartition(":")
    return repository, tag


def image_exists(ecr: Any, image_uri: str) -> bool:
    repository, tag = split_image_uri(image_uri)
    try:
        ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
    except ecr.exceptions.ImageNotFoundException:
        return False
    return True


def layer_sizes(ecr: Any, image_uri: str) -> list[int]:
    """The compressed size of each layer of the pushed image, in pull order; [] when ECR has
    no single-platform manifest under the tag."""
    repository, tag = split_image_uri(image_uri)
    answer = ecr.batch_get_image(
        repositoryName=repository,
        imageIds=[{"imageTag": tag}],
        acceptedMediaTypes=MANIFEST_MEDIA_TYPES,
    )
    images = answer.get("images") or []
    if not images:
        return []
    manifest = json.loads(images[0].get("imageManifest") or "{}")
    return [int(layer.get("size", 0)) for layer in manifest.get("layers") or []]


def wait_for_build(
    get_build: Callable[[str], dict[str, Any]],
    build_id: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout_seconds: float = WAIT_TIMEOUT_SECONDS,
    poll_seconds: float | None = None,
) -> dict[str, Any]:
    """Polls until the build leaves IN_PROGRESS; returns it on SUCCEEDED, else BuildFailed."""
    poll_seconds = POLL_SECONDS if poll_seconds is None else poll_seconds
    deadline = clock() + timeout_seconds
    while True:
        sleep(poll_seconds)
        build = get_build(build_id)
        status = build.get("buildStatus", IN_PROGRESS)
        if status == DONE:
            return build
        if status != IN_PROGRESS:
            logs = (build.get("logs") or {}).get("deepLink", "the CodeBuild console")
            raise BuildFailed(
                f"worker image build {build_id} ended {status} in phase "
                f"{build.get('currentPhase', '?')}; see {logs}"
            )
        if clock() >= deadline:
            raise BuildFailed(
                f"worker image build {build_id} still running after "
                f"{timeout_seconds:.0f} s; see the CodeBuild console"
            )


def run_build(
    codebuild: Any, props: dict[str, Any], sleep: Callable[[float], None] = time.sleep
) -> str:
    """Starts the project's build for this source and tag; returns the build id when done."""
    _, tag = split_image_uri(props["image_uri"])
    started = codebuild.start_build(
        projectName=props["project_name"],
        sourceLocationOverride=props["source_location"],
        environmentVariablesOverride=[{"name": "IMAGE_TAG", "value": tag, "type": "PLAINTEXT"}],
    )
    build_id = started["build"]["id"]

    def get_build(bid: str) -> dict[str, Any]:
        build: dict[str, Any] = codebuild.batch_get_builds(ids=[bid])["builds"][0]
        return build

    wait_for_build(get_build, build_id, sleep=sleep)
    return str(build_id)


def ensure_image(
    props: dict[str, Any], sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """The create/update logic: reuse the tagged image if ECR has it, else build it; then read
    what its layers weigh."""
    codebuild, ecr = clients(props["region"])
    build_id = "" if image_exists(ecr, props["image_uri"]) else run_build(codebuild, props, sleep)
    return {**props, "build_id": build_id, "layer_bytes": layer_sizes(ecr, props["image_uri"])}


class WorkerImageBuildProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = ensure_image(props)
        return CreateResult(id_=props["image_uri"], outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("image_uri", "project_name", "source_location", "region")
        changed = [k for k in keys if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=ensure_image(news))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Images are immutable and owned by the ECR repository (and its lifecycle rule).
        return None


class WorkerImageBuild(pulumi.dynamic.Resource):
    image_uri: pulumi.Output[str]
    build_id: pulumi.Output[str]
    layer_bytes: pulumi.Output[list[int]]

    def __init__(
        self,
        name: str,
        *,
        image_uri: pulumi.Input[str],
        project_name: pulumi.Input[str],
        source_location: pulumi.Input[str],
        region: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            WorkerImageBuildProvider(),
            name,
            {
                "image_uri": image_uri,
                "project_name": project_name,
                "source_location": source_location,
                "region": region,
                "build_id": None,
                "layer_bytes": None,
            },
            opts,
        )
