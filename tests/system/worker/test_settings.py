"""A misconfigured real worker process (python -m worker) exits with one line, and a SIGTERM
while it waits for speech exits 0; the settings themselves are in
tests/unit/worker/test_settings.py."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.lib.procs import ROOT, env_for, make_queues_and_bucket, worker_env
from tests.unit.worker.test_settings import REQUIRED


def run_worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.processes
def test_misconfigured_worker_exits_non_zero_with_one_line(aws_env: dict[str, Any]) -> None:
    result = run_worker(worker_env(aws_env, CONCURRENCY="lots", **REQUIRED) | {"QUEUE_URL": ""})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "configuration error" in lines[0]
    assert "QUEUE_URL is required" in lines[0] and "CONCURRENCY='lots'" in lines[0]
    assert result.stdout == ""


def reachable(sqs: Any, s3: Any) -> dict[str, str]:
    """Settings naming a bucket and queues that exist (the worker checks them first)."""
    return {"AWS_REGION": "us-east-1", **env_for(make_queues_and_bucket(sqs, s3))}


@pytest.mark.processes
@pytest.mark.parametrize("name", ["OUTPUT_BUCKET", "QUEUE_URL", "DLQ_URL"])
def test_missing_bucket_or_queue_exits_2_with_one_line(aws_env, sqs, s3, name: str) -> None:
    env = reachable(sqs, s3)
    env[name] += "-missing"
    # The speech server is down and would be waited for 120 s: the check comes first.
    result = run_worker(
        worker_env(aws_env, SPEECH_URL="http://127.0.0.1:9", HEALTH_TIMEOUT_SECONDS=120, **env)
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert f"configuration error: {name}={env[name]!r} cannot be used" in errors[0]
    assert "speech server" not in result.stderr


@pytest.mark.processes
def test_worker_without_speech_server_fails_fast(aws_env: dict[str, Any], sqs, s3) -> None:
    env = worker_env(
        aws_env, SPEECH_URL="http://127.0.0.1:9", HEALTH_TIMEOUT_SECONDS=1, **reachable(sqs, s3)
    )
    result = run_worker(env)
    assert result.returncode == 3
    assert "speech server http://127.0.0.1:9/health did not answer within 1s" in result.stderr


@pytest.mark.processes
def test_sigterm_while_waiting_for_speech_exits_0(aws_env: dict[str, Any], sqs, s3) -> None:
    from tests.lib.procs import start_worker, stop_process, wait_for_log

    worker = start_worker(
        aws_env, SPEECH_URL="http://127.0.0.1:9", HEALTH_TIMEOUT_SECONDS=120, **reachable(sqs, s3)
    )
    try:
        wait_for_log(worker, "waiting for the speech server", timeout=30)
        worker.terminate()
        assert worker.wait(15) == 0
    finally:
        stop_process(worker)
