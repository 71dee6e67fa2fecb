"""What goes into the worker image and what it is called: the source files of `worker/` and
the content-hash tag, plus parsing a prebuilt ECR image URI. Pure helpers for image.py."""

from __future__ import annotations

import hashlib
import re
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


def image_tag(worker_dir: str | Path, model: str) -> str:
    """Content hash of `worker/` (paths + bytes) and the model baked into the image."""
    root = Path(worker_dir)
    digest = hashlib.sha256(f"model={model}\n".encode())
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
