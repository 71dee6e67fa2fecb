"""The `processes` marker is enforced: an unmarked test that starts a child process fails."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[3] / "tests" / "lib" / "process_marker.py"

INNER_TESTS = """
import subprocess

import pytest


@pytest.fixture(scope="module")
def server():
    return subprocess.Popen(["true"])


def test_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except Exception:
        pass


def test_module_fixture_starts_a_process(server):
    pass


@pytest.mark.processes
def test_marked_may():
    assert subprocess.run(["true"]).returncode == 0
"""


@pytest.mark.processes
def test_a_process_marked_test_may_start_one() -> None:
    assert subprocess.run(["true"], check=True).returncode == 0


@pytest.mark.processes
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_swallowed_refusals_and_fixtures_still_fail(tmp_path: Path, workers: list[str]) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    processes: starts one\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rA",
            *workers,
            "test_inner.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = {
        match.group(2): match.group(1)
        for match in re.finditer(
            r"^(PASSED|FAILED|ERROR) test_inner\.py::(\w+)", result.stdout, re.M
        )
    }
    assert outcomes == {
        "test_swallows_the_refusal": "FAILED",
        "test_module_fixture_starts_a_process": "ERROR",
        "test_marked_may": "PASSED",
    }, result.stdout
    assert "without the `processes` marker" in result.stdout
