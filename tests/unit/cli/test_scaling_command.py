"""`tts-fleet scaling`: the bands a stack deploys, read from its stack file."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tts_fleet.cli.main import cli
from tts_fleet.cli.scaling import report
from tts_fleet.config import topology
from tts_fleet.config.stack_file import StackFile
from tts_fleet.scaling.bands import bands

ROOT = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\s+(\d+)\s+\[(\d+), (\d+|inf)\)\s+(\d+)-?(\d*)\+?\s+(\d+)\s")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["scaling", "--project-dir", str(ROOT), *args])


def bands_of(*args: str) -> Result:
    """The alarms mode's report: the checked-in stacks run the controller (the default)."""
    return invoke(*args, "--mode", "alarms")


def table(output: str) -> list[tuple[int, int | None, int]]:
    """(lower, upper | None, workers) per printed step row."""
    rows = []
    for line in output.splitlines():
        match = ROW.match(line)
        if match:
            upper = None if match[3] == "inf" else int(match[3])
            rows.append((int(match[2]), upper, int(match[6])))
    return rows


def test_is_registered_on_the_cli() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "scaling" in result.output


def test_dev_stack_prints_the_issue_bands() -> None:
    result = bands_of("--stack", "dev")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        "dev: minWorkers 0, maxWorkers 4, jobsPerWorker 8, idleMinutes 5, hostIdleSeconds 200"
    )
    assert table(result.output) == [(0, 8, 1), (8, 16, 2), (16, 24, 3), (24, None, 4)]
    assert "   1  [0, 8)               1-8                  1  1          1.00x" in lines
    assert "   4  [24, inf)            25+                  4  4          1.00x" in lines
    assert "worst-case over-provisioning: 1.000x (exact: one step per worker count)" in lines
    assert "idle: outstanding <= 0 for 5 x 60 s (missing data = idle) -> ExactCapacity 0" in lines


def test_prod_stack_rows_are_the_policy_bands_and_quote_the_worst_case() -> None:
    result = bands_of("--stack", "prod")
    assert result.exit_code == 0, result.output
    plan = bands(StackFile.load(ROOT / "Pulumi.prod.yaml").config().scaling)
    assert table(result.output) == [(b.lower, b.upper, b.capacity) for b in plan.bands]
    assert len(plan.bands) == 20
    assert f"worst-case over-provisioning: {plan.worst_overprovision:.3f}x (at " in result.output
    assert "schedule: cron(0 8 ? * MON-FRI *) UTC -> min 1, max 40" in result.output
    assert "schedule: cron(0 19 ? * MON-FRI *) UTC -> min 0, max 40" in result.output


