"""The throttling proxy (tts_fleet/local/throttle.py): S3 through it answers exactly as S3
without it (bodies, ranges, HEADs, errors) and each request is recorded. How fast it lets
bytes through, per connection and in all, is the benchmark's to show
(benchmarks/weights_fetch.py), not a timed test's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tts_fleet.local.emulator import REGION
from tts_fleet.local.throttle import Request, ThrottleProxy

BUCKET = "tts-throttle-test"
BODY = os.urandom(300_000)


@pytest.fixture
def proxy(aws_env: dict[str, str], moto_endpoint: str) -> Iterator[ThrottleProxy]:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    boto3.client("s3").put_object(Bucket=BUCKET, Key="a/blob.bin", Body=BODY)
    with ThrottleProxy(moto_endpoint, bytes_per_second=50 * 1024 * 1024) as running:
        yield running


def through(proxy: ThrottleProxy) -> Any:
    return boto3.client("s3", region_name=REGION, endpoint_url=proxy.url)


def test_answers_pass_through_whole(proxy: ThrottleProxy) -> None:
    s3 = through(proxy)
    assert s3.get_object(Bucket=BUCKET, Key="a/blob.bin")["Body"].read() == BODY
    part = s3.get_object(Bucket=BUCKET, Key="a/blob.bin", Range="bytes=1000-1999")
    assert part["Body"].read() == BODY[1000:2000]
    assert part["ContentRange"] == f"bytes 1000-1999/{len(BODY)}"
    assert s3.head_object(Bucket=BUCKET, Key="a/blob.bin")["ContentLength"] == len(BODY)
    s3.put_object(Bucket=BUCKET, Key="a/new.bin", Body=b"xyz")
    assert boto3.client("s3").get_object(Bucket=BUCKET, Key="a/new.bin")["Body"].read() == b"xyz"


def test_errors_pass_through_as_s3s(proxy: ThrottleProxy) -> None:
    with pytest.raises(ClientError) as error:
        through(proxy).get_object(Bucket=BUCKET, Key="a/missing.bin")
    assert error.value.response["Error"]["Code"] == "NoSuchKey"


def test_every_request_is_recorded_with_its_range(proxy: ThrottleProxy) -> None:
    s3 = through(proxy)
    s3.get_object(Bucket=BUCKET, Key="a/blob.bin", Range="bytes=0-9")["Body"].read()
    s3.head_object(Bucket=BUCKET, Key="a/blob.bin")
    assert proxy.requests == [
        Request("GET", f"/{BUCKET}/a/blob.bin", "bytes=0-9"),
        Request("HEAD", f"/{BUCKET}/a/blob.bin", ""),
    ]
    proxy.clear()
    assert proxy.requests == []


def test_a_rate_must_be_positive(moto_endpoint: str) -> None:
    with pytest.raises(ValueError, match="bytes_per_second must be positive"):
        ThrottleProxy(moto_endpoint, bytes_per_second=0)
