"""The text limit read from a deployed stack through a stand-in `pulumi` executable (a
process); the rest is in tests/integration/client/test_text_limit.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.client import test_text_limit as in_process
from tests.integration.client.test_stack import fake_pulumi
from tests.integration.client.test_text_limit import (
    STACK_LIMIT,
    stack_outputs,
    submit_wait_results,
)
from tests.lib.client_stack import Stack
from tts_fleet.config import outputs

# A fixture of the in-process tests, found by pytest under this name.
jobs = in_process.jobs


@pytest.mark.processes
def test_a_deployed_stacks_limit_holds_for_submit_wait_and_results(
    stack: Stack, jobs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    printed = json.dumps(stack_outputs(stack, **{outputs.MAX_TEXT_CHARS: STACK_LIMIT}))
    fake_pulumi(tmp_path, monkeypatch, f"echo '{printed}'")
    submit_wait_results(stack, jobs, tmp_path / "audio", "--stack", "big")
