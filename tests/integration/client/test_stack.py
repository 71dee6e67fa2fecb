"""Finding the stack: flags, env vars, `pulumi stack output`, the DLQ from RedrivePolicy."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.lib.client_stack import Stack, run, run_json
from tts_fleet.client.aws import client_for
from tts_fleet.client.stack import StackError, resolve_target
from tts_fleet.client.status import find_dlq_url
from tts_fleet.exit_codes import ExitCode

OUTPUTS = {"queueUrl": "https://q/from-stack", "dlqUrl": "https://q/dlq", "bucketName": "b-stack",
           "clusterName": "c", "serviceName": "s"}  # fmt: skip


def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """A stand-in `pulumi` executable on PATH (the real CLI is not installed here); it
    records its arguments so the test can check the exact command we ran."""
    binary = tmp_path / "bin" / "pulumi"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n{script}\n')
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "args"


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("TTS_FLEET_QUEUE_URL", "TTS_FLEET_DLQ_URL", "TTS_FLEET_BUCKET"):
        monkeypatch.delenv(key, raising=False)


def test_flags_win_over_env_vars(no_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_FLEET_QUEUE_URL", "https://env/q")
    monkeypatch.setenv("TTS_FLEET_BUCKET", "env-bucket")
    target = resolve_target(None, "https://flag/q", None, None)
    assert (target.queue_url, target.bucket, target.dlq_url) == (
        "https://flag/q",
        "env-bucket",
        None,
    )


def test_a_missing_pulumi_cli_names_what_to_pass(
    no_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError) as raised:
        resolve_target("dev", None, None, None)
    message = str(raised.value)
    assert "pulumi CLI" in message and "--queue-url" in message and "\n" not in message


def test_the_dlq_is_found_from_the_redrive_policy(stack: Stack) -> None:
    assert find_dlq_url(boto3.client("sqs"), stack.queue_url) == stack.dlq_url
    plain = boto3.client("sqs").create_queue(QueueName="no-redrive")["QueueUrl"]
    assert find_dlq_url(boto3.client("sqs"), plain) is None


def test_boto3_honours_aws_endpoint_url(aws_env: dict[str, str]) -> None:
    # The shared client is built with no endpoint argument: the env var alone points it here.
    assert client_for("sqs").meta.endpoint_url == aws_env["AWS_ENDPOINT_URL"]
    assert client_for("s3").meta.endpoint_url == aws_env["AWS_ENDPOINT_URL"]


def test_aws_region_alone_is_enough(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    from tts_fleet.client.aws import aws_client

    aws_client.cache_clear()
    try:
        assert client_for("sqs").meta.region_name == "eu-west-1"
    finally:
        aws_client.cache_clear()


def test_a_missing_pulumi_cli_exits_with_the_missing_tool_code(
    no_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    result = run("status", "--stack", "dev")
    assert result.exit_code == ExitCode.MISSING_TOOL and int(ExitCode.MISSING_TOOL) == 3
    assert result.stderr.startswith("Error: --stack dev needs the pulumi CLI")
    assert len(result.stderr.strip().splitlines()) == 1


def test_outputs_file_stands_in_for_the_pulumi_cli(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("TTS_FLEET_QUEUE_URL", "TTS_FLEET_BUCKET"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", "/nonexistent")  # no pulumi: the file alone must do
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps({"queueUrl": stack.queue_url, "bucketName": stack.bucket}))
    code, snapshot = run_json("status", "--outputs-file", str(saved))
    assert code == 0 and snapshot["queue_url"] == stack.queue_url
    saved.write_text("not json")
    result = run("status", "--outputs-file", str(saved))
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stderr.strip() == (
        f"Error: --outputs-file {saved} is not JSON; save it with `pulumi stack output --json`"
    )


def test_region_and_profile_flags_reach_every_client(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tts_fleet.client.aws import aws_client

    made: list[tuple[str, str | None]] = []
    real_client = boto3.Session.client

    def recording_client(self: boto3.Session, service: str, *args: Any, **kwargs: Any) -> Any:
        made.append((service, kwargs.get("region_name")))
        return real_client(self, service, *args, **kwargs)

    monkeypatch.setattr(boto3.Session, "client", recording_client)
    aws_client.cache_clear()
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "eu-west-3")
    try:
        # moto keeps queues per region: only a us-east-1 client sees the stack's queue.
        code, snapshot = run_json("status", "--region", "us-east-1")
        assert code == 0 and snapshot["queue_url"] == stack.queue_url
        assert {"sqs", "cloudwatch"} <= {service for service, _ in made}
        assert {region for _, region in made} == {"us-east-1"}
        # A value for this command's clients, not a change to the process's environment.
        assert os.environ["AWS_REGION"] == "eu-west-3"
        made.clear()
        result = run("status")
        assert result.exit_code == ExitCode.FAILED and "NonExistentQueue" in result.stderr
        assert {region for _, region in made} == {"eu-west-3"}
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        result = run("status", "--profile", "nosuch")
        assert "AWS_PROFILE" not in os.environ
    finally:
        aws_client.cache_clear()
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stderr.startswith("Error: The config profile (nosuch) could not be found")
