"""Running worker/entrypoint.sh for real with stand-ins: a stand-in `vllm` on PATH and a
stand-in `python -m worker` package, each writing what happens to an events file. Shared by
the entrypoint's tests (tests/system/components/test_worker_image_files.py) and the ASR
server's (tests/system/worker/test_asr_server.py), which differ only in their stand-ins."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.lib.stack_support import WORKER_DIR
from tts_fleet.local.procs import free_port

ENTRYPOINT = WORKER_DIR / "entrypoint.sh"
# The stand-in package reaches the real worker's helper modules (vllm_args, compile_cache,
# coldstart) that the entrypoint runs with `python -m`.
STAND_IN_INIT = f"__path__.append({str(WORKER_DIR)!r})\n"

Start = Callable[..., "subprocess.Popen[bytes]"]


def read(events: Path) -> list[str]:
    return events.read_text().splitlines() if events.exists() else []


def wait_for(events: Path, line: str, timeout: float = 60.0) -> None:
    """Until an event starting with `line` appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(entry.startswith(line) for entry in read(events)):
            return
        time.sleep(0.05)
    raise AssertionError(f"{line!r} never appeared; events: {read(events)}")


def stand_ins(tmp_path: Path, fake_vllm: str, fake_worker: str) -> dict[str, str]:
    """The stand-ins written under `tmp_path`, and the environment that makes the entrypoint
    use them (the caller adds its own variables)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vllm = bin_dir / "vllm"
    vllm.write_text(fake_vllm.format(python=sys.executable))
    vllm.chmod(0o755)
    package = tmp_path / "pkg" / "worker"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN_INIT)
    (package / "__main__.py").write_text(fake_worker)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": str(tmp_path / "pkg"),
        "EVENTS": str(tmp_path / "events"),
        "SPEECH_MODEL": "Qwen/Test-Model",
        "SPEECH_PORT": str(free_port()),
        "HEALTH_TIMEOUT_SECONDS": "60",
        "CWD": str(tmp_path / "pkg"),
    }


@contextlib.contextmanager
def entrypoints(sandbox: dict[str, str]) -> Iterator[Start]:
    """A starter of the entrypoint in `sandbox` (plus per-call variables); every process group
    it started is killed on exit, so no entrypoint or child outlives its test."""
    started: list[subprocess.Popen[bytes]] = []

    def run(**extra: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **sandbox, **extra}
        proc = subprocess.Popen(
            ["bash", str(ENTRYPOINT)], env=env, cwd=sandbox["CWD"], start_new_session=True
        )
        started.append(proc)
        return proc

    try:
        yield run
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
