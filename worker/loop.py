"""The worker assembled: the SQS consumer (worker/consumer.py) running the TTS job handler
(worker/handler.py) over the output store (worker/outputs.py), all telling one event sink
(worker/events.py) and reading one clock (worker/clock.py)."""

from __future__ import annotations

from typing import Any

from worker.clock import SYSTEM_CLOCK, Clock
from worker.consumer import Consumer
from worker.events import Events
from worker.handler import Synthesizer, TtsHandler
from worker.metrics import Metrics
from worker.outputs import OutputStore
from worker.protection import Protection
from worker.settings import Settings


class Worker:
    """`run()` until `request_stop()` (a signal, in `python -m worker`), then drain."""

    def __init__(
        self,
        settings: Settings,
        sqs: Any,
        s3: Any,
        speech: Synthesizer,
        protection: Protection,
        metrics: Metrics,
        delete_sqs: Any = None,
        events: Events | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.events = events if events is not None else Events()
        self.store = OutputStore(settings, s3, sqs, self.events)
        self.handler = TtsHandler(settings, self.store, speech, metrics, self.events, clock)
        self.consumer = Consumer(
            settings, sqs, self.handler, protection, self.events, clock, delete_sqs
        )

    def run(self) -> int:
        return self.consumer.run()

    def request_stop(self) -> None:
        self.consumer.request_stop()
