"""`submit --deadline/--within` parsed strictly, and the stack default."""

from __future__ import annotations

import calendar

import pytest

from tts_fleet.client.batches import BadDeadline, parse_deadline, parse_within, resolve_deadline

NOW = float(calendar.timegm((2026, 12, 2, 1, 0, 0)))  # 2026-12-02T01:00Z


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("2026-12-02T06:00Z", NOW + 5 * 3600),
        ("2026-12-02t06:00:30z", NOW + 5 * 3600 + 30),
        ("2026-12-02T07:00+01:00", NOW + 5 * 3600),
        (" 2026-12-02T06:00Z ", NOW + 5 * 3600),
    ],
)
def test_a_deadline_is_a_utc_or_offset_time(text: str, at: float) -> None:
    assert parse_deadline(text, NOW) == at


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("2026-12-02T06:00", "give a UTC time"),  # no zone: not guessed
        ("tomorrow", "give a UTC time"),
        ("2026-13-02T06:00Z", "month must be in 1..12"),
        ("2026-12-02T00:59Z", "the deadline 2026-12-02T00:59Z has already passed"),
        ("2026-12-02T01:00Z", "has already passed"),
        ("2026-12-10T01:00Z", "at most 7 days away"),
    ],
)
def test_a_bad_deadline_is_one_line_saying_why(text: str, problem: str) -> None:
    with pytest.raises(BadDeadline, match=problem) as raised:
        parse_deadline(text, NOW)
    assert "\n" not in str(raised.value) and str(raised.value).startswith("--deadline")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6h", 6 * 3600), ("90m", 5400), ("1h30m", 5400), ("2d", 2 * 86_400), ("1d2h3m", 93_780)],
)
def test_within_is_days_hours_minutes(text: str, seconds: float) -> None:
    assert parse_within(text, NOW) == NOW + seconds


@pytest.mark.parametrize("text", ["", "6", "h", "30m1h", "1.5h", "-1h", "6 h", "0m", "8d"])
def test_a_bad_within_is_refused(text: str) -> None:
    with pytest.raises(BadDeadline, match="--within"):
        parse_within(text, NOW)


def test_the_flags_win_over_the_stack_default_and_none_is_todays_behaviour() -> None:
    assert resolve_deadline(None, None, 0, NOW) is None
    assert resolve_deadline(None, None, 30, NOW) == NOW + 1800
    assert resolve_deadline(None, "1h", 30, NOW) == NOW + 3600
    assert resolve_deadline("2026-12-02T06:00Z", None, 30, NOW) == NOW + 5 * 3600
    with pytest.raises(BadDeadline, match="not both"):
        resolve_deadline("2026-12-02T06:00Z", "1h", 0, NOW)
