"""The fault proxy (tts_fleet/local/faults.py): faithful outside a brown-out, and inside one
each fault as botocore sees it from real SQS and S3, the lost answer's write landed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

from tts_fleet.local.emulator import REGION
from tts_fleet.local.faults import Brownout, Fault, FaultProxy

# One attempt per call: the test sees each injected fault, not botocore's retry of it.
ONCE = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def proxy(aws_env: dict[str, str], moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint, Brownout(random.Random(7), rate=1.0)) as running:
        yield running


def through(proxy: FaultProxy, service: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=proxy.url, config=ONCE)


def test_a_brownout_faults_only_its_services_and_only_while_it_lasts() -> None:
    brownout = Brownout(random.Random(1), rate=1.0, services={"sqs"})
    assert brownout.fault("sqs") is None  # not started
    brownout.start(60)
    assert brownout.fault("s3") is None
    assert all(brownout.fault("sqs") in set(Fault) for _ in range(40))
    assert sum(brownout.injected.values()) == 40
    assert {key.split(" ", 1)[0] for key in brownout.injected} == {"sqs"}
    assert len(brownout.injected) == len(Fault)  # 40 draws reach every kind
    brownout.stop()
    assert brownout.fault("sqs") is None and not brownout.active()


def test_the_rate_is_the_share_of_requests_faulted() -> None:
    brownout = Brownout(random.Random(2), rate=0.25)
    brownout.start(60)
    faulted = sum(brownout.fault("s3") is not None for _ in range(4000))
    assert 900 < faulted < 1100


def test_outside_a_brownout_sqs_and_s3_answer_through_the_proxy(proxy: FaultProxy) -> None:
    sqs, s3 = through(proxy, "sqs"), through(proxy, "s3")
    queue_url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=queue_url)["Messages"]] == ["hello"]
    s3.create_bucket(Bucket="outputs")
    s3.put_object(Bucket="outputs", Key="k", Body=b"12345")
    assert s3.head_object(Bucket="outputs", Key="k")["ContentLength"] == 5  # HEAD keeps its length
    assert s3.get_object(Bucket="outputs", Key="k")["Body"].read() == b"12345"
    assert not proxy.brownout.injected


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        (Fault.UNAVAILABLE, 503, "ServiceUnavailable"),
        (Fault.THROTTLED, 400, "RequestThrottled"),
        (Fault.LOST_ANSWER, 500, "InternalError"),
    ],
)
def test_an_sqs_fault_is_the_error_sqs_answers(
    proxy: FaultProxy, fault: Fault, status: int, code: str
) -> None:
    queue_url = boto3.client("sqs").create_queue(QueueName="q")["QueueUrl"]
    proxy.brownout.kinds = (fault,)
    proxy.brownout.start(60)
    with pytest.raises(ClientError) as raised:
        through(proxy, "sqs").send_message(QueueUrl=queue_url, MessageBody="hello")
    error = raised.value.response
    assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (status, code)
    landed = boto3.client("sqs").receive_message(QueueUrl=queue_url).get("Messages", [])
    assert len(landed) == (1 if fault is Fault.LOST_ANSWER else 0)


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        (Fault.UNAVAILABLE, 503, "SlowDown"),
        (Fault.THROTTLED, 503, "SlowDown"),
        (Fault.LOST_ANSWER, 500, "InternalError"),
    ],
)
def test_an_s3_fault_is_the_error_s3_answers(
    proxy: FaultProxy, fault: Fault, status: int, code: str
) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="outputs")
    proxy.brownout.kinds = (fault,)
    proxy.brownout.start(60)
    with pytest.raises(ClientError) as raised:
        through(proxy, "s3").put_object(Bucket="outputs", Key="k", Body=b"audio")
    error = raised.value.response
    assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (status, code)
    landed = s3.list_objects_v2(Bucket="outputs").get("KeyCount", 0)
    assert landed == (1 if fault is Fault.LOST_ANSWER else 0)


def test_a_reset_closes_the_connection_without_an_answer(proxy: FaultProxy) -> None:
    queue_url = boto3.client("sqs").create_queue(QueueName="q")["QueueUrl"]
    proxy.brownout.kinds = (Fault.RESET,)
    proxy.brownout.start(60)
    with pytest.raises(ConnectionClosedError):
        through(proxy, "sqs").send_message(QueueUrl=queue_url, MessageBody="hello")
    assert not boto3.client("sqs").receive_message(QueueUrl=queue_url).get("Messages")
