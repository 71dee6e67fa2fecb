"""ECS task scale-in protection (DESIGN §5.5): on while jobs are in flight, off when idle.

`PUT $ECS_AGENT_URI/task-protection/v1/state` with `{"ProtectionEnabled": bool,
"ExpiresInMinutes": n}`; calling it again resets the expiry, so long jobs renew it. Without
ECS_AGENT_URI (not on ECS) every call is a no-op. A failed call is logged, never fatal: the
worst case is ECS stopping a busy task, and SIGTERM drain handles that.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx

from worker.settings import MAX_PROTECTION_MINUTES

log = logging.getLogger("worker.protection")
STATE_PATH = "/task-protection/v1/state"


class Protection:
    def __init__(
        self, agent_uri: str, expires_minutes: int = 60, renew_seconds: float = 1_800.0
    ) -> None:
        if not 1 <= expires_minutes <= MAX_PROTECTION_MINUTES:
            raise ValueError(f"expires_minutes must be 1..{MAX_PROTECTION_MINUTES}")
        self.url = agent_uri.rstrip("/") + STATE_PATH if agent_uri else ""
        self.expires_minutes = expires_minutes
        self.renew_seconds = renew_seconds
        self.enabled = False
        self._wanted = False  # busy() asked for protection; renew_if_due retries until it holds
        self._since = 0.0
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=5.0) if self.url else None

    @property
    def active(self) -> bool:
        return self._http is not None

    def busy(self) -> None:
        """Before starting work: protect (or keep protecting) this task."""
        with self._lock:
            self._wanted = True
            if not self.enabled:
                self._put(True)

    def idle(self) -> None:
        """Nothing in flight and nothing received: let ECS scale this task in."""
        with self._lock:
            self._wanted = False
            if self.enabled:
                self._put(False)

    def renew_if_due(self) -> None:
        """Called by the Renewal timer: re-PUT before the expiry so a long job stays protected,
        and retry a busy() the agent refused."""
        with self._lock:
            due = time.monotonic() - self._since >= self.renew_seconds
            if self._wanted and (not self.enabled or due):
                self._put(True)

    def state(self) -> dict[str, Any] | None:
        if self._http is None:
            return None
        answer: dict[str, Any] = self._http.get(self.url).json()
        return answer

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def _put(self, enabled: bool) -> None:
        if self._http is None:
            self.enabled = enabled
            return
        body: dict[str, Any] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self.expires_minutes
        try:
            response = self._http.put(self.url, json=body)
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as error:
            log.warning("task protection %s failed: %r", "on" if enabled else "off", error)
            return
        # The agent answers a refused update with 200 {"failure": {...}}: only the state it
        # reports counts. Otherwise the old state stays, so the next call retries.
        granted = answer.get("protection") if isinstance(answer, dict) else None
        if not isinstance(granted, dict) or granted.get("ProtectionEnabled") is not enabled:
            failure = answer.get("failure", answer) if isinstance(answer, dict) else answer
            log.warning("task protection %s refused: %s", "on" if enabled else "off", failure)
            return
        self.enabled = enabled
        self._since = time.monotonic()
        log.info("task protection %s", f"on ({self.expires_minutes} min)" if enabled else "off")


class Renewal(threading.Thread):
    """Calls protection.renew_if_due every `tick` seconds, apart from the (maybe much slower)
    visibility heartbeat; settings check renew_seconds + tick < the expiry."""

    def __init__(self, protection: Protection, tick: float) -> None:
        super().__init__(name="protection-renewal", daemon=True)
        self.protection, self.tick = protection, tick
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.tick):
            try:
                self.protection.renew_if_due()
            except Exception:
                log.exception("task protection renewal failed")

    def stop(self) -> None:
        self._stop_event.set()
