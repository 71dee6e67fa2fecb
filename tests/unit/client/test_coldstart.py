"""Reading cold-start figures back (tts_fleet/client/coldstart.py): EMF lines as untrusted
text, p50/p95 per phase and instance type, CloudWatch's own percentiles through a stubbed
client (moto has no extended statistics), and the simulator's measured profile."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from click.testing import CliRunner

from tts_fleet.cli.coldstart import render
from tts_fleet.cli.main import cli
from tts_fleet.client.coldstart import (
    ColdStartError,
    PhaseFigures,
    from_lines,
    from_metrics,
    measured_profile,
    samples,
    window_days,
)
from tts_fleet.scaling.physics import DEFAULT_PROFILE
from worker.metrics import ColdStartMetrics, Metrics

NOW = 1_764_640_000.0


def emf(stack: str, phase: str, seconds: float, kind: str) -> str:
    """A line exactly as a worker writes it."""
    stream = io.StringIO()
    ColdStartMetrics(Metrics(stream, stack=stack)).emit(phase, seconds, kind)
    return stream.getvalue().strip()


def test_only_well_formed_lines_of_the_stack_count() -> None:
    lines = [
        emf("dev", "pull", 42.25, "g6.xlarge"),
        "2026-12-02T00:40:00Z " + emf("dev", "server", 31.0, "g6.xlarge"),  # a log prefix
        emf("prod", "pull", 400.0, "g6.xlarge"),  # another stack
        '{"Stack":"dev","Phase":"pull","InstanceType":"g6.xlarge","ColdStartSeconds":NaN}',
        '{"Stack":"dev","Phase":"pull","InstanceType":"g6.xlarge","ColdStartSeconds":true}',
        '{"Stack":"dev","Phase":"pull","ColdStartSeconds":1}',  # no instance type
        '{"Stack":"dev","JobsCompleted":1}',
        '{"Stack": "dev", "Phase": "pull", ',  # cut short
        "entrypoint: speech server healthy on :8091",
        "[1, 2]",
    ]
    assert list(samples(lines, "dev")) == [
        ("pull", "g6.xlarge", 42.25),
        ("server", "g6.xlarge", 31.0),
    ]


def test_percentiles_per_phase_and_instance_type_in_cold_start_order() -> None:
    lines = [emf("dev", "pull", float(s), "g6.xlarge") for s in range(1, 21)]
    lines += [emf("dev", "provision", 90.0, "g5.xlarge"), emf("dev", "total", 200.0, "g5.xlarge")]
    lines += [emf("dev", "provision", 80.0, "g6.xlarge")]
    assert from_lines(lines, "dev") == [
        PhaseFigures("provision", "g5.xlarge", 1, 90.0, 90.0),
        PhaseFigures("provision", "g6.xlarge", 1, 80.0, 80.0),
        PhaseFigures("pull", "g6.xlarge", 20, 10.0, 19.0),  # nearest rank
        PhaseFigures("total", "g5.xlarge", 1, 200.0, 200.0),
    ]


def test_the_table_reads_in_the_order_of_a_cold_start() -> None:
    figures = [
        PhaseFigures("provision", "g6.xlarge", 3, 95.25, 130.0),
        PhaseFigures("first-job", "g6.xlarge", 3, 6.0, 7.5),
    ]
    assert render("dev", 7, "logs", figures) == (
        "cold starts of stack dev, last 7 days (the worker log group's EMF lines)\n"
        "phase      instance type  n    p50     p95\n"
        "provision  g6.xlarge      3  95.2s  130.0s\n"
        "first-job  g6.xlarge      3   6.0s    7.5s\n"
    )
    assert render("dev", 1, "metrics", []).endswith("no ColdStartSeconds figures in that window\n")


def test_cloudwatch_s_percentiles_are_asked_for_each_series_over_the_whole_window() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stack_dim = [{"Name": "Stack", "Value": "dev"}]
    dims = [*stack_dim, {"Name": "Phase", "Value": "pull"}]
    dims.append({"Name": "InstanceType", "Value": "g6.xlarge"})
    with Stubber(cloudwatch) as stub:
        stub.add_response(
            "list_metrics",
            {
                "Metrics": [
                    {"Namespace": "TtsFleet", "MetricName": "ColdStartSeconds", "Dimensions": dims},
                    # The job metrics' series has only Stack: not a phase.
                    {
                        "Namespace": "TtsFleet",
                        "MetricName": "ColdStartSeconds",
                        "Dimensions": stack_dim,
                    },
                ]
            },
            {"Namespace": "TtsFleet", "MetricName": "ColdStartSeconds", "Dimensions": stack_dim},
        )
        stub.add_response(
            "get_metric_statistics",
            {
                "Label": "ColdStartSeconds",
                "Datapoints": [
                    {
                        "Timestamp": datetime(2026, 11, 25, tzinfo=UTC),
                        "SampleCount": 12.0,
                        "ExtendedStatistics": {"p50": 41.5, "p95": 60.25},
                    }
                ],
            },
            {
                "Namespace": "TtsFleet",
                "MetricName": "ColdStartSeconds",
                "Dimensions": dims,
                "StartTime": NOW - 7 * 86_400,
                "EndTime": NOW,
                "Period": 7 * 86_400,
                "Statistics": ["SampleCount"],
                "ExtendedStatistics": ["p50", "p95"],
                "Unit": "Seconds",
            },
        )
        assert from_metrics(cloudwatch, "dev", 7, NOW) == [
            PhaseFigures("pull", "g6.xlarge", 12, 41.5, 60.25)
        ]
        stub.assert_no_pending_responses()


def test_the_window_is_whole_days_cloudwatch_keeps() -> None:
    assert window_days(0.5) == 1
    assert window_days(14) == 14
    for days in (0, 456):
        with pytest.raises(ColdStartError, match="--days must be between 1 and 455"):
            window_days(days)


def test_the_measured_profile_replaces_the_cold_path_only() -> None:
    figures = [
        PhaseFigures("provision", "g6.xlarge", 3, 100.0, 118.0),
        PhaseFigures("provision", "g5.xlarge", 1, 140.0, 140.0),
        PhaseFigures("pull", "g6.xlarge", 4, 35.0, 40.0),
        PhaseFigures("weights", "g6.xlarge", 4, 10.0, 12.0),
        PhaseFigures("cache", "g6.xlarge", 4, 2.0, 2.0),
        PhaseFigures("server", "g6.xlarge", 4, 30.0, 33.0),
        PhaseFigures("canary", "g6.xlarge", 4, 1.5, 2.0),
        PhaseFigures("first-job", "g6.xlarge", 4, 6.0, 9.0),
    ]
    profile = measured_profile(figures)
    assert profile.name == "measured"
    assert profile.pull_s == pytest.approx(35.0)  # the base's image size at the measured rate
    jitter = 18.0 / 0.45  # the widest p95 − p50 of provision
    assert profile.host_provisioning_jitter_s == pytest.approx(jitter)
    # provision p50 over both types, weighted 3:1, less placement, pull and half the jitter
    assert profile.host_provisioning_s == pytest.approx(110.0 - 10.0 - 35.0 - jitter / 2)
    assert profile.model_load_s == pytest.approx(42.0)
    assert profile.warmup_s == pytest.approx(1.5)
    assert profile.cold_task_s == pytest.approx(110.0 + 42.0 + 1.5)
    untouched = replace(
        profile,
        name=DEFAULT_PROFILE.name,
        pull_mb_per_s=DEFAULT_PROFILE.pull_mb_per_s,
        host_provisioning_s=DEFAULT_PROFILE.host_provisioning_s,
        host_provisioning_jitter_s=DEFAULT_PROFILE.host_provisioning_jitter_s,
        model_load_s=DEFAULT_PROFILE.model_load_s,
        warmup_s=DEFAULT_PROFILE.warmup_s,
    )
    assert untouched == DEFAULT_PROFILE  # batching, lag, placement: the default's


def test_a_phase_never_measured_keeps_the_default_s_figure() -> None:
    profile = measured_profile([PhaseFigures("canary", "g6.xlarge", 2, 3.0, 4.0)])
    assert profile.warmup_s == 3.0
    assert (profile.model_load_s, profile.pull_s) == (
        DEFAULT_PROFILE.model_load_s,
        DEFAULT_PROFILE.pull_s,
    )
    with pytest.raises(ColdStartError, match="no ColdStartSeconds figures"):
        measured_profile([])


def test_simulate_with_measured_timing_uses_the_stack_s_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tts_fleet.client.aws as aws
    import tts_fleet.client.coldstart as coldstart

    figures = [
        PhaseFigures("provision", "g6.xlarge", 5, 80.0, 85.0),
        PhaseFigures("pull", "g6.xlarge", 5, 30.0, 32.0),
        PhaseFigures("server", "g6.xlarge", 5, 35.0, 40.0),
        PhaseFigures("canary", "g6.xlarge", 5, 1.0, 1.2),
    ]
    asked: list[tuple[str, float]] = []

    def read(stack: str, days: float, **kwargs: Any) -> tuple[str, list[PhaseFigures]]:
        asked.append((stack, days))
        return "metrics", figures

    monkeypatch.setattr(aws, "client_for", lambda *a, **k: object())
    monkeypatch.setattr(coldstart, "read_figures", read)
    args = ["simulate", "--trace", "burst:20", "--stack", "dev", "--json", "--region", "us-east-1"]
    measured = CliRunner().invoke(cli, [*args, "--timing", "measured", "--days", "3"])
    assert measured.exit_code == 0, measured.output
    default = CliRunner().invoke(cli, args)
    assert asked == [("dev", 3.0)]
    first = json.loads(measured.output)
    assert first["profile"] == "measured"
    # 80 + 35 + 1 s of cold path against the default's ≈ 11 minutes.
    assert first["first_result_s"] < json.loads(default.output)["first_result_s"] - 400


def test_measured_timing_without_a_stack_is_a_bad_input() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--trace", "burst:5", "--timing", "measured"])
    assert result.exit_code == 2
    assert "--timing measured needs --stack S" in result.output
