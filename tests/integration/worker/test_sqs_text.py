"""The DLQ copy's attributes hold only characters SQS accepts, cut by UTF-8 bytes."""

from __future__ import annotations

import threading

import pytest

from tests.lib.fake_worker import FakeSpeech, make_worker
from tests.lib.procs import make_queues_and_bucket, receive_all
from worker.outputs import sqs_text


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("plain text", 100, "plain text"),
        ("tab\tnew\nline\rok", 100, "tab\tnew\nline\rok"),  # the three allowed controls
        ("a\x00b\x01c\x1fd\x7fe", 100, "a\\x00b\\x01c\\x1fd\x7fe"),  # DEL is allowed
        ("lone \ud800 and \udfff", 100, "lone \\ud800 and \\udfff"),
        ("\ufffe\uffff\ufffd", 100, "\\ufffe\\uffff\ufffd"),
        ("\ud7ff\ue000\U0001f600\U0010ffff", 100, "\ud7ff\ue000\U0001f600\U0010ffff"),
        ("é" * 600, 1_000, "é" * 500),  # bytes, not characters
        ("ab€", 4, "ab"),  # a character cut in half is dropped
        ("\x01" * 300, 1_000, "\\x01" * 250),  # the escapes count too
    ],
)
def test_sqs_text(text: str, limit: int, expected: str) -> None:
    assert sqs_text(text, limit) == expected
    assert len(sqs_text(text, limit).encode()) <= limit


@pytest.mark.timeout(60)
def test_dlq_reason_with_a_control_character_is_escaped(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody='{"text":"hi","\\u0001x":1}')
    worker = make_worker(names, sqs, s3, FakeSpeech())
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        dead = receive_all(sqs, names["dlq_url"], expected=1, timeout=30)
    finally:
        worker.request_stop()
        thread.join(60)
    reason = dead[0]["MessageAttributes"]["error"]["StringValue"]
    assert reason == "invalid job: \\x01x: unknown field"
