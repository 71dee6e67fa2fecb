"""A few of the bad-input table's cases (tests/unit/cli/test_bad_inputs.py) through the console
script in its own process, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli import test_bad_inputs as in_process
from tests.unit.cli.test_bad_inputs import CASES, Case, assert_one_error_line, clean_env

# The in-process tests' project directory, a fixture pytest finds under this name.
project = in_process.project


SCRIPT = Path(sys.executable).with_name("tts-fleet")


def run_subprocess(project: Path, case: Case) -> tuple[int, str]:
    argv = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tts_fleet"]
    env = clean_env(case)
    done = subprocess.run(
        [*argv, *case.argv], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stderr


# One of each kind: click's usage error, a command's own bad input, and a missing tool.
AS_A_USER_RUNS_IT = ("unknown command", "local YAML syntax error", "deploy without the pulumi CLI")


@pytest.mark.processes
@pytest.mark.parametrize(
    "case", [case for case in CASES if case.name in AS_A_USER_RUNS_IT], ids=lambda case: case.name
)
def test_the_console_script_says_the_same_in_its_own_process(project: Path, case: Case) -> None:
    assert_one_error_line(case, *run_subprocess(project, case))
