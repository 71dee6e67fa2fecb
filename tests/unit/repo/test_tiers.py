"""The tier check (tests/lib/tiers.py) names every test whose `processes` marker disagrees with
its tier, and passes the suite as it is (the collection of this very run got through it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.lib.tiers import tier_mismatches

ROOT = Path("/repo")


@dataclass
class Collected:
    """What the check reads of a collected test: its path, its id and its markers."""

    path: Path
    marked: bool

    @property
    def nodeid(self) -> str:
        return f"{self.path.relative_to(ROOT)}::test_x"

    def get_closest_marker(self, name: str) -> object | None:
        return object() if self.marked and name == "processes" else None


def mismatches(*tests: tuple[str, bool]) -> list[str]:
    items = [Collected(ROOT / path, marked) for path, marked in tests]
    return tier_mismatches(ROOT, cast(list[pytest.Item], cast(Any, items)))


def test_each_tier_with_its_marker_passes() -> None:
    assert (
        mismatches(
            ("tests/unit/worker/test_jobs.py", False),
            ("tests/integration/client/test_submit.py", False),
            ("tests/system/worker/test_jobs.py", True),
            ("tests/unit/test_stats.py", False),
        )
        == []
    )


def test_a_marker_in_the_wrong_tier_is_named() -> None:
    assert mismatches(
        ("tests/unit/worker/test_jobs.py", True),
        ("tests/integration/client/test_submit.py", True),
        ("tests/system/worker/test_jobs.py", False),
    ) == [
        "tests/unit/worker/test_jobs.py::test_x: has the `processes` marker in tests/unit",
        "tests/integration/client/test_submit.py::test_x: has the `processes` marker in "
        "tests/integration",
        "tests/system/worker/test_jobs.py::test_x: lacks the `processes` marker in tests/system",
    ]


def test_a_test_outside_the_tiers_is_named() -> None:
    assert mismatches(("tests/test_new.py", False), ("tests/worker/test_new.py", True)) == [
        "tests/test_new.py::test_x: not under tests/unit, tests/integration or tests/system",
        "tests/worker/test_new.py::test_x: not under tests/unit, tests/integration or tests/system",
    ]
