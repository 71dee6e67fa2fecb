"""Worker integration fixtures: boto3 clients on the per-test emulator, process cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.lib.procs import Processes


@pytest.fixture
def sqs(aws_env: dict[str, str]) -> Any:
    return boto3.client("sqs")


@pytest.fixture
def s3(aws_env: dict[str, str]) -> Any:
    return boto3.client("s3")


@pytest.fixture
def procs() -> Iterator[Processes]:
    with Processes() as group:
        yield group
