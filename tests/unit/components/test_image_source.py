"""Where the build pulls `worker.baseImage` from: a pull-through cache rule the stack creates
(ECR Public, Quay, Kubernetes without credentials; Docker Hub with a Secrets Manager secret)
or the image's own registry. Pure routing first, then the resources under mocks.

Mocks cannot prove that ECR imports the upstream image or that CodeBuild's pull succeeds.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from components.image import BUILD_ARGS, BUILDSPEC, WorkerImage, WorkerImageArgs
from components.image_source import (
    MAX_PREFIX_LENGTH,
    BaseImageSource,
    base_image_source,
    cache_prefix,
    split_reference,
)
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import WORKER_DIR, policy

ACCOUNT = "123456789012"
REGISTRY = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
SECRET = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:ecr-pullthroughcache/hub-AbCdEf"
VLLM_ECR_PUBLIC = "public.ecr.aws/q9t5s3a7/vllm-release-repo:0123abc-x86_64"
# CreatePullThroughCacheRule's ecrRepositoryPrefix pattern (botocore's ECR model).
PREFIX_PATTERN = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")


# The default base image is pinned by digest (tts_fleet/config/models.py DEFAULT_BASE_IMAGE).
DIGEST = "sha256:3cd9086bdb30f7c9bc08a3fa621d9842e0d3f6f9291aeb4677e0547817c10b12"


@pytest.mark.parametrize(
    ("reference", "split"),
    [
        ("vllm/vllm-openai:v0.30.0", ("docker.io", "vllm/vllm-openai:v0.30.0")),
        ("ubuntu:24.04", ("docker.io", "ubuntu:24.04")),
        ("docker.io/vllm/vllm-openai:v1", ("docker.io", "vllm/vllm-openai:v1")),
        (VLLM_ECR_PUBLIC, ("public.ecr.aws", "q9t5s3a7/vllm-release-repo:0123abc-x86_64")),
        ("localhost:5000/x:1", ("localhost:5000", "x:1")),
        ("ghcr.io/acme/tts@sha256:ab", ("ghcr.io", "acme/tts@sha256:ab")),
    ],
)
def test_split_reference_reads_the_registry_as_docker_does(
    reference: str, split: tuple[str, str]
) -> None:
    assert split_reference(reference) == split


@pytest.mark.parametrize(
    ("reference", "secret", "source"),
    [
        (
            VLLM_ECR_PUBLIC,
            "",
            BaseImageSource(
                VLLM_ECR_PUBLIC,
                "ecr-public",
                "public.ecr.aws",
                "q9t5s3a7/vllm-release-repo:0123abc-x86_64",
            ),
        ),
        (
            "quay.io/acme/vllm:1",
            "",
            BaseImageSource("quay.io/acme/vllm:1", "quay", "quay.io", "acme/vllm:1"),
        ),
        # Docker Hub needs a credential for a cache rule even for public images: direct.
        ("vllm/vllm-openai:v0.30.0", "", BaseImageSource("vllm/vllm-openai:v0.30.0")),
        (
            "vllm/vllm-openai:v0.30.0",
            SECRET,
            BaseImageSource(
                "vllm/vllm-openai:v0.30.0",
                "docker-hub",
                "registry-1.docker.io",
                "vllm/vllm-openai:v0.30.0",
                SECRET,
            ),
        ),
        (
            "ubuntu:24.04",
            SECRET,
            BaseImageSource(
                "ubuntu:24.04", "docker-hub", "registry-1.docker.io", "library/ubuntu:24.04", SECRET
            ),
        ),
        # A registry no cache rule fronts without more setup: pulled as is.
        ("ghcr.io/acme/tts:1", SECRET, BaseImageSource("ghcr.io/acme/tts:1")),
    ],
)
def test_base_image_source(reference: str, secret: str, source: BaseImageSource) -> None:
    assert base_image_source(reference, secret) == source


def test_the_cached_uri_is_the_rule_prefix_under_this_registry() -> None:
    source = base_image_source(VLLM_ECR_PUBLIC)
    assert source.cached_uri(REGISTRY, "tts-dev-ecr-public") == (
        f"{REGISTRY}/tts-dev-ecr-public/q9t5s3a7/vllm-release-repo:0123abc-x86_64"
    )
    direct = base_image_source("vllm/vllm-openai:v0.30.0")
    assert direct.cached_uri(REGISTRY, "ignored") == "vllm/vllm-openai:v0.30.0"


@pytest.mark.parametrize(
    ("stack", "prefix"),
    [
        ("dev", "tts-dev-ecr-public"),
        ("Prod_EU", "tts-prod-eu-ecr-public"),
        # Over 30 characters: cut, plus 6 hex of the full name's SHA-256.
        ("org/team/a-very-long-stack-name", "tts-org-team-dcbd08-ecr-public"),
    ],
)
def test_cache_prefix_is_per_stack_and_valid(stack: str, prefix: str) -> None:
    assert cache_prefix(stack, "ecr-public") == prefix
    assert len(prefix) <= MAX_PREFIX_LENGTH
    assert PREFIX_PATTERN.match(prefix)


def test_long_stack_names_stay_distinct() -> None:
    one = cache_prefix("organisation/project/stack-one", "docker-hub")
    two = cache_prefix("organisation/project/stack-two", "docker-hub")
    assert one != two and len(one) == len(two) <= MAX_PREFIX_LENGTH


# ---- the resources ------------------------------------------------------------------------


def build(**args: Any) -> RecordingMocks:
    return run_program(
        lambda: WorkerImage(
            "img",
            WorkerImageArgs(
                image="", worker_dir=str(WORKER_DIR), model="m", **{"model_revision": "r", **args}
            ),
        )
    )


def env_of(mocks: RecordingMocks) -> dict[str, str]:
    project = mocks.one("aws:codebuild/project:Project").inputs
    return {v["name"]: v["value"] for v in project["environment"]["environmentVariables"]}


def cache_statements(mocks: RecordingMocks) -> list[dict[str, Any]]:
    statements = policy(mocks.one("aws:iam/rolePolicy:RolePolicy"))["Statement"]
    return [s for s in statements if s.get("Sid") == "PullBaseImageThroughCache"]


def test_an_ecr_public_base_goes_through_a_rule_with_no_credential() -> None:
    mocks = build(base_image=VLLM_ECR_PUBLIC)
    rule = mocks.one(RULE)
    assert rule.name == "img-base-cache"
    assert rule.inputs == {
        "ecrRepositoryPrefix": "tts-dev-ecr-public",
        "upstreamRegistryUrl": "public.ecr.aws",
    }
    env = env_of(mocks)
    assert env["BASE_IMAGE"] == (
        f"{REGISTRY}/tts-dev-ecr-public/q9t5s3a7/vllm-release-repo:0123abc-x86_64"
    )
    assert cache_statements(mocks) == [
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
            "Resource": [f"arn:aws:ecr:us-east-1:{ACCOUNT}:repository/tts-dev-ecr-public/*"],
        }
    ]


def test_a_docker_hub_base_with_a_secret_goes_through_a_credentialed_rule() -> None:
    mocks = build(base_image="vllm/vllm-openai:v0.30.0", docker_hub_secret_arn=SECRET)
    assert mocks.one(RULE).inputs == {
        "ecrRepositoryPrefix": "tts-dev-docker-hub",
        "upstreamRegistryUrl": "registry-1.docker.io",
        "credentialArn": SECRET,
    }
    assert env_of(mocks)["BASE_IMAGE"] == (
        f"{REGISTRY}/tts-dev-docker-hub/vllm/vllm-openai:v0.30.0"
    )
    assert len(cache_statements(mocks)) == 1


def test_the_default_base_comes_through_the_stacks_ecr_public_cache_rule() -> None:
    # No anonymous Docker Hub pull in CodeBuild's shared egress (its `toomanyrequests` failed
    # whole deploys): the default is Docker's official Python image as mirrored on ECR Public,
    # pulled through a rule the stack creates; worker/Dockerfile installs the pinned vLLM on it.
    mocks = build()
    assert mocks.one(RULE).inputs == {
        "ecrRepositoryPrefix": "tts-dev-ecr-public",
        "upstreamRegistryUrl": "public.ecr.aws",
    }
    env = env_of(mocks)
    assert {k: env[k] for k in ("BASE_IMAGE", "MODEL", "MODEL_REVISION")} == {
        "BASE_IMAGE": f"{REGISTRY}/tts-dev-ecr-public/docker/library/python:3.12-bookworm@{DIGEST}",
        "MODEL": "m",
        "MODEL_REVISION": "r",
    }
    assert len(cache_statements(mocks)) == 1


def test_a_docker_hub_base_without_a_secret_is_pulled_as_given_with_no_rule() -> None:
    mocks = build(base_image="vllm/vllm-openai:v0.30.0")
    assert mocks.of_type(RULE) == []
    assert env_of(mocks)["BASE_IMAGE"] == "vllm/vllm-openai:v0.30.0"
    assert cache_statements(mocks) == []


def test_the_model_revision_reaches_the_build() -> None:
    assert env_of(build(model_revision="0f1e2d3c"))["MODEL_REVISION"] == "0f1e2d3c"


def test_every_build_arg_is_passed_and_is_an_arg_of_the_dockerfile() -> None:
    dockerfile = (WORKER_DIR / "Dockerfile").read_text()
    declared = set(re.findall(r"^ARG (\w+)", dockerfile, flags=re.MULTILINE))
    assert set(BUILD_ARGS) == {
        "BASE_IMAGE",
        "MODEL",
        "MODEL_REVISION",
        "WEIGHTS",
        "ASR_MODEL",
        "ASR_MODEL_REVISION",
    }
    assert set(BUILD_ARGS) <= declared
    for arg in BUILD_ARGS:
        assert f'--build-arg {arg}=\\"${arg}\\"' in BUILDSPEC  # JSON-quoted in the YAML
    assert "FROM ${BASE_IMAGE}" in dockerfile
    assert 'revision=os.environ["MODEL_REVISION"]' in dockerfile
    # The variables the build args read are the project's (IMAGE_TAG is set per build).
    names = set(env_of(build()))
    assert names == {"REPOSITORY_URI", "IMAGE_TAG", *BUILD_ARGS}


def test_the_buildspec_pulls_the_base_image_with_retries_before_building() -> None:
    lines = [
        command
        for phase in yaml.safe_load(BUILDSPEC)["phases"].values()
        for command in phase["commands"]
    ]
    pull = next(i for i, line in enumerate(lines) if 'docker pull "$BASE_IMAGE"' in line)
    build_at = next(i for i, line in enumerate(lines) if line.startswith("docker buildx build"))
    assert pull < build_at
    assert "for n in 1 2 3 4" in lines[pull]
    assert json.dumps(BUILDSPEC)  # plain text, no Output inside
