"""Fixtures for the local-fleet tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.lib.local_cli import Run


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Starts `tts-fleet local` runs; each is killed with its children after the test."""
    runs: list[Run] = []

    def make(*args: str, env: dict[str, str] | None = None) -> Run:
        run = Run(tmp_path, *args, env=env)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cleanup()
