"""Traces: exact arrival counts and times, CSV parsing, bad specs, CloudWatch history via moto."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import boto3
import pytest

from tts_fleet.sim.traces import (
    SENT_METRIC,
    SQS_NAMESPACE,
    TraceError,
    cloudwatch_arrivals,
    metric_period,
    parse_trace,
)


def test_burst_is_n_jobs_at_zero() -> None:
    trace = parse_trace("burst:250")
    assert len(trace.arrivals) == 250
    assert set(trace.arrivals) == {0.0}


def test_sparse_is_one_job_every_gap_within_the_hours() -> None:
    trace = parse_trace("sparse:7:8")
    # k · 420 s < 8 h for k = 0 .. 68
    assert len(trace.arrivals) == 69
    assert trace.arrivals[:3] == (0.0, 420.0, 840.0)
    assert trace.arrivals[-1] == 68 * 420.0
    assert trace.horizon_s == 8 * 3600.0


def test_poisson_is_deterministic_per_seed_and_has_the_right_rate() -> None:
    first = parse_trace("poisson:10:24", seed=3)
    assert first == parse_trace("poisson:10:24", seed=3)
    assert first != parse_trace("poisson:10:24", seed=4)
    # 14,400 expected; a Poisson count's sd is 120, so ±4 % is > 4 sd.
    assert abs(len(first.arrivals) - 14_400) < 0.04 * 14_400
    assert list(first.arrivals) == sorted(first.arrivals)
    assert all(0 <= t < 24 * 3600 for t in first.arrivals)


def test_diurnal_peaks_in_the_afternoon_and_is_quiet_at_night() -> None:
    trace = parse_trace("diurnal:30:2", seed=1)
    hours = [int(t // 3600) % 24 for t in trace.arrivals]
    afternoon = sum(1 for h in hours if 13 <= h <= 15)
    night = sum(1 for h in hours if 1 <= h <= 3)
    assert afternoon > 20 * max(1, night)
    # mean rate is half the peak: 15/min over 2 days ≈ 43,200
    assert abs(len(trace.arrivals) - 43_200) < 0.05 * 43_200


def test_csv_of_seconds_and_iso_times_with_a_header(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "submitted_at,id\n2026-01-01T00:01:30Z,a\n2026-01-01T00:00:00Z,b\n\n2026-01-01T01:00:00,c\n"
    )
    assert parse_trace(str(path)).arrivals == (0.0, 90.0, 3600.0)
    numbers = tmp_path / "n.csv"
    numbers.write_text("100\n40.5\n")
    assert parse_trace(str(numbers)).arrivals == (0.0, 59.5)


def test_csv_bad_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("10\n20\nsoon\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: 'soon' is not seconds or an ISO time"):
        parse_trace(str(path))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("burst", "expected 1 values"),
        ("burst:ten", "must be numbers"),
        ("burst:2.5", "whole number"),
        ("poisson:5", "expected 2 values"),
        ("sparse:0:8", "must be positive"),
        ("weekly:3", "unknown trace"),
        ("missing.csv", "cannot read"),
    ],
)
def test_bad_specs_fail_with_one_line(spec: str, message: str) -> None:
    with pytest.raises(TraceError, match=message) as caught:
        parse_trace(spec)
    assert "\n" not in str(caught.value)


def test_metric_period_follows_cloudwatch_retention() -> None:
    assert [metric_period(d) for d in (1, 15, 16, 63, 64)] == [60, 60, 300, 300, 3600]
    with pytest.raises(TraceError, match="455 days"):
        metric_period(500)


def test_cloudwatch_history_becomes_arrivals(aws_env: dict[str, str]) -> None:
    """put_metric_data into moto, read back through get_metric_data (Sum per minute)."""
    cloudwatch = boto3.client("cloudwatch")
    end = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    start = end - dt.timedelta(hours=1)
    sent = [(10, 0, 3.0), (11, 0, 1.0), (30, 0, 5.0), (30, 20, 2.0)]  # minute, second, count
    for minute, second, count in sent:
        datum = {
            "MetricName": SENT_METRIC,
            "Dimensions": [{"Name": "QueueName", "Value": "jobs"}],
            "Timestamp": start + dt.timedelta(minutes=minute, seconds=second),
            "Value": count,
        }
        cloudwatch.put_metric_data(Namespace=SQS_NAMESPACE, MetricData=[datum])
    other = {**datum, "Dimensions": [{"Name": "QueueName", "Value": "other"}], "Value": 50.0}
    cloudwatch.put_metric_data(Namespace=SQS_NAMESPACE, MetricData=[other])

    trace = cloudwatch_arrivals(cloudwatch, "jobs", 1 / 24, end=end)

    # 3 in minute 10, 1 in minute 11, 5 + 2 in minute 30, spread evenly inside each minute.
    minute_30 = tuple(1800 + (i + 0.5) * 60 / 7 for i in range(7))
    assert trace.arrivals == (610.0, 630.0, 650.0, 690.0, *minute_30)
    assert trace.horizon_s == 3600.0
