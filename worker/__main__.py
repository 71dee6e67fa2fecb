"""`python -m worker`: wiring only — settings, shared clients, signals, then the loop."""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from worker.settings import Settings, SettingsError, load_settings

log = logging.getLogger("worker")
EXIT_MISCONFIGURED = 2
EXIT_SPEECH_UNAVAILABLE = 3


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


def main() -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = load_settings()
    except SettingsError as error:
        log.error("configuration error: %s", error)
        return EXIT_MISCONFIGURED

    from worker.loop import Worker
    from worker.metrics import Metrics
    from worker.protection import Protection
    from worker.speech import SpeechClient

    speech = SpeechClient(
        settings.speech_url,
        settings.speech_model,
        settings.speech_task_type,
        settings.speech_timeout_seconds,
        settings.speech_retries,
        settings.speech_chunk_chars,
    )
    log.info(
        "worker %s waiting for the speech server at %s", settings.worker_id, settings.speech_url
    )
    if not speech.wait_healthy(settings.health_timeout_seconds):
        log.error(
            "speech server %s/health did not answer within %gs",
            settings.speech_url,
            settings.health_timeout_seconds,
        )
        return EXIT_SPEECH_UNAVAILABLE
    try:
        sqs, s3 = _clients(settings)
    except Exception as error:  # e.g. a malformed AWS_ENDPOINT_URL
        log.error("configuration error: cannot create AWS clients: %s", error)
        return EXIT_MISCONFIGURED
    protection = Protection(
        settings.ecs_agent_uri,
        settings.protection_expires_minutes,
        settings.protection_renew_seconds,
    )
    worker = Worker(settings, sqs, s3, speech, protection, Metrics())

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
