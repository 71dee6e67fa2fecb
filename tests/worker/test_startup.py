"""Start-up (worker/startup.py, worker/__main__.py): transient AWS answers are waited out,
definite misconfiguration exits 2 with one line, a wrong model or task type is caught by a
test synthesis before any message is received, and a SIGTERM at any moment exits 0."""

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
from botocore.exceptions import ClientError as BotoClientError
from botocore.exceptions import (
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    ReadTimeoutError,
)

from tests.lib.procs import (
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    stop_process,
    wait_for,
    wait_for_log,
)
from tts_fleet.local.speech_server import serve_in_thread
from worker import startup
from worker.jobs import Job
from worker.settings import DEFAULT_MODEL, Settings
from worker.speech import SpeechClient
from worker.startup import Budget, Misconfigured, StartupTimeout

VOICE_DESIGN = "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign"


def client_error(status: int, code: str) -> BotoClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return BotoClientError(response, "HeadBucket")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (client_error(503, "ServiceUnavailable"), True),
        (client_error(503, "SlowDown"), True),
        (client_error(500, "InternalError"), True),
        (client_error(400, "ThrottlingException"), True),
        (client_error(400, "RequestThrottled"), True),
        (client_error(429, "TooManyRequests"), True),
        (EndpointConnectionError(endpoint_url="https://sqs"), True),
        (ConnectionClosedError(endpoint_url="https://sqs"), True),
        (ReadTimeoutError(endpoint_url="https://sqs"), True),
        (client_error(404, "404"), False),  # head_bucket on a missing bucket
        (client_error(403, "403"), False),
        (client_error(400, "AWS.SimpleQueueService.NonExistentQueue"), False),
        (client_error(400, "QueueDoesNotExist"), False),
        (client_error(403, "AccessDenied"), False),
        (client_error(403, "InvalidClientTokenId"), False),
        (NoRegionError(), False),
        (NoCredentialsError(), False),
        (ParamValidationError(report="Bucket: bad"), False),
    ],
)
def test_transient_and_definite_aws_answers(error: Exception, transient: bool) -> None:
    assert startup.aws_error_is_transient(error) is transient


SETTINGS = Settings(
    queue_url="https://sqs.us-east-1.amazonaws.com/1/jobs",
    dlq_url="https://sqs.us-east-1.amazonaws.com/1/dlq",
    output_bucket="out",
    worker_id="w",
)


class FlakyStore:
    """head_bucket and get_queue_attributes that raise the given errors, then answer."""

    def __init__(self, *errors: Exception, dlq_error: Exception | None = None) -> None:
        self.errors = list(errors)
        self.dlq_error = dlq_error
        self.calls: list[str] = []

    def head_bucket(self, Bucket: str) -> dict[str, Any]:
        return self._answer(f"bucket {Bucket}")

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        if QueueUrl == SETTINGS.dlq_url and self.dlq_error is not None:
            raise self.dlq_error
        return self._answer(f"queue {QueueUrl}")

    def _answer(self, what: str) -> dict[str, Any]:
        self.calls.append(what)
        if self.errors:
            raise self.errors.pop(0)
        return {}


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "FIRST_PAUSE_SECONDS", 0.05)
    monkeypatch.setattr(startup, "MAX_PAUSE_SECONDS", 0.2)


def test_a_brownout_at_start_is_waited_out() -> None:
    store = FlakyStore(
        client_error(503, "ServiceUnavailable"),
        EndpointConnectionError(endpoint_url="https://s3"),
        client_error(400, "RequestThrottled"),
        ConnectionClosedError(endpoint_url="https://sqs"),
    )
    assert startup.check_storage(store, store, SETTINGS, Budget(30, threading.Event()))
    assert store.calls.count("bucket out") == 5  # four faults, then the answer


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (client_error(404, "404"), "OUTPUT_BUCKET='out' cannot be used"),
        (client_error(403, "403"), "OUTPUT_BUCKET='out' cannot be used"),
        (NoCredentialsError(), "OUTPUT_BUCKET='out' cannot be reached"),
    ],
)
def test_a_definite_answer_is_misconfiguration_at_once(error: Exception, line: str) -> None:
    store = FlakyStore(error)
    started = time.monotonic()
    with pytest.raises(Misconfigured, match=line):
        startup.check_storage(store, store, SETTINGS, Budget(30, threading.Event()))
    assert time.monotonic() - started < 1 and len(store.calls) == 1


def test_a_dlq_the_role_may_only_send_to_is_fine() -> None:
    store = FlakyStore(dlq_error=client_error(403, "AccessDenied"))
    assert startup.check_storage(store, store, SETTINGS, Budget(30, threading.Event()))


