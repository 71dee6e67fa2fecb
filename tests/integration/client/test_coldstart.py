"""`tts-fleet coldstart` reading the phases back from the emulator.

Which path: the worker log group's EMF lines (`--log-group`, CloudWatch Logs FilterLogEvents,
which moto serves) and recorded lines (`--from-file`). The default path, CloudWatch's own
p50/p95 (`GetMetricStatistics` with extended statistics), moto cannot aggregate; its requests
are checked against a stubbed client in tests/unit/client/test_coldstart.py.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import cli
from worker.metrics import COLD_START_PHASES, JOBS_COMPLETED, ColdStartMetrics, Metrics

GROUP = "/ecs/tts-dev-worker-3f2a1b"


def worker_lines(stack: str, kind: str, scale: float) -> list[str]:
    """Every phase of one cold start, as the worker writes them, plus a job line."""
    stream = io.StringIO()
    metrics = Metrics(stream, stack=stack)
    for i, phase in enumerate(COLD_START_PHASES):
        ColdStartMetrics(metrics).emit(phase, scale * (i + 1), kind)
    metrics.emit({JOBS_COMPLETED: 1.0}, job_id="a")
    return stream.getvalue().splitlines()


@pytest.fixture
def log_group(aws_env: dict[str, str]) -> Any:
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=GROUP)
    now_ms = int(time.time() * 1000)
    streams = {
        "worker/worker/task-1": (worker_lines("dev", "g6.xlarge", 10.0), now_ms - 3_600_000),
        "worker/worker/task-2": (worker_lines("dev", "g6.xlarge", 20.0), now_ms - 1_800_000),
        "worker/worker/task-3": (worker_lines("dev", "g5.xlarge", 30.0), now_ms - 600_000),
        "worker/worker/old": (worker_lines("dev", "g5.xlarge", 99.0), now_ms - 3 * 86_400_000),
        "worker/worker/prod": (worker_lines("prod", "g6.xlarge", 50.0), now_ms - 60_000),
    }
    for name, (lines, at) in streams.items():
        logs.create_log_stream(logGroupName=GROUP, logStreamName=name)
        events = [{"timestamp": at + i, "message": line} for i, line in enumerate(lines)]
        events.append({"timestamp": at + 99, "message": "INFO worker job a done"})
        logs.put_log_events(logGroupName=GROUP, logStreamName=name, logEvents=events)
    return logs


def test_the_phases_come_back_from_the_log_group(log_group: Any) -> None:
    result = CliRunner().invoke(
        cli, ["coldstart", "--stack", "dev", "--days", "1", "--log-group", GROUP, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["stack"], report["source"]) == ("dev", "logs")
    rows = [
        (r["phase"], r["instanceType"], r["count"], r["p50"], r["p95"]) for r in report["phases"]
    ]
    expected = []
    for i, phase in enumerate(COLD_START_PHASES, start=1):
        expected.append((phase, "g5.xlarge", 1, 30.0 * i, 30.0 * i))
        expected.append((phase, "g6.xlarge", 2, 10.0 * i, 20.0 * i))  # nearest rank of two
    assert rows == expected  # not the 3-day-old task's, not prod's, no job lines


def test_the_text_report_and_recorded_lines_agree(log_group: Any, tmp_path: Path) -> None:
    recorded = tmp_path / "worker-stdout.log"
    recorded.write_text(
        "\n".join(worker_lines("dev", "g6.xlarge", 10.0) + worker_lines("dev", "g6.xlarge", 20.0))
    )
    from_file = CliRunner().invoke(
        cli, ["coldstart", "--stack", "dev", "--from-file", str(recorded)]
    )
    from_logs = CliRunner().invoke(
        cli, ["coldstart", "--stack", "dev", "--days", "1", "--log-group", GROUP]
    )
    assert from_file.exit_code == from_logs.exit_code == 0, from_file.output + from_logs.output
    file_rows = from_file.output.splitlines()[1:]
    logs_rows = [line for line in from_logs.output.splitlines()[1:] if "g5.xlarge" not in line]
    # The same cells; the widths differ (the log group also holds a g5 task's longer figures).
    assert [row.split() for row in file_rows] == [row.split() for row in logs_rows]
    assert file_rows[:2] == [
        "phase      instance type  n    p50     p95",
        "provision  g6.xlarge      2  10.0s   20.0s",
    ]
    assert from_file.output.splitlines()[0] == (
        "cold starts of stack dev, last 7 days (recorded EMF lines)"
    )


def test_a_missing_log_group_fails_with_one_line(aws_env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["coldstart", "--stack", "dev", "--log-group", "/nope"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("Error: cannot read the cold-start figures: ")
    assert "ResourceNotFoundException" in line
