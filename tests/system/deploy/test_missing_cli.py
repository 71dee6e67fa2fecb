"""The real `tts-fleet` process with a PATH that holds no `pulumi`: one line, exit 3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tts_fleet.deploy.driver import MISSING_CLI

pytestmark = pytest.mark.processes

ENTRY = "from tts_fleet.cli.main import main; main()"  # what the `tts-fleet` console script runs


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args",
    [
        ["preview", "--stack", "dev"],
        ["preview", "--stack", "dev", "--set", "scaling.maxWorkers=12", "--json"],
        ["up", "--stack", "dev"],
        ["up", "--stack", "prod", "--yes"],
        ["destroy", "--stack", "dev", "--yes"],
        ["refresh", "--stack", "dev"],
        ["outputs", "--stack", "dev"],
    ],
)
def test_missing_cli_prints_one_line_and_exits_3(
    project: Path, tmp_path_factory: pytest.TempPathFactory, args: list[str]
) -> None:
    empty_bin = tmp_path_factory.mktemp("bin")  # PATH with no pulumi (and nothing else)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI")}
    env["PATH"] = str(empty_bin)
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, "deploy", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [f"Error: {MISSING_CLI}"]
    assert "Traceback" not in proc.stderr
    assert "curl -fsSL https://get.pulumi.com | sh" in MISSING_CLI
    if "--json" not in args:
        assert proc.stdout == ""
