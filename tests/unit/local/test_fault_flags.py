"""--faults and --fault-seed on `tts-fleet local` and `tts-fleet speech-server`: a bad value
fails before anything starts, naming the flag; a good one reaches the speech server."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from tts_fleet.cli.local import local
from tts_fleet.cli.speech import speech_server
from tts_fleet.config.models import StackConfig
from tts_fleet.local.run import LocalOptions, LocalRun


@pytest.mark.parametrize("command", [local, speech_server])
def test_a_bad_share_is_a_usage_error_naming_the_flag(command: click.Command) -> None:
    args = ["--demo", "1"] if command is local else ["--port", "0"]
    result = CliRunner().invoke(command, [*args, "--faults", "drop=0.7,garble=0.7"])
    assert result.exit_code == 2
    assert "--faults" in result.output and "add up to 1.4" in result.output


def test_the_local_run_hands_its_faults_to_the_speech_server(tmp_path: Path) -> None:
    options = LocalOptions(out=tmp_path, faults="silence=0.1", fault_seed=7)
    run = LocalRun(options, StackConfig.from_raw({}), [], Console(file=None, quiet=True))
    assert run.fault_args() == ("--faults", "silence=0.1", "--fault-seed", "7")
    assert run.fault_plan is not None and run.fault_plan.rates == {"silence": 0.1}
    clean = LocalRun(LocalOptions(out=tmp_path), StackConfig.from_raw({}), [], Console())
    assert clean.fault_args() == () and clean.fault_plan is None
