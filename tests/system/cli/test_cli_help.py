"""Running one command imports no other area, checked in a fresh interpreter (a process);
the help listing is in tests/unit/cli/test_cli_help.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.unit.cli.test_cli_help import ROOT

IMPORTED_BY = """
import json, sys
from tts_fleet.cli.main import cli
try:
    cli(sys.argv[1:], prog_name="tts-fleet")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("tts_fleet", "pulumi")))))
"""


def _imported_by(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.processes
def test_a_command_imports_only_its_own_area() -> None:
    # A fresh interpreter: the test process has imported every area already.
    listing = _imported_by("--help")
    assert not {m for m in listing if m.startswith("tts_fleet.cli.") and m != "tts_fleet.cli.main"}
    submit = _imported_by("submit", "--help")
    assert "tts_fleet.cli.submit" in submit
    assert not {m for m in submit if m.startswith(("tts_fleet.sim", "tts_fleet.deploy", "pulumi"))}
    assert "tts_fleet.cli.simulation" not in submit and "tts_fleet.local.run" not in submit
