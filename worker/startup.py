"""Start-up checks (DESIGN §5.1): storage reachable, speech server healthy, model and task right.

Each check ends one of three ways: it passes; a definite misconfiguration, named in one line
(`Misconfigured`: the caller exits 2); or still not passing when the start-up budget runs
out (`StartupTimeout`: exit 3). A transient answer (5xx, throttling, a reset connection, an
endpoint that does not answer) is asked again after a growing pause, so a brownout is never
reported as a wrong setting: under the ECS deployment circuit breaker every failed task
counts against the deploy. A stop signal ends every wait at once (the check returns False).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
from botocore.exceptions import BotoCoreError

from worker.aws_errors import AWS_ERRORS, TRANSIENT_STATUS, aws_error_is_transient, error_code
from worker.jobs import Job
from worker.settings import Settings
from worker.speech import SpeechClient
from worker.text import error_message

log = logging.getLogger("worker")
# The task role may only SendMessage to the DLQ (least privilege): denied there is fine.
ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")
FIRST_PAUSE_SECONDS = 1.0
MAX_PAUSE_SECONDS = 15.0
HEALTH_POLL_SECONDS = 0.5
# The probe costs the GPU a fraction of a second. VoiceDesign refuses a request without
# instructions, so the probe carries some (CustomVoice accepts them too).
PROBE_TEXT = "Ready."
PROBE_INSTRUCTIONS = "A calm, clear voice."
DEFAULT_VOICE = str(Job.model_fields["voice"].default)


class NotYet(Exception):
    """A transient failure: worth asking again."""


class Misconfigured(Exception):
    """A definite misconfiguration; `str(error)` is the one line to log."""


class StartupTimeout(Exception):
    """Still not passing when the start-up budget ran out; `str(error)` says what."""


class Budget:
    """The start-up deadline, shared by every check, and the stop signal that ends a wait."""

    def __init__(self, seconds: float, stop: threading.Event) -> None:
        self.seconds = seconds
        self.stop = stop
        self.deadline = time.monotonic() + seconds

    def retry(self, what: str, attempt: Callable[[], None], quiet: bool = False) -> bool:
        """Runs `attempt` until it passes (True) or a stop comes first (False). NotYet is
        retried after a pause that doubles (a fixed short one when `quiet`: waiting for a
        model to load is no fault worth a log line); StartupTimeout past the deadline."""
        pause = HEALTH_POLL_SECONDS if quiet else FIRST_PAUSE_SECONDS
        while not self.stop.is_set():
            try:
                attempt()
                return True
            except NotYet as error:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise StartupTimeout(f"{what}: {error}") from None
                if not quiet:
                    log.warning("%s: not ready, again in %.0fs: %s", what, min(pause, left), error)
                if self.stop.wait(min(pause, left)):
                    return False
                pause = pause if quiet else min(MAX_PAUSE_SECONDS, pause * 2)
        return False


# ---- AWS --------------------------------------------------------------------------------


def _storage_checks(sqs: Any, s3: Any, settings: Settings) -> list[tuple[str, str, Any]]:
    """(env name, value, call) for the bucket and both queues, in the order they are checked."""
    bucket, queue, dlq = settings.output_bucket, settings.queue_url, settings.dlq_url
    arn = ["QueueArn"]
    return [
        ("OUTPUT_BUCKET", bucket, partial(s3.head_bucket, Bucket=bucket)),
        ("QUEUE_URL", queue, partial(sqs.get_queue_attributes, QueueUrl=queue, AttributeNames=arn)),
        ("DLQ_URL", dlq, partial(sqs.get_queue_attributes, QueueUrl=dlq, AttributeNames=arn)),
    ]


def _check_store(name: str, value: str, call: Callable[[], Any]) -> None:
    try:
        call()
    except AWS_ERRORS as error:
        if aws_error_is_transient(error):
            raise NotYet(str(error)) from None
        if isinstance(error, BotoCoreError):
            raise Misconfigured(f"{name}={value!r} cannot be reached: {error}") from None
        if name == "DLQ_URL" and error_code(error) in ACCESS_DENIED:
            return
        raise Misconfigured(f"{name}={value!r} cannot be used: {error}") from None


def check_storage(sqs: Any, s3: Any, settings: Settings, budget: Budget) -> bool:
    """The bucket and both queues answer; False if a stop came first."""
    for name, value, call in _storage_checks(sqs, s3, settings):
        if not budget.retry(name, partial(_check_store, name, value, call)):
            return False
    return True


# ---- speech -----------------------------------------------------------------------------


def check_health(speech: SpeechClient, settings: Settings, budget: Budget) -> bool:
    """/health answers 200; False if a stop came first."""

    def healthy() -> None:
        if not speech.healthy():
            raise NotYet("no answer")

    log.info("worker %s waiting for the speech server at %s", settings.worker_id, speech.base_url)
    try:
        return budget.retry("speech server /health", healthy, quiet=True)
    except StartupTimeout:
        raise StartupTimeout(
            f"speech server {settings.speech_url}/health did not answer within {budget.seconds:g}s"
        ) from None


def check_model(speech: SpeechClient, settings: Settings, budget: Budget) -> bool:
    """The server lists the default voice and makes one short synthesis with the configured
    model and task type: a setting the server refuses (any 4xx) is Misconfigured, before any
    message is received, instead of failing every job into the DLQ."""
    timeout = httpx.Timeout(60.0, connect=5.0)
    with httpx.Client(
        base_url=speech.base_url, timeout=timeout, transport=speech.transport
    ) as http:
        if not budget.retry("speech server voices", partial(_check_voices, http, settings)):
            return False
        probe = _probe_body(speech)
        return budget.retry("speech server probe", partial(_check_probe, http, probe, settings))


def _probe_body(speech: SpeechClient) -> dict[str, Any]:
    job = Job(text=PROBE_TEXT, instructions=PROBE_INSTRUCTIONS)
    # The body a job sends: same model, voice, task type. A Base or VoiceDesign stack's jobs
    # name library voices, so the probe brings one of its own (worker/voices.py's fields).
    fields: dict[str, Any] | None = None
    if speech.task_type == "Base":
        fields = {"ref_audio": _probe_reference(), "ref_text": PROBE_TEXT}
    elif speech.task_type == "VoiceDesign":
        fields = {"instructions": PROBE_INSTRUCTIONS}
    return speech.payload(job, job.text, voice_fields=fields)


def _probe_reference() -> str:
    """One second of a 220 Hz tone as a WAV data URL: a reference the Base task accepts (the
    probe checks that the server takes the request, not how the clone sounds)."""
    import base64
    import io
    import math
    import wave

    rate = 16_000
    samples = b"".join(
        int(8_000 * math.sin(2 * math.pi * 220 * i / rate)).to_bytes(2, "little", signed=True)
        for i in range(rate)
    )
    with io.BytesIO() as buffer:
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(samples)
        return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _check_voices(http: httpx.Client, settings: Settings) -> None:
    try:
        response = _request(http, "GET", "/v1/audio/voices")
    except _Refused as refused:
        said = f"GET /v1/audio/voices answered {refused.status}: {refused.message}"
        if refused.message == "Not Found":  # FastAPI's own 404: no such route
            problem = f"SPEECH_URL={settings.speech_url!r} is not vLLM-Omni: {said}"
        else:
            problem = f"SPEECH_MODEL={settings.speech_model!r} is not served for speech: {said}"
        raise Misconfigured(problem) from None
    voices = response.json().get("voices", []) if _is_json(response) else []
    if settings.speech_task_type in ("Base", "VoiceDesign"):
        return  # its jobs name library voices, not the checkpoint's speakers
    if not isinstance(voices, list) or not voices:
        return  # a server without a voice list has nothing to compare with
    if DEFAULT_VOICE.lower() not in {str(voice).lower() for voice in voices}:
        raise Misconfigured(
            f"SPEECH_MODEL={settings.speech_model!r} has no voice {DEFAULT_VOICE!r} (the voice "
            f"of jobs that name none); it has: {', '.join(map(str, sorted(voices)))}"
        )


def _check_probe(http: httpx.Client, body: dict[str, Any], settings: Settings) -> None:
    try:
        _request(http, "POST", "/v1/audio/speech", json=body)
    except _Refused as refused:
        raise Misconfigured(_name_the_setting(refused, settings)) from None


class _Refused(Misconfigured):
    def __init__(self, path: str, status: int, message: str) -> None:
        super().__init__(f"{path} answered {status}: {message}")
        self.path, self.status, self.message = path, status, message


def _request(http: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The answer if 2xx; NotYet on 5xx, 408, 429 or a transport fault; _Refused on a 4xx."""
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError as error:
        raise NotYet(f"{path}: {error!r}") from None
    if response.status_code < 300:
        return response
    message = error_message(response)
    if response.status_code >= 500 or response.status_code in TRANSIENT_STATUS:
        raise NotYet(f"{path} answered {response.status_code}: {message}")
    raise _Refused(path, response.status_code, message)


def _name_the_setting(refused: _Refused, settings: Settings) -> str:
    """One line that names the setting the server refused."""
    task_type = settings.speech_task_type or "unset (the server's default, CustomVoice)"
    said = f"the speech server refused a test synthesis ({refused.status}: {refused.message})"
    text = refused.message.lower()
    if refused.status == 404 and "model" in text:
        return f"SPEECH_MODEL={settings.speech_model!r} is not the served model: {said}"
    if refused.status == 404:
        return f"SPEECH_URL={settings.speech_url!r} has no /v1/audio/speech: {said}"
    if "task_type" in text or "task" in text:
        return (
            f"SPEECH_TASK_TYPE={task_type} does not fit the checkpoint of "
            f"SPEECH_MODEL={settings.speech_model!r}: {said}"
        )
    if "voice" in text:
        model = settings.speech_model
        return f"the default voice {DEFAULT_VOICE!r} is refused by SPEECH_MODEL={model!r}: {said}"
    return (
        f"SPEECH_MODEL={settings.speech_model!r} / SPEECH_TASK_TYPE={task_type} "
        f"cannot be served: {said}"
    )


def _is_json(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("application/json")
