"""`python -m worker`: wiring only — settings, shared clients, signals, then the loop."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from worker.loop import Worker
from worker.metrics import Metrics
from worker.protection import Protection
from worker.settings import Settings, SettingsError, load_settings
from worker.speech import SpeechClient

log = logging.getLogger("worker")
EXIT_MISCONFIGURED = 2
EXIT_SPEECH_UNAVAILABLE = 3
ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")


def _clients(settings: Settings) -> tuple[object, object]:
    """One boto3 client per service for the whole process (clients are thread-safe)."""
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=2 * settings.concurrency + 4,
        retries={"mode": "standard", "max_attempts": 3},
        read_timeout=settings.wait_time_seconds + 40,
    )
    region = settings.aws_region
    return (
        boto3.client("sqs", region_name=region, config=config),
        boto3.client("s3", region_name=region, config=config),
    )


def _storage_problem(sqs: Any, s3: Any, settings: Settings) -> str | None:
    """One line naming the bucket or queue this worker cannot reach, else None.

    Checked before the (long) wait for the model, so a wrong name fails in seconds."""
    from botocore.exceptions import BotoCoreError, ClientError

    attributes = {"AttributeNames": ["QueueArn"]}
    checks: list[tuple[str, str, Callable[[], object]]] = [
        (
            "OUTPUT_BUCKET",
            settings.output_bucket,
            partial(s3.head_bucket, Bucket=settings.output_bucket),
        ),
        (
            "QUEUE_URL",
            settings.queue_url,
            partial(sqs.get_queue_attributes, QueueUrl=settings.queue_url, **attributes),
        ),
        (
            "DLQ_URL",
            settings.dlq_url,
            partial(sqs.get_queue_attributes, QueueUrl=settings.dlq_url, **attributes),
        ),
    ]
    for name, value, check in checks:
        try:
            check()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            # The task role may only SendMessage to the DLQ (least privilege): denied is fine.
            if name == "DLQ_URL" and code in ACCESS_DENIED:
                continue
            return f"{name}={value!r} cannot be used: {error}"
        except BotoCoreError as error:
            return f"{name}={value!r} cannot be reached: {error}"
    return None


def _speech_ready(speech: SpeechClient, settings: Settings, stop: threading.Event) -> bool:
    """Waits for /health; False on timeout or when a stop signal comes first."""
    log.info(
        "worker %s waiting for the speech server at %s", settings.worker_id, settings.speech_url
    )
    deadline = time.monotonic() + settings.health_timeout_seconds
    while not speech.healthy():
        if stop.wait(0.5):
            return False
        if time.monotonic() >= deadline:
            log.error(
                "speech server %s/health did not answer within %gs",
                settings.speech_url,
                settings.health_timeout_seconds,
            )
            return False
    return True


def main() -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        settings = load_settings()
    except SettingsError as error:
        log.error("configuration error: %s", error)
        return EXIT_MISCONFIGURED
    try:
        sqs, s3 = _clients(settings)
    except Exception as error:  # e.g. a malformed AWS_ENDPOINT_URL
        log.error("configuration error: cannot create AWS clients: %s", error)
        return EXIT_MISCONFIGURED
    problem = _storage_problem(sqs, s3, settings)
    if problem:
        log.error("configuration error: %s", problem)
        return EXIT_MISCONFIGURED
    speech = SpeechClient(
        settings.speech_url,
        settings.speech_model,
        settings.speech_task_type,
        settings.speech_timeout_seconds,
        settings.speech_retries,
        settings.speech_chunk_chars,
    )
    if not _speech_ready(speech, settings, stop):
        return 0 if stop.is_set() else EXIT_SPEECH_UNAVAILABLE
    protection = Protection(
        settings.ecs_agent_uri,
        settings.protection_expires_minutes,
        settings.protection_renew_seconds,
    )
    worker = Worker(settings, sqs, s3, speech, protection, Metrics())
    # Signals now drain the worker; one that came during start-up stops it at once.
    signal.signal(signal.SIGTERM, lambda signum, frame: worker.request_stop())
    signal.signal(signal.SIGINT, lambda signum, frame: worker.request_stop())
    if stop.is_set():
        worker.request_stop()
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
