"""The autoscaler loop: datapoints per minute, the metric lag, the alarms, the clamp, settled.

Checked against a brute-force re-computation of CloudWatch's series from every observation,
on random clocks, and pinned as the one loop both the simulator and the local scaler drive.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_fleet.scaling.alarms import PERIOD_S, Autoscaler
from tts_fleet.scaling.bands import AlarmModel, Scaling

ROOT = Path(__file__).resolve().parents[3]
CFG = Scaling(min_workers=0, max_workers=4, jobs_per_worker=2, idle_minutes=3)


def test_a_minutes_datapoint_is_its_maximum_and_a_boundary_value_starts_the_next() -> None:
    scaler = Autoscaler(CFG, lag_s=0.0)
    scaler.observe(10.0, 5)
    scaler.observe(20.0, 4)  # falls within minute 0: its maximum is still 5
    scaler.observe(60.0, 0)  # exactly on the boundary: minute 1 starts at 0
    assert scaler.decide(60.0).desired == 3  # minute 0 published at once: ceil(5 / 2)
    scaler.observe(70.0, 2)
    assert scaler.decide(120.0).desired == 1  # minute 1's maximum is 2: the 4 ended at 60 s


def test_a_datapoint_is_visible_only_lag_seconds_after_its_minute_ends() -> None:
    scaler = Autoscaler(CFG, lag_s=90.0)
    scaler.observe(0.0, 8)
    assert scaler.decide(60.0).alarm == "idle"  # no data yet: missing data is idle
    assert scaler.decide(120.0).desired == 0  # minute 0 ends at 60, published at 150
    assert scaler.decide(150.0).desired == 4
    assert scaler.published(149.0) == 0 and scaler.published(150.0) == 1


def test_an_empty_minute_keeps_the_count_until_the_idle_window_has_passed() -> None:
    scaler = Autoscaler(CFG, lag_s=0.0)
    scaler.observe(0.0, 3)
    scaler.observe(30.0, 0)
    decisions = [scaler.decide(PERIOD_S * m) for m in range(1, 6)]
    assert [d.desired for d in decisions] == [2, 2, 2, 0, 0]
    assert [d.alarm for d in decisions] == ["scale-out", "ok", "ok", "idle", "idle"]


def test_the_desired_count_starts_at_and_returns_to_min_workers() -> None:
    cfg = Scaling(min_workers=2, max_workers=6, jobs_per_worker=1, idle_minutes=1)
    scaler = Autoscaler(cfg, lag_s=0.0)
    assert scaler.desired == 2 and scaler.settled()
    scaler.observe(0.0, 9)
    assert scaler.decide(60.0).desired == 6  # the top band, at maxWorkers
    assert not scaler.settled()
    scaler.observe(61.0, 0)
    assert scaler.decide(120.0).desired == 6  # minute 1 still held 9 until 61 s
    assert not scaler.settled()
    assert scaler.decide(180.0).desired == 2
    assert scaler.settled()


def test_quiet_waits_for_every_unpublished_datapoint() -> None:
    scaler = Autoscaler(CFG, lag_s=60.0)
    assert scaler.quiet()
    scaler.observe(10.0, 1)
    scaler.observe(11.0, 0)
    assert not scaler.quiet()  # the open minute had work
    scaler.decide(60.0)
    assert not scaler.quiet()  # minute 0 is not published yet
    scaler.decide(180.0)
    assert scaler.quiet()


def test_a_negative_lag_is_refused() -> None:
    with pytest.raises(ValueError, match="lag_s must be >= 0"):
        Autoscaler(CFG, lag_s=-1.0)


def _reference_series(observations: list[tuple[float, int]], minutes: int) -> list[float]:
    """CloudWatch's Maximum per minute, from scratch: every value observed in the minute,
    plus the value held into it unless one was observed exactly at its start."""
    series = []
    for m in range(minutes):
        start, end = m * PERIOD_S, (m + 1) * PERIOD_S
        inside = [v for t, v in observations if start <= t < end]
        before = [v for t, v in observations if t < start]
        held = before[-1] if before else 0
        at_start = any(t == start for t, _ in observations)
        series.append(max(inside + ([] if at_start else [held])))
    return series


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 80), st.integers(0, 40), st.booleans()), min_size=1, max_size=80
    ),
    lag_s=st.sampled_from([0.0, 30.0, 60.0, 90.0, 150.0]),
    idle_minutes=st.integers(1, 4),
    max_workers=st.integers(1, 30),
)
def test_decisions_match_the_alarm_model_on_a_brute_force_series(
    steps: list[tuple[int, int, bool]], lag_s: float, idle_minutes: int, max_workers: int
) -> None:
    """Random clocks (gaps of up to 10 min, decisions on and off the minute), random lags:
    each decision is AlarmModel.evaluate on the published tail of the reference series."""
    cfg = Scaling(min_workers=0, max_workers=max_workers, jobs_per_worker=3,
                  idle_minutes=idle_minutes)  # fmt: skip
    scaler, model = Autoscaler(cfg, lag_s=lag_s), AlarmModel(cfg)
    observations: list[tuple[float, int]] = []
    now, expected = 0.0, cfg.min_workers
    for gap, value, decide_now in steps:
        now += gap * 7.5  # steps of 7.5 s: one in eight lands exactly on a boundary
        if decide_now:
            closed = int(now // PERIOD_S)
            published = min(closed, max(0, math.floor((now - lag_s) / PERIOD_S + 1e-9)))
            series = _reference_series(observations, closed)
            window = series[max(0, published - idle_minutes) : published]
            expected = model.evaluate(window, expected)
            assert scaler.decide(now).desired == expected
        else:
            scaler.observe(now, value)
            observations.append((now, value))


def _files_with(pattern: re.Pattern[str]) -> list[str]:
    return [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tts_fleet").rglob("*.py"))
        if pattern.search(path.read_text(encoding="utf-8"))
    ]


def test_the_simulator_the_local_fleet_and_the_controller_drive_one_policy_interface() -> None:
    """Both modes are wrapped once, in tts_fleet/scaling/policy.py; the three drivers build a
    Policy and drive it; no capacity is computed outside the scaling core."""
    capacity = re.compile(r"\b(AlarmModel|step_capacity|formula|desired)\(")
    # `tts-fleet scaling` prints the formula's range beside each band: a display, not a loop.
    assert [p for p in _files_with(capacity) if "/scaling/" not in p] == [
        "tts_fleet/cli/scaling.py"
    ]
    assert _files_with(re.compile(r"\bAutoscaler\(")) == ["tts_fleet/scaling/policy.py"]
    pure_decide = re.compile(r"from tts_fleet\.scaling\.controller import \(?[^)]*\bdecide\b")
    assert _files_with(pure_decide) == ["tts_fleet/scaling/policy.py"]
    assert _files_with(re.compile(r"\b(AlarmsPolicy|ControllerPolicy)\(")) == [
        "tts_fleet/controller/handler.py",
        "tts_fleet/local/run.py",
        "tts_fleet/sim/scalers.py",
    ]
    # The local fleet and the simulator take any Policy; the handler drives the controller's.
    assert _files_with(re.compile(r"def __init__\(\s*self,\s*policy: Policy\b")) == [
        "tts_fleet/local/scaler.py",
        "tts_fleet/sim/scalers.py",
    ]
