"""WorkerImage: the container image the GPU task runs — built from `worker/` or given prebuilt.

`worker.image` set → nothing is built; its URI is used as is. Empty → an ECR repository
(immutable tags, scan on push, keep the last N images), a private source bucket holding a zip
of `worker/`, a CodeBuild project that runs `docker build` + push, and a dynamic resource that
starts that build during `pulumi up` and waits for it. The tag is a content hash of `worker/`,
the model and the build args, so a code change means a new tag and therefore a new task
definition.

The build is `docker buildx build` on a docker-container builder, pushing layers compressed
with zstd (`compression=zstd,force-compression=true`, which needs OCI media types), the form
AWS measured up to 27 % faster task starts with on Fargate and Bottlerocket's ECS variants
pull. The plain `docker` driver cannot apply these options, hence the builder. Provenance
attestations are off, so ECR holds one plain manifest. After the push the build prints each
layer's compressed size; the same figures are the stack output `imageLayerBytes`
(components/image_build.py).
https://docs.docker.com/build/exporters/image-registry/
https://aws.amazon.com/blogs/containers/reducing-aws-fargate-startup-times-with-zstd-compressed-container-images/

The base image (`worker.baseImage`, `ARG BASE_IMAGE`) comes through an ECR pull-through cache
rule the stack creates when its registry allows one (image_source.base_image_source), so the
build does not pull anonymously from a rate-limited registry; CodeBuild's shared egress IPs
hit Docker Hub's anonymous limit (`toomanyrequests`). The repository is `force_delete`: its
images are rebuilt from source, and ECR refuses to delete a repository that holds any.
"""

from __future__ import annotations

import json
from typing import Literal

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs
from components.iam import same_account_condition, trust_policy
from components.image_build import BUILD_TIMEOUT_MINUTES, WorkerImageBuild
from components.image_source import (
    BaseImageSource,
    base_image_source,
    cache_prefix,
    ecr_repository_arn,
    image_tag,
    source_files,
)
from components.storage import OutputBucket, OutputBucketArgs
from tts_fleet.config.models import DEFAULT_BASE_IMAGE, WorkerConfig

# `worker.weights`: `s3` builds the image without the weights (worker/Dockerfile ARG WEIGHTS).
WeightsSource = Literal["image", "s3"]

KEEP_IMAGES = 10
SOURCE_PREFIX = "worker-source"
# Privileged mode is what lets a CodeBuild container run `docker build`.
BUILD_IMAGE = "aws/codebuild/standard:7.0"
BUILD_COMPUTE = "BUILD_GENERAL1_LARGE"  # 128 GB disk: CUDA base + baked weights fit

# The base image is pulled first, with retries: a pull-through cache's first pull of an image
# imports it from upstream and can fail transiently; a direct pull may meet a rate limit.
PULL_BASE_IMAGE = (
    'for n in 1 2 3 4; do docker pull "$BASE_IMAGE" && break; '
    '[ "$n" = 4 ] && exit 1; sleep $((n * 30)); done'
)
# ARGs of worker/Dockerfile
BUILD_ARGS = ("BASE_IMAGE", "MODEL", "MODEL_REVISION", "WEIGHTS", "ASR_MODEL", "ASR_MODEL_REVISION")
ZSTD_LEVEL = 3  # zstd's own default: most of the decompression gain, a quick compression
CREATE_BUILDER = "docker buildx create --name zstd --driver docker-container --use"
DOCKER_BUILD = (
    "docker buildx build --provenance=false "
    + " ".join(f'--build-arg {arg}="${arg}"' for arg in BUILD_ARGS)
    + ' --output "type=image,name=$REPOSITORY_URI:$IMAGE_TAG,push=true,oci-mediatypes=true,'
    + f'compression=zstd,compression-level={ZSTD_LEVEL},force-compression=true" .'
)
# Each layer's compressed size, from the manifest ECR now holds: what a cold host pulls.
# post_build runs after a failed build too; there is nothing to measure then.
PRINT_LAYERS = (
    '[ "$CODEBUILD_BUILD_SUCCEEDING" = 1 ] || exit 0; '
    'aws ecr batch-get-image --repository-name "${REPOSITORY_URI#*/}" '
    '--image-ids imageTag="$IMAGE_TAG" '
    "--accepted-media-types application/vnd.oci.image.manifest.v1+json "
    "--query 'images[0].imageManifest' --output text | python3 -c '"
    'import json, sys; sizes = [layer["size"] for layer in json.load(sys.stdin)["layers"]]; '
    '[print("layer", i + 1, round(size / 1e6, 1), "MB") for i, size in enumerate(sizes)]; '
    'print("image", round(sum(sizes) / 1e9, 2), "GB compressed")'
    "'"
)
BUILD_PHASES = {
    "pre_build": [
        'REGISTRY="${REPOSITORY_URI%%/*}"',
        'aws ecr get-login-password | docker login -u AWS --password-stdin "$REGISTRY"',
        PULL_BASE_IMAGE,
        CREATE_BUILDER,
    ],
    "build": [DOCKER_BUILD],
    "post_build": [PRINT_LAYERS],
}


