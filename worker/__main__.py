"""`python -m worker`: signals first, then settings, start-up checks, and the loop.

Exit codes: 0 a clean stop (also a stop during start-up), 2 a misconfiguration (one line
naming the setting), 3 a dependency (AWS or the speech server) still not answering when the
start-up budget, HEALTH_TIMEOUT_SECONDS, ran out.
"""

# The handlers come before every other import: botocore, httpx and numpy take most of a
# second to import, and a SIGTERM in that window (ECS stopping a task it just started) would
# otherwise kill the process with -15 instead of a clean exit 0.
import signal
import threading
from collections.abc import Callable

_stop = threading.Event()
_on_stop: list[Callable[[], None]] = []  # the worker's request_stop, once there is a worker


def _signalled(signum: int, frame: object) -> None:
    _stop.set()
    for callback in _on_stop:
        callback()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _signalled)
    signal.signal(signal.SIGINT, _signalled)

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from worker.coldstart import ColdStart, gather  # noqa: E402
from worker.events import Event, Events, Happened  # noqa: E402
from worker.loop import Worker  # noqa: E402
from worker.metrics import ColdStartMetrics, Metrics  # noqa: E402
from worker.protection import Protection  # noqa: E402
from worker.qa.guard import guard_from  # noqa: E402
from worker.settings import Settings, SettingsError, load_settings  # noqa: E402
from worker.speech import SpeechClient  # noqa: E402
from worker.startup import (  # noqa: E402
    Budget,
    Misconfigured,
    StartupTimeout,
    check_health,
    check_model,
    check_storage,
)
from worker.voices import VoiceLibrary  # noqa: E402

log = logging.getLogger("worker")
EXIT_MISCONFIGURED = 2
EXIT_NOT_READY = 3


def _clients(settings: Settings) -> tuple[Any, Any, Any]:
    """The SQS and S3 clients for the whole process (clients are thread-safe), and one for
    deletes that botocore does not retry: the worker retries them itself, sooner than
    botocore's backoff (worker/deletion.py)."""
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=2 * settings.concurrency + 4,
        retries={"mode": "standard", "max_attempts": 3},
        read_timeout=settings.wait_time_seconds + 40,
    )
    once = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
    region = settings.aws_region
    return (
        boto3.client("sqs", region_name=region, config=config),
        boto3.client("s3", region_name=region, config=config),
        boto3.client("sqs", region_name=region, config=once),
    )


def _speech_client(settings: Settings, s3: Any) -> SpeechClient:
    library = VoiceLibrary(
        s3, settings.output_bucket, settings.output_prefix, settings.speech_task_type
    )
    return SpeechClient(
        settings.speech_url,
        settings.speech_model,
        settings.speech_task_type,
        settings.speech_timeout_seconds,
        settings.speech_retries,
        settings.speech_chunk_chars,
        guard=guard_from(settings),
        word_timestamps=settings.word_timestamps == "on",
        voices=library,
    )


def _ready(settings: Settings, sqs: Any, s3: Any, speech: SpeechClient, cold: ColdStart) -> bool:
    """Storage first (a wrong name fails in seconds, before the long wait for a model load),
    then /health, then the voices and one test synthesis (the canary, timed for `cold`).
    False if a stop came first."""
    budget = Budget(settings.health_timeout_seconds, _stop)
    if not (check_storage(sqs, s3, settings, budget) and check_health(speech, settings, budget)):
        return False
    canary_started = time.time()
    if not check_model(speech, settings, budget):
        return False
    cold.ready(canary_started, time.time())
    return True


def _cold_start(settings: Settings, metrics: Metrics) -> ColdStart:
    """The cold-start record (worker/coldstart.py); what ECS says is read on a thread of its
    own, so the metadata endpoint and DescribeTasks never delay the first receive."""
    cold = ColdStart(ColdStartMetrics(metrics).emit)

    def describe_tasks(cluster: str, task_arn: str) -> Any:
        import boto3

        ecs = boto3.client("ecs", region_name=settings.aws_region)
        return ecs.describe_tasks(cluster=cluster, tasks=[task_arn])

    threading.Thread(
        target=gather, args=(cold, dict(os.environ), describe_tasks), daemon=True
    ).start()
    return cold


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def main() -> int:
    _configure_logging()
    try:
        settings = load_settings()
    except SettingsError as error:
        log.error("configuration error: %s", error)
        return EXIT_MISCONFIGURED
    try:
        sqs, s3, deletes = _clients(settings)
    except Exception as error:  # e.g. a malformed AWS_ENDPOINT_URL
        log.error("configuration error: cannot create AWS clients: %s", error)
        return EXIT_MISCONFIGURED
    speech = _speech_client(settings, s3)
    metrics = Metrics(stack=settings.stack_name)
    cold = _cold_start(settings, metrics)
    try:
        if not _ready(settings, sqs, s3, speech, cold):
            log.info("stopped during start-up")
            return 0
    except Misconfigured as error:
        log.error("configuration error: %s", error)
        return EXIT_MISCONFIGURED
    except StartupTimeout as error:
        log.error("not ready after %gs: %s", settings.health_timeout_seconds, error)
        return EXIT_NOT_READY
    protection = Protection(
        settings.ecs_agent_uri,
        settings.protection_expires_minutes,
        settings.protection_renew_seconds,
    )
    events = Events()

    def first_job(happened: Happened) -> None:
        if happened.event is Event.DONE:
            cold.job_done()

    events.subscribe(first_job)
    worker = Worker(
        settings, sqs, s3, speech, protection, metrics, events=events, delete_sqs=deletes
    )
    _on_stop.append(worker.request_stop)  # signals now drain the worker
    if _stop.is_set():  # one that came while it was being built stops it at once
        worker.request_stop()
    return worker.run()


if __name__ == "__main__":
    code = main()
    # Done: a stop repeated now (worker/entrypoint.sh repeats it until the worker is gone)
    # must not make this exit a -15 while Python finalizes, which puts default handlers back
    # for every signal that has a Python handler (not for ignored ones).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
