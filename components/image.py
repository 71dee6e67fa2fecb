"""WorkerImage: the container image the GPU task runs — built from `worker/` or given prebuilt.

`worker.image` set → nothing is built; its URI is used as is. Empty → an ECR repository
(immutable tags, scan on push, keep the last N images), a private source bucket holding a zip
of `worker/`, a CodeBuild project that runs `docker build` + push, and a dynamic resource that
starts that build during `pulumi up` and waits for it. The tag is a content hash of `worker/`
and the model, so a code change means a new tag and therefore a new task definition.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict, Field

from components.iam import same_account_condition, trust_policy
from components.image_build import BUILD_TIMEOUT_MINUTES, WorkerImageBuild
from components.image_source import ecr_repository_arn, image_tag, source_files
from components.storage import OutputBucket, OutputBucketArgs

KEEP_IMAGES = 10
SOURCE_PREFIX = "worker-source"
# Privileged mode is what lets a CodeBuild container run `docker build`.
BUILD_IMAGE = "aws/codebuild/standard:7.0"
BUILD_COMPUTE = "BUILD_GENERAL1_LARGE"  # 128 GB disk: CUDA base + baked weights fit

BUILDSPEC = """version: 0.2
phases:
  pre_build:
    commands:
      - REGISTRY="${REPOSITORY_URI%%/*}"
      - aws ecr get-login-password | docker login -u AWS --password-stdin "$REGISTRY"
  build:
    commands:
      - docker build --build-arg MODEL="$MODEL" -t "$REPOSITORY_URI:$IMAGE_TAG" .
      - docker push "$REPOSITORY_URI:$IMAGE_TAG"
"""


def lifecycle_policy(keep: int) -> str:
    rule = {
        "rulePriority": 1,
        "description": f"keep the last {keep} images",
        "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": keep},
        "action": {"type": "expire"},
    }
    return json.dumps({"rules": [rule]})


class WorkerImageArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    image: str = ""
    worker_dir: str
    model: str
    keep_images: int = Field(KEEP_IMAGES, ge=1)


class WorkerImage(pulumi.ComponentResource):
    image_uri: pulumi.Output[str]
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
        else:
            self._build(name, args)
        self.register_outputs({"image_uri": self.image_uri})

    def _build(self, name: str, args: WorkerImageArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        repo = aws.ecr.Repository(
            f"{name}-repo",
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            opts=child,
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=repo.name,
            policy=lifecycle_policy(args.keep_images),
            opts=child,
        )
        tag = image_tag(args.worker_dir, args.model)
        source = OutputBucket(f"{name}-source", OutputBucketArgs(expire_days=0), opts=child)
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
        project = self._project(name, args, repo, source, location)
        build = WorkerImageBuild(
            f"{name}-build",
            image_uri=pulumi.Output.concat(repo.repository_url, ":", tag),
            project_name=project.name,
            source_location=location,
            region=repo.repository_url.apply(lambda url: url.split(".")[3]),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[archive]),
        )
        self.image_uri = build.image_uri
        self.repository_arns = repo.arn.apply(lambda arn: [arn])

    def _project(
        self,
        name: str,
        args: WorkerImageArgs,
        repo: aws.ecr.Repository,
        source: OutputBucket,
        location: pulumi.Output[str],
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
            policy=pulumi.Output.json_dumps(build_policy(logs.arn, source.bucket_arn, repo.arn)),
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
                    {"name": "MODEL", "value": args.model},
                    {"name": "IMAGE_TAG", "value": "set-by-each-build"},
                ],
            },
            logs_config={"cloudwatch_logs": {"group_name": logs.name}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )


def build_policy(
    log_group_arn: pulumi.Input[str],
    bucket_arn: pulumi.Input[str],
    repository_arn: pulumi.Input[str],
) -> dict:
    """CodeBuild's role: its log group, the source objects, push to this repository only."""
    return {
        "Version": "2012-10-17",
        "Statement": [
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