def buildspec(phases: dict[str, list[str]]) -> str:
    """The buildspec YAML; each command a double-quoted scalar (JSON string syntax, which YAML
    reads as is), so quotes and `: ` inside a command need no YAML escaping of their own."""
    lines = ["version: 0.2", "phases:"]
    for phase, commands in phases.items():
        lines += [f"  {phase}:", "    commands:"]
        lines += [f"      - {json.dumps(command)}" for command in commands]
    return "\n".join(lines) + "\n"


BUILDSPEC = buildspec(BUILD_PHASES)


def lifecycle_policy(keep: int) -> str:
    rule = {
        "rulePriority": 1,
        "description": f"keep the last {keep} images",
        "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": keep},
        "action": {"type": "expire"},
    }
    return json.dumps({"rules": [rule]})


def recognizer_build(worker: WorkerConfig) -> dict[str, str]:
    """WorkerImageArgs' recognizer fields: `worker.qa.asrModel` at its pinned revision when
    the stack checks outputs in mode `asr` (worker/asr_server.sh serves it), else none."""
    if worker.qa.mode != "asr":
        return {}
    return {"asr_model": worker.qa.asr_model, "asr_model_revision": worker.qa.asr_model_revision}


class WorkerImageArgs(ComponentArgs):
    image: str = ""
    worker_dir: str
    model: str
    model_revision: str
    base_image: str = DEFAULT_BASE_IMAGE
    docker_hub_secret_arn: str = ""
    weights: WeightsSource = WorkerConfig.model_fields["weights"].default
    # `worker.qa.mode: asr`: the recognizer baked in beside the TTS model ("": none).
    asr_model: str = ""
    asr_model_revision: str = ""
    keep_images: int = Field(KEEP_IMAGES, ge=1)

    def build_args(self) -> dict[str, str]:
        """Build args besides MODEL that change the image (so its tag), as configured. The
        recognizer's only when there is one, so a stack without `asr` keeps its image tag."""
        recognizer = (
            {"ASR_MODEL": self.asr_model, "ASR_MODEL_REVISION": self.asr_model_revision}
            if self.asr_model
            else {}
        )
        return {
            "BASE_IMAGE": self.base_image,
            "MODEL_REVISION": self.model_revision,
            "WEIGHTS": self.weights,
            **recognizer,
        }


