"""The JSON-lines event log of a local run (`--events FILE`): one object per line.

`decision` lines are the scaler's ticks (what it saw, what it decided, what runs);
`worker_*`, `speech_server_*`, `submitted` and `finished` lines mark lifecycle steps.
Each line is flushed at once so another process can follow the run as it happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


class EventLog:
    def __init__(self, path: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8")

    def elapsed(self) -> float:
        return self._clock() - self._start

    def write(self, event: str, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"event": event, "t": round(self.elapsed(), 3), **fields}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