def test_a_fault_that_outlasts_the_budget_is_a_timeout_not_misconfiguration() -> None:
    store = FlakyStore(*[client_error(503, "ServiceUnavailable")] * 1000)
    with pytest.raises(StartupTimeout, match=r"OUTPUT_BUCKET: .*ServiceUnavailable"):
        startup.check_storage(store, store, SETTINGS, Budget(0.5, threading.Event()))


def test_a_stop_ends_the_retries() -> None:
    stop = threading.Event()
    store = FlakyStore(*[client_error(503, "ServiceUnavailable")] * 1000)
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    assert not startup.check_storage(store, store, SETTINGS, Budget(60, stop))
    assert time.monotonic() - started < 2


# ---- the model probe, against the in-process stand-in -----------------------------------


def check_model(served: str, **settings: Any) -> bool:
    with serve_in_thread("tone", model=served) as server:
        values = {"speech_url": server.url, "speech_model": DEFAULT_MODEL, **settings}
        s = Settings(**{**SETTINGS.__dict__, **values})
        speech = SpeechClient(s.speech_url, s.speech_model, s.speech_task_type)
        return startup.check_model(speech, s, Budget(10, threading.Event()))


@pytest.mark.parametrize("task_type", ["", "CustomVoice"])
def test_the_configured_model_and_task_type_pass(task_type: str) -> None:
    assert check_model(DEFAULT_MODEL, speech_task_type=task_type)


@pytest.mark.parametrize(
    ("served", "settings", "line"),
    [
        (
            DEFAULT_MODEL,
            {"speech_model": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"},
            "SPEECH_MODEL='Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice' is not the served model: the "
            "speech server refused a test synthesis (404: The model "
            "`Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice` does not exist.)",
        ),
        (
            VOICE_DESIGN,
            {"speech_model": VOICE_DESIGN},
            "SPEECH_TASK_TYPE=unset (the server's default, CustomVoice) does not fit the "
            f"checkpoint of SPEECH_MODEL='{VOICE_DESIGN}'",
        ),
        (
            DEFAULT_MODEL,
            {"speech_task_type": "Base"},
            f"SPEECH_TASK_TYPE=Base does not fit the checkpoint of SPEECH_MODEL='{DEFAULT_MODEL}'",
        ),
    ],
)
def test_a_refused_probe_names_the_setting(
    served: str, settings: dict[str, str], line: str
) -> None:
    with pytest.raises(Misconfigured) as error:
        check_model(served, **settings)
    assert line in str(error.value)
    assert "\n" not in str(error.value)


class Scripted(BaseHTTPRequestHandler):
    """Answers every request with the next (status, body) of the server's script."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self) -> None:
        script = self.server.script  # type: ignore[attr-defined]
        status, body = script.pop(0) if len(script) > 1 else script[0]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def scripted(*answers: tuple[int, bytes]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.script = list(answers)  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def probe(url: str, seconds: float = 10) -> bool:
    speech = SpeechClient(url, DEFAULT_MODEL)
    s = Settings(**{**SETTINGS.__dict__, "speech_url": url})
    return startup.check_model(speech, s, Budget(seconds, threading.Event()))


def test_a_server_error_during_the_probe_is_retried() -> None:
    voices = (200, b'{"voices": ["vivian"], "uploaded_voices": []}')
    busy = (503, b'{"error": {"message": "engine busy", "code": 503}}')
    with scripted(busy, voices, busy, (200, b"")) as url:
        assert probe(url)
    with scripted(busy) as url, pytest.raises(StartupTimeout, match="engine busy"):
        probe(url, seconds=0.5)


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        ((404, b'{"detail": "Not Found"}'), "SPEECH_URL='http://127.0.0.1:"),
        (
            (404, b'{"error": {"message": "The model does not support Speech API"}}'),
            "is not served for speech",
        ),
        ((200, b'{"voices": ["aiden", "ryan"]}'), "has no voice 'Vivian'"),
    ],
)
def test_the_voice_list_is_checked(answer: tuple[int, bytes], line: str) -> None:
    with scripted(answer) as url, pytest.raises(Misconfigured, match=line):
        probe(url)


def test_the_probe_is_the_body_a_job_sends() -> None:
    speech = SpeechClient("http://x", DEFAULT_MODEL, "CustomVoice")
    job = Job(text=startup.PROBE_TEXT, instructions=startup.PROBE_INSTRUCTIONS)
    assert startup._probe_body(speech) == speech.payload(job, job.text)
    assert startup._probe_body(speech)["task_type"] == "CustomVoice"


# ---- real worker processes ------------------------------------------------------------


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