def test_json_document_for_prod() -> None:
    result = bands_of("--stack", "prod", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    cfg = StackFile.load(ROOT / "Pulumi.prod.yaml").config().scaling
    plan = bands(cfg)
    assert data["stack"] == "prod"
    assert data["scaling"]["maxWorkers"] == 40
    assert [(b["lower_bound"], b["upper_bound"], b["workers"]) for b in data["bands"]] == [
        (b.lower, b.upper, b.capacity) for b in plan.bands
    ]
    assert data["worst_overprovision"] == plan.worst_overprovision
    worst = data["worst_at"]
    assert worst["workers"] / worst["formula"] == pytest.approx(plan.worst_overprovision)
    for row in data["bands"]:
        assert row["workers"] >= row["formula_max"]  # never fewer workers than the formula
        assert row["outstanding_min"] == row["lower_bound"] + 1
    assert [s["schedule"] for s in data["schedules"]] == [
        "cron(0 8 ? * MON-FRI *)",
        "cron(0 19 ? * MON-FRI *)",
    ]


def test_flags_override_the_stack_file() -> None:
    result = bands_of("--stack", "dev", "--max-workers", "12", "--json")
    data = json.loads(result.output)
    assert data["scaling"]["maxWorkers"] == 12
    assert data["scaling"]["jobsPerWorker"] == 8  # the rest still comes from Pulumi.dev.yaml
    assert len(data["bands"]) == 12
    assert data["bands"][-1] == {
        "lower_bound": 88,
        "upper_bound": None,
        "outstanding_min": 89,
        "outstanding_max": None,
        "workers": 12,
        "formula_min": 12,
        "formula_max": 12,
        "overprovision": 1.0,
    }


def test_without_a_stack_uses_defaults_and_flags() -> None:
    args = ["scaling", "--max-workers", "2", "--jobs-per-worker", "3", "--mode", "alarms"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert table(result.output) == [(0, 3, 1), (3, None, 2)]
    assert result.output.startswith("defaults: minWorkers 0, maxWorkers 2, jobsPerWorker 3,")


def test_reads_a_stack_file_from_the_project_dir(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.team.yaml").write_text(
        "config:\n  tts-fleet:scaling:\n    maxWorkers: 2\n    jobsPerWorker: 5\n    mode: alarms\n"
    )
    result = CliRunner().invoke(cli, ["scaling", "--stack", "team", "--project-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert table(result.output) == [(0, 5, 1), (5, None, 2)]


def test_missing_stack_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["scaling", "--stack", "qa", "--project-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    path = tmp_path / "Pulumi.qa.yaml"
    assert result.stderr == f"Error: {path}: no such stack file (stacks are Pulumi.<stack>.yaml)\n"


def test_bad_values_name_the_key_one_line_each() -> None:
    result = invoke("--stack", "dev", "--idle-minutes", "2000", "--jobs-per-worker", "0")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert sorted(result.stderr.splitlines()) == [
        "Error: tts-fleet:scaling.idleMinutes: must be <= 1440 (got 2000)",
        "Error: tts-fleet:scaling.jobsPerWorker: must be >= 1 (got 0)",
    ]


def test_the_band_report_is_typed_and_prints_as_the_json_document() -> None:
    cfg = (
        StackFile.load(ROOT / "Pulumi.prod.yaml")
        .config()
        .scaling.model_copy(update={"mode": "alarms"})
    )
    data = report("prod", cfg)
    plan = bands(cfg)
    assert [(r.lower_bound, r.upper_bound, r.workers) for r in data.bands] == [
        (b.lower, b.upper, b.capacity) for b in plan.bands
    ]
    assert data.worst_at.workers / data.worst_at.formula == pytest.approx(plan.worst_overprovision)
    printed = bands_of("--stack", "prod", "--json").output
    assert printed == json.dumps(data.to_json(), indent=2) + "\n"
    # Printed without sort_keys: the document's key order is part of its form.
    assert list(json.loads(printed)) == [
        "stack", "scaling", "bands", "worst_overprovision", "worst_at", "schedules",
    ]  # fmt: skip
    assert list(json.loads(printed)["bands"][0]) == [
        "lower_bound", "upper_bound", "outstanding_min", "outstanding_max", "workers",
        "formula_min", "formula_max", "overprovision",
    ]  # fmt: skip


# ---- controller mode (the default): what the function is deployed with --------------------


def test_a_controller_stack_shows_the_controllers_parameters_and_its_safety_net() -> None:
    result = invoke("--stack", "prod")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("prod: minWorkers 0, maxWorkers 40, jobsPerWorker 16,")
    assert table(result.output) == []  # no step bands: none are deployed
    params = topology.controller_params(StackFile.load(ROOT / "Pulumi.prod.yaml").config())
    assert "bounds: 0..40 workers (the scalable target's; schedules move them)" in lines
    assert f"cold start: {params.cold_start_s:g} s expected;" in result.output
    assert f"throughput: {params.seconds_per_job:g} s per job per worker with 8 in" in result.output
    assert (
        "safety net: alarm visible >= 1 with no task running or wanted for 3 x 60 s"
        " -> ExactCapacity 1"
    ) in lines
    assert "schedule: cron(0 8 ? * MON-FRI *) UTC -> min 1, max 40" in lines


def test_the_controller_document_holds_the_deployed_parameters() -> None:
    cfg = StackFile.load(ROOT / "Pulumi.dev.yaml").config()
    data = json.loads(invoke("--stack", "dev", "--json").output)
    assert data["mode"] == "controller" and "bands" not in data
    deployed = dataclasses.asdict(topology.controller_params(cfg))
    assert data["controller"] == {"sample_interval_s": 10.0, **deployed}
    assert data["safety_net"] == {"minutes": 3, "exact_capacity": 1}


def test_a_stack_file_in_alarms_mode_shows_its_bands(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.team.yaml").write_text(
        "config:\n  tts-fleet:scaling:\n    maxWorkers: 2\n    mode: alarms\n"
    )
    result = CliRunner().invoke(cli, ["scaling", "--stack", "team", "--project-dir", str(tmp_path)])
    assert table(result.output) == [(0, 8, 1), (8, None, 2)]
    # And --mode controller overrides it.
    args = ["scaling", "--stack", "team", "--project-dir", str(tmp_path), "--mode", "controller"]
    assert "mode: controller" in CliRunner().invoke(cli, args).output


def test_a_pooled_stack_shows_its_pools_in_fill_order_priced(tmp_path: Path) -> None:
    """Issue #22: with gpu.pools, the order the controller fills them and when it sets one
    aside; a stack without pools prints no such line (the quoted docs pin that)."""
    from tts_fleet.config.stack_file import stack_config
    from tts_fleet.cost.pools import pool_specs

    (tmp_path / "Pulumi.pools.yaml").write_text(
        "config:\n"
        "  tts-fleet:scaling:\n"
        "    maxWorkers: 20\n"
        "  tts-fleet:gpu:\n"
        "    poolCooldownSeconds: 900\n"
        "    pools:\n"
        "      - name: od\n"
        "        capacityType: on-demand\n"
        "        maxWorkers: 8\n"
        "      - name: spot\n"
        "        capacityType: spot\n"
    )
    run = CliRunner().invoke(cli, ["scaling", "--stack", "pools", "--project-dir", str(tmp_path)])
    assert run.exit_code == 0, run.output
    price = {p.name: p.usd_per_hour for p in pool_specs(stack_config("pools", tmp_path))}
    assert price["spot"] < price["od"]
    assert (
        f"pools: spot (spot, ${price['spot']:g}/h, 0..20), od (on-demand, ${price['od']:g}/h, "
        "0..8): reserved first" in run.output
    )
    assert "pool unavailable for 900 s (poolCooldownSeconds)" in run.output
    assert "over 300 s (provisioningTimeoutSeconds)" in run.output
    data = json.loads(
        CliRunner()
        .invoke(cli, ["scaling", "--stack", "pools", "--project-dir", str(tmp_path), "--json"])
        .output
    )
    assert [p["name"] for p in data["pools"]] == ["spot", "od"]
    assert data["placement"] == {"provisioning_timeout_s": 300, "cooldown_s": 900}
    assert "pools" not in json.loads(invoke("--stack", "dev", "--json").output)
