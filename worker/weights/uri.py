"""`s3://bucket/prefix/`: where a snapshot and its weights.json are."""

from __future__ import annotations

import re
from dataclasses import dataclass

# S3 bucket naming rules (S3 user guide, "General purpose bucket naming rules"): 3-63
# characters of lowercase letters, digits, dots and hyphens, starting and ending alphanumeric.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ending in "/"

    def key(self, path: str) -> str:
        return f"{self.prefix}{path}"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_uri(uri: str) -> S3Location:
    """`s3://bucket[/prefix]` as a location (the prefix taken as a directory); ValueError
    with one line otherwise."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r}: must start with s3://")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise ValueError(f"{uri!r}: {bucket!r} is not an S3 bucket name")
    prefix = prefix.strip("/")
    if any(segment in ("", ".", "..") for segment in prefix.split("/")) and prefix:
        raise ValueError(f"{uri!r}: the prefix has an empty, '.' or '..' segment")
    return S3Location(bucket, f"{prefix}/" if prefix else "")
