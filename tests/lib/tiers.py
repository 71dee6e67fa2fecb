"""Keeps the tiers from drifting: every test under tests/system carries the `processes` marker
and none under tests/unit or tests/integration does (docs/testing.md). A plugin, registered by
tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

# The tier directories under tests/ and whether their tests carry the `processes` marker.
TIER_STARTS_PROCESSES = {"unit": False, "integration": False, "system": True}


def tier_mismatches(root: Path, items: list[pytest.Item]) -> list[str]:
    """The tests whose `processes` marker disagrees with their tier (or that sit in none)."""
    wrong = []
    for item in items:
        parts = item.path.relative_to(root).parts
        tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else None
        marked = item.get_closest_marker("processes") is not None
        if tier not in TIER_STARTS_PROCESSES:
            wrong.append(f"{item.nodeid}: not under tests/unit, tests/integration or tests/system")
        elif marked != TIER_STARTS_PROCESSES[tier]:
            has = "has" if marked else "lacks"
            wrong.append(f"{item.nodeid}: {has} the `processes` marker in tests/{tier}")
    return wrong


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fails the collection when a test's tier and its `processes` marker disagree, so the
    tiers cannot drift: a test that starts a process moves to tests/system/, with the marker."""
    wrong = tier_mismatches(config.rootpath, items)
    if wrong:
        raise pytest.UsageError("tests in the wrong tier:\n" + "\n".join(wrong))
