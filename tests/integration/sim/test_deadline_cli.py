"""`tts-fleet simulate --deadline` and `advise --deadline` from the command line (issue #23)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tts_fleet.cli.main import cli
from tts_fleet.exit_codes import ExitCode

FLEET = ("--timing", "seed", "--max-workers", "20", "--concurrency", "1")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_the_table_counts_each_policys_deadlines_side_by_side() -> None:
    code, out = invoke(
        "simulate", "--trace", "burst:1000", *FLEET, "--deadline", "30", "--compare", "seed,fleet"
    )
    assert code == 0, out
    lines = {line[:26].strip(): line[26:].split() for line in out.splitlines()[2:]}
    assert lines["deadlines met / missed"] == ["0", "/", "1", "1", "/", "0"]
    seed_slack, fleet_slack = lines["worst slack to deadline"][::2]
    assert seed_slack.startswith("-")  # the AWS sample is late
    assert not fleet_slack.startswith("-")


def test_without_deadline_the_table_has_no_deadline_rows() -> None:
    code, out = invoke("simulate", "--trace", "burst:100", *FLEET)
    assert code == 0, out
    assert "deadline" not in out


def test_json_of_compared_runs_carries_deadlines_for_each() -> None:
    code, out = invoke(
        "simulate", "--trace", "burst:300", *FLEET, "--deadline", "20",
        "--compare", "keda,fleet", "--json",
    )  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    for name in ("keda", "fleet"):
        assert set(data[name]["deadlines"]) == {"met", "missed", "worst_slack_s"}
        assert "gpu_instance_hours" in data[name] and "latency_s" in data[name]
    assert data["fleet"]["deadlines"]["missed"] == 0


def test_a_bad_deadline_is_one_line() -> None:
    code, out = invoke("simulate", "--trace", "burst:10", "--deadline", "0")
    assert code != 0
    assert "--deadline: must be a positive number of minutes (got 0)" in out


def test_advise_prints_the_cheapest_setting_that_meets_every_deadline() -> None:
    code, out = invoke("advise", "--trace", "bursts:100:3:6", *FLEET, "--deadline", "30")
    assert code == 0, out
    recommended = next(line for line in out.splitlines() if line.startswith("recommended"))
    assert recommended.endswith("missed 0")
    assert "→ idleMinutes" in out


def test_advise_fails_when_no_setting_meets_the_deadline() -> None:
    code, out = invoke(
        "advise", "--trace", "burst:3000", *FLEET[:2], "--max-workers", "1", "--deadline", "15"
    )
    assert code == ExitCode.FAILED
    assert "no swept setting meets" in out and "'deadline_s': 900.0" in out
