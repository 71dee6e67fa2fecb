"""Finding the stack through a stand-in `pulumi` executable (a process); the rest is in
tests/integration/client/test_stack.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.client import test_stack as in_process
from tests.integration.client.test_stack import OUTPUTS, fake_pulumi
from tests.lib.client_stack import run
from tts_fleet.client.stack import StackError, resolve_target
from tts_fleet.exit_codes import ExitCode

# A fixture of the in-process tests, found by pytest under this name.
no_env = in_process.no_env


@pytest.mark.processes
def test_stack_outputs_fill_what_flags_and_env_leave_out(
    no_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = fake_pulumi(tmp_path, monkeypatch, f"echo '{json.dumps(OUTPUTS)}'")
    target = resolve_target("dev", None, None, "my-bucket")
    assert args.read_text().split() == ["stack", "output", "--json", "--stack", "dev"]
    assert target.queue_url == "https://q/from-stack" and target.bucket == "my-bucket"
    assert (target.dlq_url, target.cluster, target.service) == ("https://q/dlq", "c", "s")


@pytest.mark.processes
def test_a_missing_stack_or_output_is_one_clear_line(
    no_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    fake_pulumi(tmp_path, monkeypatch, "echo 'error: no stack named prod found' >&2; exit 255")
    result = run("status", "--stack", "prod")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stderr.strip() == (
        "Error: cannot read the outputs of stack prod (error: no stack named prod found); "
        "check the stack name, or pass --queue-url and --bucket"
    )
    fake_pulumi_again = tmp_path / "bin" / "pulumi"
    fake_pulumi_again.write_text('#!/bin/sh\necho \'{"queueUrl": "https://q"}\'\n')
    with pytest.raises(StackError, match="no output bucketName; deploy it first"):
        resolve_target("dev", None, None, None)
