"""scaling.deadlineMinutes (issue #23): 0 by default, bounded, and only with the controller."""

from __future__ import annotations

import pytest

from tts_fleet.config.models import ConfigError, StackConfig


def problems(scaling: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw({"scaling": scaling})
    return list(caught.value.problems)


def test_no_deadline_by_default_and_a_set_one_is_kept() -> None:
    assert StackConfig.from_raw({}).scaling.deadline_minutes == 0
    assert (
        StackConfig.from_raw({"scaling": {"deadlineMinutes": 360}}).scaling.deadline_minutes == 360
    )


def test_a_deadline_needs_the_controller_and_at_most_a_week() -> None:
    assert problems({"mode": "alarms", "deadlineMinutes": 30}) == [
        "tts-fleet:scaling.deadlineMinutes: needs scaling.mode controller (0 in alarms mode)"
    ]
    [line] = problems({"deadlineMinutes": 7 * 1440 + 1})
    assert line.startswith("tts-fleet:scaling.deadlineMinutes: ") and "10080" in line
    [line] = problems({"deadlineMinutes": -1})
    assert line.startswith("tts-fleet:scaling.deadlineMinutes: ")
