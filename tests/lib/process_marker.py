"""Keeps the `processes` marker honest: a test without it that starts a child process fails,
so `make test-fast` really starts none. A plugin (tests/conftest.py registers it) that stands
alone, so tests/system/repo/test_process_marker.py can run it as another suite's conftest."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """matplotlib runs `fc-list` once per machine to build its font cache, on first import.
    Built here, before any test, so an unmarked test that plots on a fresh machine does not
    count as one that starts a process."""
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401


SPAWNED = pytest.StashKey[list[str]]()


class UnmarkedProcessError(RuntimeError):
    """Raised where an unmarked test starts a process. Code under test may catch it (a CLI
    turning errors into exit codes): pytest_runtest_makereport then fails the test anyway.
    Not a BaseException: pytest's fixture cache only records Exceptions."""


def _refusing(item: pytest.Item, what: str, seen: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        command = args[1] if what == "subprocess.Popen" and len(args) > 1 else kwargs.get("args")
        message = (
            f"{item.nodeid} started a process ({what} {command!r}) without the `processes` "
            "marker: add `pytestmark = pytest.mark.processes` to the module (or "
            "`@pytest.mark.processes` to the test) so `make test-fast` leaves it out"
        )
        seen.append(message)
        raise UnmarkedProcessError(message)

    return refuse


@contextlib.contextmanager
def _no_processes(item: pytest.Item, seen: list[str]) -> Iterator[None]:
    """Every way this code base could start a process, refused for the duration."""
    patch = pytest.MonkeyPatch()
    # Popen covers subprocess.run/check_output, asyncio subprocesses and every subclass.
    patch.setattr(subprocess.Popen, "__init__", _refusing(item, "subprocess.Popen", seen))
    for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            patch.setattr(os, name, _refusing(item, f"os.{name}", seen))
    try:
        yield
    finally:
        patch.undo()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    # Wraps setup too, so a session or module fixture that first starts a process inside an
    # unmarked test is caught, not only the test body.
    if item.get_closest_marker("processes") is not None:
        return (yield)
    seen: list[str] = []
    item.stash[SPAWNED] = seen
    with _no_processes(item, seen):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    seen = item.stash.get(SPAWNED, [])
    # The refusal may have been raised in a thread or caught by the code under test: the
    # phase still fails (once: the later phases of the same test are not blamed again).
    if seen and report.passed:
        report.outcome = "failed"
        report.longrepr = seen[0]
    seen.clear()
    return report