class WorkerImage(pulumi.ComponentResource):
    image_uri: pulumi.Output[str]
    # Compressed size of each layer in pull order (stack output `imageLayerBytes`); None for a
    # prebuilt `worker.image`, which this stack neither built nor measured.
    layer_bytes: pulumi.Output[list[int]] | None
    # ECR repositories the execution role must be able to pull from (none for other registries).
    repository_arns: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: WorkerImageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:image:WorkerImage", name, None, opts)
        if args.image:
            arn = ecr_repository_arn(args.image)
            self.image_uri = pulumi.Output.from_input(args.image)
            self.repository_arns = pulumi.Output.from_input([arn] if arn else [])
            self.layer_bytes = None
        else:
            self._build(name, args)
        self.register_outputs({"image_uri": self.image_uri, "layer_bytes": self.layer_bytes})

    def _build(self, name: str, args: WorkerImageArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        repo = aws.ecr.Repository(
            f"{name}-repo",
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            force_delete=True,
            opts=child,
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=repo.name,
            policy=lifecycle_policy(args.keep_images),
            opts=child,
        )
        tag = image_tag(args.worker_dir, args.model, args.build_args())
        # Build input only, rebuilt from `worker/` on demand: emptied and deleted on destroy.
        source = OutputBucket(
            f"{name}-source", OutputBucketArgs(expire_days=0, on_destroy="delete"), opts=child
        )
        key = f"{SOURCE_PREFIX}/{tag}.zip"
        archive = aws.s3.BucketObjectv2(
            f"{name}-source-zip",
            bucket=source.bucket_name,
            key=key,
            source=pulumi.AssetArchive(
                {
                    p.relative_to(args.worker_dir).as_posix(): pulumi.FileAsset(str(p))
                    for p in source_files(args.worker_dir)
                }
            ),
            opts=child,
        )
        location = pulumi.Output.concat(archive.bucket, "/", archive.key)
        base = BaseImage.create(self, name, args, repo)
        project = self._project(name, args, repo, source, location, base)
        build = WorkerImageBuild(
            f"{name}-build",
            image_uri=pulumi.Output.concat(repo.repository_url, ":", tag),
            project_name=project.name,
            source_location=location,
            region=repo.repository_url.apply(lambda url: url.split(".")[3]),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[archive, *base.resources]),
        )
        self.image_uri = build.image_uri
        self.layer_bytes = build.layer_bytes
        self.repository_arns = repo.arn.apply(lambda arn: [arn])

    def _project(
        self,
        name: str,
        args: WorkerImageArgs,
        repo: aws.ecr.Repository,
        source: OutputBucket,
        location: pulumi.Output[str],
        base: BaseImage,
    ) -> aws.codebuild.Project:
        child = pulumi.ResourceOptions(parent=self)
        logs = aws.cloudwatch.LogGroup(f"{name}-build-logs", retention_in_days=30, opts=child)
        role = aws.iam.Role(
            f"{name}-build-role",
            assume_role_policy=pulumi.Output.json_dumps(
                trust_policy(
                    "codebuild.amazonaws.com", same_account_condition(repo.arn, "codebuild")
                )
            ),
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-build-policy",
            role=role.id,
            policy=pulumi.Output.json_dumps(
                build_policy(logs.arn, source.bucket_arn, repo.arn, base.repository_arns)
            ),
            opts=child,
        )
        return aws.codebuild.Project(
            f"{name}-build",
            service_role=role.arn,
            build_timeout=BUILD_TIMEOUT_MINUTES,
            source={"type": "S3", "location": location, "buildspec": BUILDSPEC},
            artifacts={"type": "NO_ARTIFACTS"},
            environment={
                "type": "LINUX_CONTAINER",
                "compute_type": BUILD_COMPUTE,
                "image": BUILD_IMAGE,
                "privileged_mode": True,
                "environment_variables": [
                    {"name": "REPOSITORY_URI", "value": repo.repository_url},
                    {"name": "BASE_IMAGE", "value": base.uri},
                    {"name": "MODEL", "value": args.model},
                    {"name": "MODEL_REVISION", "value": args.model_revision},
                    {"name": "WEIGHTS", "value": args.weights},
                    {"name": "ASR_MODEL", "value": args.asr_model},
                    {"name": "ASR_MODEL_REVISION", "value": args.asr_model_revision},
                    {"name": "IMAGE_TAG", "value": "set-by-each-build"},
                ],
            },
            logs_config={"cloudwatch_logs": {"group_name": logs.name}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )


class BaseImage:
    """The base image the build pulls (`uri`), the pull-through cache rule behind it if any
    (`resources`), and the cache repositories the build role may pull into (`repository_arns`,
    `<prefix>/*`: ECR creates one per upstream repository on its first pull)."""

    def __init__(
        self,
        uri: pulumi.Input[str],
        resources: list[pulumi.Resource],
        repository_arns: pulumi.Input[list[str]],
    ) -> None:
        self.uri, self.resources, self.repository_arns = uri, resources, repository_arns

    @staticmethod
    def create(
        parent: pulumi.Resource, name: str, args: WorkerImageArgs, repo: aws.ecr.Repository
    ) -> BaseImage:
        source: BaseImageSource = base_image_source(args.base_image, args.docker_hub_secret_arn)
        if source.registry is None:
            return BaseImage(args.base_image, [], [])
        prefix = cache_prefix(pulumi.get_stack(), source.registry)
        rule = aws.ecr.PullThroughCacheRule(
            f"{name}-base-cache",
            ecr_repository_prefix=prefix,
            upstream_registry_url=source.upstream_url,
            credential_arn=source.credential_arn or None,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        uri = pulumi.Output.all(repo.repository_url, rule.ecr_repository_prefix).apply(
            lambda v: source.cached_uri(v[0].split("/")[0], v[1])
        )
        # The cache repositories' ARN pattern: this repository's partition, region, account.
        arns = repo.arn.apply(
            lambda arn: [":".join(arn.split(":")[:5]) + f":repository/{prefix}/*"]
        )
        return BaseImage(uri, [rule], arns)


def build_policy(
    log_group_arn: pulumi.Input[str],
    bucket_arn: pulumi.Input[str],
    repository_arn: pulumi.Input[str],
    cache_repository_arns: pulumi.Input[list[str]] | None = None,
) -> dict:
    """CodeBuild's role: its log group, the source objects, push to this repository only, and
    (with a pull-through cache) pull the base image through it."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            *_cache_statements(cache_repository_arns),
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": pulumi.Output.concat(log_group_arn, ":*"),
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                "Resource": pulumi.Output.concat(bucket_arn, f"/{SOURCE_PREFIX}/*"),
            },
            {"Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": bucket_arn},
            # GetAuthorizationToken has no resource-level permissions; it only mints a login.
            {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": [
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:CompleteLayerUpload",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:InitiateLayerUpload",
                    "ecr:PutImage",
                    "ecr:UploadLayerPart",
                ],
                "Resource": repository_arn,
            },
        ],
    }


def _cache_statements(arns: pulumi.Input[list[str]] | None) -> list[dict]:
    """The first pull through a cache rule creates the repository and imports the image.
    https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-iam.html"""
    if not arns:
        return []
    return [
        {
            "Sid": "PullBaseImageThroughCache",
            "Effect": "Allow",
            "Action": [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:BatchImportUpstreamImage",
                "ecr:CreateRepository",
                "ecr:GetDownloadUrlForLayer",
            ],
            "Resource": arns,
        }
    ]
