"""What goes into the worker image and what it is called: the source files of `worker/`, the
content-hash tag, parsing a prebuilt ECR image URI, and where the build pulls its base image
from (a pull-through cache rule or directly). Pure helpers for image.py."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Never part of the image or its tag: caches the interpreter or tools leave behind
# (worker/.dockerignore lists the same).
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
TAG_LENGTH = 20
_ECR_URI = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/([^:@]+)")


def source_files(worker_dir: str | Path) -> list[Path]:
    """Files that make up the image source, sorted, without caches."""
    root = Path(worker_dir)
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and not IGNORED_DIRS.intersection(p.relative_to(root).parts)
        and not p.name.endswith(IGNORED_SUFFIXES)
    )


def image_tag(
    worker_dir: str | Path, model: str, build_args: Mapping[str, str] | None = None
) -> str:
    """Content hash of `worker/` (paths + bytes), the model baked into the image and the other
    build args (base image, weights revision): any of them changing means a new image."""
    root = Path(worker_dir)
    digest = hashlib.sha256(f"model={model}\n".encode())
    for key, value in sorted((build_args or {}).items()):
        digest.update(f"{key}={value}\n".encode())
    for path in source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:TAG_LENGTH]


def ecr_repository_arn(image_uri: str) -> str | None:
    """The ECR repository ARN of a prebuilt image URI; None for other registries."""
    match = _ECR_URI.match(image_uri)
    if not match:
        return None
    account, region, china, repository = match.groups()
    partition = "aws-cn" if china else "aws"
    return f"arn:{partition}:ecr:{region}:{account}:repository/{repository}"


# ---- the base image: where the build pulls it from -------------------------------------

# Upstream registries a pull-through cache rule can front, by the host in an image reference,
# and whether ECR needs a Secrets Manager credential for them. ECR Public, Quay and the
# Kubernetes registry need none; Docker Hub always does, even for public images.
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html
DOCKER_HUB = "docker-hub"
DOCKER_HUB_URL = "registry-1.docker.io"
DOCKER_HUB_HOSTS = frozenset({"docker.io", "index.docker.io", DOCKER_HUB_URL})
PULL_THROUGH_REGISTRIES = {
    "public.ecr.aws": "ecr-public",
    "quay.io": "quay",
    "registry.k8s.io": "k8s",
}
# ecrRepositoryPrefix: 2-30 characters of [a-z0-9._-] (CreatePullThroughCacheRule).
# https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreatePullThroughCacheRule.html
MAX_PREFIX_LENGTH = 30
_PREFIX_INVALID = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class BaseImageSource:
    """How the build gets `worker.baseImage`: through a pull-through cache rule (`registry`
    set) or directly from `reference` (`registry` None)."""

    reference: str  # the configured image, as written
    registry: str | None = None  # the rule's upstreamRegistry, e.g. "ecr-public"
    upstream_url: str = ""  # the rule's upstreamRegistryUrl, e.g. "public.ecr.aws"
    path: str = ""  # repository[:tag|@digest] under the upstream registry
    credential_arn: str = ""  # Secrets Manager secret (Docker Hub only)

    def cached_uri(self, registry_host: str, prefix: str) -> str:
        """The reference the build pulls: `<account>.dkr.ecr.<region>.<suffix>/<prefix>/<path>`."""
        return f"{registry_host}/{prefix}/{self.path}" if self.registry else self.reference


def split_reference(reference: str) -> tuple[str, str]:
    """(registry host, rest) of an image reference; Docker Hub when the first component is
    not a host (no '.' or ':' and not `localhost`), as Docker itself decides."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", reference


def base_image_source(reference: str, docker_hub_secret_arn: str = "") -> BaseImageSource:
    host, path = split_reference(reference)
    if host in PULL_THROUGH_REGISTRIES:
        return BaseImageSource(reference, PULL_THROUGH_REGISTRIES[host], host, path)
    if host in DOCKER_HUB_HOSTS and docker_hub_secret_arn:
        # Official images live under library/ on Docker Hub (`ubuntu` is `library/ubuntu`).
        path = path if "/" in path.split(":")[0].split("@")[0] else f"library/{path}"
        return BaseImageSource(reference, DOCKER_HUB, DOCKER_HUB_URL, path, docker_hub_secret_arn)
    return BaseImageSource(reference)


def cache_prefix(stack: str, registry: str) -> str:
    """A rule prefix unique per stack and upstream: rules are per account and region, so two
    stacks there must not both claim `ecr-public`. Long stack names are cut and hashed."""
    slug = _PREFIX_INVALID.sub("-", stack.lower()).strip("-") or "stack"
    prefix = f"tts-{slug}-{registry}"
    if len(prefix) <= MAX_PREFIX_LENGTH:
        return prefix
    digest = hashlib.sha256(stack.encode()).hexdigest()[:6]
    room = MAX_PREFIX_LENGTH - len(f"tts--{digest}-{registry}")
    return f"tts-{slug[:room].strip('-')}-{digest}-{registry}"
