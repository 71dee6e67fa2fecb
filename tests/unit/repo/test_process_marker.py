"""The `processes` marker is enforced in process: an unmarked test's attempt to start a child
process is refused (tests/system/repo/test_process_marker.py runs whole suites)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.lib.process_marker import SPAWNED, UnmarkedProcessError


def test_an_unmarked_test_cannot_start_a_process(request: pytest.FixtureRequest) -> None:
    with pytest.raises(UnmarkedProcessError, match="without the `processes` marker"):
        subprocess.run(["true"], check=True)
    with pytest.raises(UnmarkedProcessError, match=r"os\.system"):
        os.system("true")
    # The refusals were the point of this test: do not fail it for them afterwards.
    request.node.stash[SPAWNED].clear()
