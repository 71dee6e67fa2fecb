"""Child processes of `tts-fleet local`: spawned in their own session, stopped without orphans.

Each child leads its own process group, so a Ctrl-C in the terminal reaches only the CLI,
which then drains the workers itself (SIGTERM, as ECS does) and kills what is left. On
Linux each child also asks the kernel for SIGTERM should the CLI die without cleaning up.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Loaded before any fork: dlopen in a child forked from a threaded parent can deadlock.
_PRCTL = _load_prctl()


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(argv: list[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Starts `argv` in a new session, stdout and stderr written to `log_path`.

    PDEATHSIG fires when the spawning *thread* exits, so call this from the main thread.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # prctl only, loaded before any fork
        )


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signals the child's whole process group (the child and anything it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL the group. Returns the exit code."""
    if proc.poll() is None:
        signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    return kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> int:
    """SIGKILL the group (a leftover grandchild too) and reap the child."""
    signal_group(proc, signal.SIGKILL)
    return proc.wait()


def wait_for_line(
    log_path: Path,
    prefix: str,
    proc: subprocess.Popen[bytes],
    timeout: float,
    cancelled: Callable[[], bool] = lambda: False,
) -> str:
    """The first line of `log_path` that starts with `prefix`, polling until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cancelled():
        with contextlib.suppress(FileNotFoundError):
            for line in log_path.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
        if proc.poll() is not None:
            raise RuntimeError(f"exited with code {proc.returncode} before '{prefix}'")
        time.sleep(0.05)
    raise RuntimeError(
        f"no '{prefix}' line within {timeout:.0f} s" if not cancelled() else "stopped"
    )


def start_speech_server(
    backend: str,
    latency_ms: float,
    env: Mapping[str, str],
    log_path: Path,
    timeout: float,
    cancelled: Callable[[], bool] = lambda: False,
    *,
    port: int = 0,
    extra_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m tts_fleet.local.speech_server` on 127.0.0.1 (`port` 0: a free one); returns
    the process and its URL once it says it listens. The test suite starts it this way too.
    Its ASR stand-in always takes a free port (read back with `asr.url_from_log`): the fixed
    8092 of a server given a fixed `port` would collide between servers run side by side."""
    asr_port = () if "--asr-port" in extra_args else ("--asr-port", "0")
    argv = python_module(
        "tts_fleet.local.speech_server", "--host", "127.0.0.1", "--port", str(port),
        "--backend", backend, *asr_port, *extra_args,
    )  # fmt: skip
    if latency_ms > 0:
        argv += ["--latency-ms", f"{latency_ms:g}"]
    proc = spawn(argv, env, log_path)
    try:
        line = wait_for_line(log_path, "listening on ", proc, timeout, cancelled)
    except RuntimeError as error:
        kill(proc)
        raise RuntimeError(f"speech server ({backend}) {error}; see {log_path}") from None
    return proc, line.removeprefix("listening on ").strip()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for servers that need one given)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_moto_server(
    env: Mapping[str, str], log_path: Path, timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m moto.server` in its own process (the benchmarks: moto's work off this
    process's GIL); returns the process and its endpoint once it accepts connections."""
    port = free_port()
    proc = spawn(python_module("moto.server", "-H", "127.0.0.1", "-p", str(port)), env, log_path)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                kill(proc)
                raise RuntimeError(f"moto server did not start; see {log_path}") from None
            time.sleep(0.2)
