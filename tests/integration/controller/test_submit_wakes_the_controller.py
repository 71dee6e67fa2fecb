"""`tts-fleet submit` wakes the stack's scaling controller after sending (asynchronously), and
a failed wake-up is a warning, never a failed submit. The CLI runs in process against the
session's moto server; the controller is read from a saved `pulumi stack output --json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.lib.client_stack import run
from tts_fleet.cli import submit as submit_command
from tts_fleet.client.submit import invoke_controller
from tts_fleet.config import outputs

FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:tts-fleet-dev-controller"


class Recorder:
    """A Lambda client that records its calls, or fails them all."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error = error

    def invoke(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if self.error is not None:
            raise self.error
        return {"StatusCode": 202}


def test_the_invoke_is_asynchronous_and_names_the_function() -> None:
    lam = Recorder()
    assert invoke_controller(lam, FUNCTION_ARN) is None
    [call] = lam.calls
    assert (call["FunctionName"], call["InvocationType"]) == (FUNCTION_ARN, "Event")
    assert json.loads(call["Payload"]) == {"source": "tts-fleet submit"}


def test_a_failed_invoke_is_one_line_saying_the_schedule_will_see_the_jobs() -> None:
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Invoke")
    warning = invoke_controller(Recorder(denied), FUNCTION_ARN)
    assert warning is not None and "\n" not in warning
    assert "AccessDeniedException" in warning and "within a minute" in warning


@pytest.fixture
def stack_outputs(aws_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    queue_url = boto3.client("sqs").create_queue(QueueName="tts-jobs")["QueueUrl"]
    for key in ("TTS_FLEET_QUEUE_URL", "TTS_FLEET_DLQ_URL", "TTS_FLEET_BUCKET"):
        monkeypatch.delenv(key, raising=False)
    path = tmp_path / "outputs.json"
    values = {
        outputs.QUEUE_URL: queue_url,
        outputs.BUCKET_NAME: "tts-outputs",
        outputs.CONTROLLER_FUNCTION_ARN: FUNCTION_ARN,
    }
    path.write_text(json.dumps(values))
    return path


def jobs_file(tmp_path: Path) -> Path:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"id": "a", "text": "Hello."}\n{"id": "b", "text": "Hi."}\n')
    return source


def fake_lambda(monkeypatch: pytest.MonkeyPatch, lam: Recorder) -> None:
    real = submit_command.client_for
    monkeypatch.setattr(
        submit_command, "client_for", lambda s, aws=None: lam if s == "lambda" else real(s, aws)
    )


def test_submit_wakes_the_controller_once_after_sending(
    stack_outputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lam = Recorder()
    fake_lambda(monkeypatch, lam)
    result = run("submit", str(jobs_file(tmp_path)), "--outputs-file", str(stack_outputs))
    assert result.exit_code == 0, result.output
    assert [(c["FunctionName"], c["InvocationType"]) for c in lam.calls] == [
        (FUNCTION_ARN, "Event")
    ]
    assert "warning" not in result.output


def test_a_controller_that_cannot_be_woken_does_not_fail_the_submit(
    stack_outputs: Path, tmp_path: Path
) -> None:
    # The emulator has no such function: Invoke answers ResourceNotFoundException.
    result = run("submit", str(jobs_file(tmp_path)), "--outputs-file", str(stack_outputs))
    assert result.exit_code == 0, result.output
    assert "sent 2 of 2 job(s)" in result.stdout
    assert "warning: could not wake the scaling controller" in result.stderr


def test_a_stack_without_a_controller_is_not_invoked(
    stack_outputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = json.loads(stack_outputs.read_text())
    del values[outputs.CONTROLLER_FUNCTION_ARN]  # scaling.mode: alarms exports none
    stack_outputs.write_text(json.dumps(values))
    lam = Recorder()
    fake_lambda(monkeypatch, lam)
    result = run("submit", str(jobs_file(tmp_path)), "--outputs-file", str(stack_outputs))
    assert result.exit_code == 0 and lam.calls == []
