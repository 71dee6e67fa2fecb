"""Start-up of real worker processes (python -m worker): a wrong model or task type exits 2
before any receive, an AWS brownout at start is waited out, a SIGTERM at any moment exits 0.
The start-up logic in process is in tests/unit/worker/test_startup.py."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.lib.procs import (
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    stop_process,
    wait_for,
    wait_for_log,
)
from tests.unit.worker.test_startup import VOICE_DESIGN
from worker.jobs import Job
from worker.settings import DEFAULT_MODEL


def reachable(sqs: Any, s3: Any) -> dict[str, str]:
    return {"AWS_REGION": "us-east-1", **env_for(make_queues_and_bucket(sqs, s3))}


def no_job_touched(sqs: Any, s3: Any, env: dict[str, str]) -> None:
    """The job is still queued, never received, and nothing went to the DLQ or S3."""
    attrs = sqs.get_queue_attributes(QueueUrl=env["QUEUE_URL"], AttributeNames=["All"])
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "1"
    received = sqs.receive_message(
        QueueUrl=env["QUEUE_URL"], AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert received[0]["Attributes"]["ApproximateReceiveCount"] == "1"  # this receive only
    dlq = sqs.get_queue_attributes(QueueUrl=env["DLQ_URL"], AttributeNames=["All"])
    assert dlq["Attributes"]["ApproximateNumberOfMessages"] == "0"
    assert "Contents" not in s3.list_objects_v2(Bucket=env["OUTPUT_BUCKET"])


@pytest.mark.processes
@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("served", "worker", "setting"),
    [
        (VOICE_DESIGN, {"SPEECH_MODEL": VOICE_DESIGN}, "SPEECH_TASK_TYPE=unset"),
        (DEFAULT_MODEL, {"SPEECH_MODEL": "Qwen/Other-CustomVoice"}, "SPEECH_MODEL="),
        (DEFAULT_MODEL, {"SPEECH_TASK_TYPE": "VoiceDesign"}, "SPEECH_TASK_TYPE=VoiceDesign"),
    ],
)
def test_a_wrong_model_or_task_type_exits_2_before_any_receive(
    aws_env: dict[str, str], sqs: Any, s3: Any, served: str, worker: dict[str, str], setting: str
) -> None:
    env = reachable(sqs, s3)
    sqs.send_message(QueueUrl=env["QUEUE_URL"], MessageBody=Job(id="a", text="Hi.").body())
    with start_speech_server("tone", extra_args=("--model", served)) as speech:
        proc = start_worker(aws_env, SPEECH_URL=speech.url, **env, **worker)
        try:
            assert proc.wait(30) == 2
        finally:
            stop_process(proc)
    errors = [line for line in proc.log().splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.log()
    assert f"configuration error: {setting}" in errors[0]
    assert "polling" not in proc.log()
    no_job_touched(sqs, s3, env)


class BrownoutProxy(BaseHTTPRequestHandler):
    """503 to every AWS call until `until`, then a plain forwarder to moto."""

    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server: Any = self.server
        if time.monotonic() < server.until:
            server.refused += 1
            self._reply(
                503, {"Content-Type": "application/xml"}, b"<Error><Code>SlowDown</Code></Error>"
            )
            return
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        answer = httpx.request(
            self.command, server.target + self.path, headers=headers, content=body
        )
        self._reply(answer.status_code, dict(answer.headers), answer.content)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _handle

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        skip = ("content-length", "transfer-encoding", "connection", "content-encoding")
        for name, value in headers.items():
            if name.lower() not in skip:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def brownout(target: str, seconds: float) -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), BrownoutProxy)
    server.target, server.until, server.refused = target, time.monotonic() + seconds, 0
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_an_aws_brownout_at_start_is_waited_out(aws_env: dict[str, str], sqs: Any, s3: Any) -> None:
    env = reachable(sqs, s3)
    sqs.send_message(QueueUrl=env["QUEUE_URL"], MessageBody=Job(id="a", text="Hi.").body())
    with (
        start_speech_server("tone") as speech,
        brownout(aws_env["AWS_ENDPOINT_URL"], seconds=6) as proxy,
    ):
        aws = {**aws_env, "AWS_ENDPOINT_URL": proxy.url}
        proc = start_worker(aws, SPEECH_URL=speech.url, HEALTH_TIMEOUT_SECONDS=60, **env)
        try:
            wait_for_log(proc, r"job a done", timeout=60)
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            stop_process(proc)
    assert proxy.refused > 3  # botocore's own retries gave up several times: ours carried on
    assert "not ready, again in" in proc.log()
    assert "configuration error" not in proc.log()


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_sigterm_during_the_imports_exits_0(aws_env: dict[str, str], sqs: Any, s3: Any) -> None:
    env = reachable(sqs, s3)

    def catches_sigterm(pid: int) -> bool:
        # The kernel's mask of signals with a handler: set once worker/__main__.py's first
        # lines ran, before the imports. A fixed delay raced the interpreter's own start-up.
        with open(f"/proc/{pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
        return bool(int(caught.split()[1], 16) & 1 << (signal.SIGTERM - 1))

    with start_speech_server("tone") as speech:
        proc = start_worker(aws_env, SPEECH_URL=speech.url, **env)
        try:
            wait_for(lambda: catches_sigterm(proc.pid), 30, 0.001, "the SIGTERM handler")
            proc.send_signal(signal.SIGTERM)  # the imports (most of a second) are under way
            assert proc.wait(20) == 0, proc.log()
        finally:
            stop_process(proc)
        assert "stopped during start-up" in proc.log()
        assert "polling" not in proc.log()


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_stop_repeated_until_the_exit_is_still_a_clean_exit(
    aws_env: dict[str, str], sqs: Any, s3: Any
) -> None:
    # The entrypoint repeats SIGTERM every second until the worker is gone; one landing while
    # Python finalizes (default handlers back) would otherwise end a clean drain as -15.
    env = reachable(sqs, s3)
    with start_speech_server("tone") as speech:
        proc = start_worker(aws_env, SPEECH_URL=speech.url, **env)
        try:
            wait_for_log(proc, "polling", timeout=30)
            while proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.005)
            assert proc.returncode == 0, proc.log()
        finally:
            stop_process(proc)
