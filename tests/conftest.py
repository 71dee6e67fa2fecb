"""Shared fixtures: one moto server per test session over real HTTP, reset per test; the
areas' fixtures (tests/lib/fixtures/) for every tier; the plugins that keep the `processes`
marker honest (tests/lib/process_marker.py) and the tiers apart (tests/lib/tiers.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Registered once here so every tier holding tests of an area gets them. The client's and the
# controller's `stack` differ, so those two are imported by the conftest.py of their tiers.
pytest_plugins = [
    "tests.lib.process_marker",
    "tests.lib.tiers",
    "tests.lib.fixtures.deploy",
    "tests.lib.fixtures.local",
    "tests.lib.fixtures.worker",
]

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The local fleet's own emulator (tts_fleet/local/emulator.py), once per session."""
    from tts_fleet.local.emulator import Emulator

    emulator = Emulator()
    yield emulator.start()
    emulator.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A clean emulator and the environment a boto3 client (or a subprocess) needs for it."""
    import httpx

    from tts_fleet.local.emulator import emulator_env

    httpx.post(f"{moto_endpoint}/moto-api/reset").raise_for_status()
    env = emulator_env(moto_endpoint)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield {**os.environ, **env}


@pytest.fixture
def in_process_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """What moto's in-process `mock_aws()` needs of the environment: dummy credentials and a
    region, and no endpoint or profile that would send boto3 elsewhere."""
    from tts_fleet.local.emulator import DUMMY_CREDENTIALS

    for key, value in {**DUMMY_CREDENTIALS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
