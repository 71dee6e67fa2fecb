"""The local run's summary of the output checks and of the faults it injected (issue 21)."""

from __future__ import annotations

import dataclasses

from tests.unit.local.test_report import summary
from tts_fleet.local.report import Quality


def test_a_run_with_faults_says_what_was_caught_and_re_rendered() -> None:
    quality = Quality(
        mode="asr", pieces=40, rerendered=18, failed_jobs=0,
        injected={"truncate": 4, "garble": 4}, caught=8, delivered_bad=0,
    )  # fmt: skip
    rows = dict(summary(quality=quality).rows())
    assert rows["output checks (asr)"] == "40 pieces, 18 re-rendered, 0 job(s) failed on quality"
    assert rows["faults injected (--faults)"] == (
        "8 (4 garble, 4 truncate); caught 8, delivered as done 0"
    )
    assert summary(quality=quality).to_json()["quality"] == dataclasses.asdict(quality)


def test_without_faults_only_the_checks_are_shown() -> None:
    rows = dict(summary(quality=Quality("basic", 3, 0, 0)).rows())
    assert "output checks (basic)" in rows and "faults injected (--faults)" not in rows


def test_a_run_without_checks_keeps_its_json_keys() -> None:
    assert "quality" not in summary().to_json()
    assert not any(label.startswith("output checks") for label, _ in summary().rows())
