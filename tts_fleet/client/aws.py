"""Where a stack's jobs go (Target) and the one boto3 client per service per process.

boto3 reads AWS_ENDPOINT_URL by itself (botocore >= 1.31), so every client works unchanged
against the local emulator. Clients are shared across threads; resources are not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Any

import boto3
from botocore.config import Config


@dataclass(frozen=True)
class Target:
    """Where a stack's jobs go and its outputs land."""

    queue_url: str | None
    dlq_url: str | None
    bucket: str | None
    prefix: str = ""
    cluster: str | None = None
    service: str | None = None


@cache
def aws_client(service: str, endpoint: str | None = None) -> Any:
    """One client per service per process; generous pool for the sender threads."""
    del endpoint  # part of the cache key only: boto3 reads AWS_ENDPOINT_URL itself
    # botocore reads AWS_DEFAULT_REGION but not AWS_REGION, which other SDKs prefer.
    region = os.environ.get("AWS_REGION") or None
    return boto3.client(service, region_name=region, config=Config(max_pool_connections=32))


def client_for(service: str) -> Any:
    return aws_client(service, os.environ.get("AWS_ENDPOINT_URL"))
