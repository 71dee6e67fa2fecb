"""Where a stack's jobs go (Target) and the one boto3 client per service per process.

boto3 reads AWS_ENDPOINT_URL by itself (botocore >= 1.31), so every client works unchanged
against the local emulator. Clients are shared across threads; resources are not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import boto3
from botocore.config import Config

from worker.jobs import DEFAULT_MAX_TEXT_CHARS


@dataclass(frozen=True)
class AwsSettings:
    """--region / --profile as given on the command line; None: the environment's
    (AWS_REGION, AWS_DEFAULT_REGION, AWS_PROFILE) or the profile's own region."""

    region: str | None = None
    profile: str | None = None


@dataclass(frozen=True)
class Target:
    """Where a stack's jobs go and its outputs land, and the text limit its workers apply."""

    queue_url: str | None
    dlq_url: str | None
    bucket: str | None
    prefix: str = ""
    cluster: str | None = None
    service: str | None = None
    events_queue_url: str | None = None  # completion events (notifications.enabled), if any
    controller_arn: str | None = None  # the scaling controller (scaling.mode: controller)
    # The stack's worker.maxTextChars (its maxTextChars output); a target given by URL, or a
    # stack deployed before the output existed, has the worker's default.
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    # The stack's scaling.deadlineMinutes (its deadlineMinutes output): the deadline a submit
    # without --deadline/--within gives its batch; 0 (no output, or given by URL): none.
    deadline_minutes: int = 0
    aws: AwsSettings = field(default_factory=AwsSettings)


@cache
def aws_client(
    service: str,
    endpoint: str | None = None,
    region: str | None = None,
    profile: str | None = None,
) -> Any:
    """One client per service (and endpoint, region, profile) per process; a generous pool
    for the sender threads."""
    del endpoint  # part of the cache key only: boto3 reads AWS_ENDPOINT_URL itself
    session = boto3.Session(profile_name=profile) if profile else boto3.Session()
    region = region or session.region_name
    if not region:
        raise NoRegion("no AWS region: pass --region, set AWS_REGION, or use a profile with one")
    return session.client(service, region_name=region, config=Config(max_pool_connections=32))


class NoRegion(Exception):
    """No region from the flag, the environment or the profile; one line saying what to do."""


def client_for(service: str, settings: AwsSettings | None = None) -> Any:
    """The shared client; `settings` (the command's flags) win over the environment."""
    settings = settings or AwsSettings()
    # botocore reads AWS_DEFAULT_REGION but not AWS_REGION, which other SDKs prefer, so the
    # command reads both (AWS_REGION first, as the AWS CLI v2 does).
    region = (
        settings.region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or None
    )
    profile = settings.profile or os.environ.get("AWS_PROFILE") or None
    return aws_client(service, os.environ.get("AWS_ENDPOINT_URL"), region, profile)
