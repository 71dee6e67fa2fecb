"""`tts-fleet local` as a real subprocess a test can watch: its event log, its children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).with_name("tts-fleet")
CLI = (
    [str(SCRIPT)]
    if SCRIPT.exists()
    else [sys.executable, "-c", "from tts_fleet.cli.main import main; main()"]
)
# Generous: two loaded cores, several engineers' suites at once.
RUN_TIMEOUT = 180


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def child_pids(events: list[dict[str, Any]]) -> set[int]:
    """Every process the run started: the speech server and each worker."""
    kinds = {"speech_server_started", "worker_started"}
    return {e["pid"] for e in events if e["event"] in kinds}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Run:
    """The CLI as a subprocess; its output goes to files so a test can read it mid-run."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out = tmp_path / "out"
        self.events_path = tmp_path / "events.jsonl"
        self.stdout_path = tmp_path / "stdout.txt"
        self.stderr_path = tmp_path / "stderr.txt"
        argv = [*CLI, "local", "--out", str(self.out), "--events", str(self.events_path), *args]
        with self.stdout_path.open("w") as stdout, self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(argv, cwd=tmp_path, stdout=stdout, stderr=stderr, env=env)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no such event; exit {self.proc.poll()}; {self.events()[-3:]}")

    def finish(self, timeout: float = RUN_TIMEOUT) -> tuple[int, str, str]:
        self.proc.wait(timeout=timeout)
        return self.proc.returncode, self.stdout(), self.stderr_path.read_text()

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def cleanup(self) -> None:
        """A failed test must not leave the CLI or its children running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in child_pids(self.events()):
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


def exports(text: str) -> dict[str, str]:
    """The `export KEY=value` lines a --keep-running fleet prints, as a dict."""
    pairs = [line.strip().removeprefix("export ") for line in text.splitlines()]
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair and pair[:1].isupper())
