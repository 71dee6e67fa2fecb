"""The consumer's time, injected (like `tts_fleet/controller/handler.run(clock=, sleep=)`), so
the drain, backoff and delete-retry timing can be tested on a fake clock in no time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, a pause, and a wait on an event that a timeout ends."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """True when `event` is set within `timeout` seconds (at once if it already is)."""
        ...


class SystemClock:
    """The real one."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout))


SYSTEM_CLOCK: Clock = SystemClock()
