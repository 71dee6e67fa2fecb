"""`tts-fleet simulate`: JSON, determinism, --compare, --stack, --plot and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import cli
from tts_fleet.client import aws
from tts_fleet.client.aws import AwsSettings, NoRegion
from tts_fleet.config.stack_file import StackFile

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["simulate", *args])
    return result.exit_code, result.output


def test_json_is_identical_for_identical_inputs() -> None:
    args = ("--trace", "poisson:30:1", "--seed", "5", "--max-workers", "6", "--json")
    code, first = invoke(*args)
    assert code == 0, first
    assert invoke(*args)[1] == first
    data = json.loads(first)
    assert data["jobs"] > 0 and data["settings"]["max_workers"] == 6
    assert data["latency_s"]["p50"] <= data["latency_s"]["p95"] <= data["latency_s"]["max"]


def test_compare_runs_both_policies_on_the_same_trace_and_profile() -> None:
    code, output = invoke(
        "--trace", "burst:2000", "--timing", "seed", "--max-workers", "20",
        "--concurrency", "1", "--compare", "--json",
    )  # fmt: skip
    assert code == 0, output
    data = json.loads(output)
    assert data["seed"]["settings"]["max_workers"] == 1  # the seed policy ignores the flags
    assert data["fleet"]["settings"]["max_workers"] == 20
    assert data["seed"]["drain_s"] > 4 * data["fleet"]["drain_s"]
    assert data["seed"]["jobs"] == data["fleet"]["jobs"] == 2000


def test_stack_file_supplies_scaling_and_concurrency() -> None:
    code, output = invoke(
        "--trace", "burst:100", "--stack", "prod", "--project-dir", str(ROOT), "--json"
    )
    assert code == 0, output
    settings = json.loads(output)["settings"]
    prod = StackFile.load(ROOT / "Pulumi.prod.yaml").config()
    assert settings["max_workers"] == prod.scaling.max_workers
    assert settings["idle_minutes"] == prod.scaling.idle_minutes
    assert settings["host_idle_seconds"] == prod.scaling.host_idle_seconds
    assert settings["concurrency"] == prod.worker.concurrency


def test_plot_writes_a_png_timeline(tmp_path: Path) -> None:
    plot = tmp_path / "timeline.png"
    code, output = invoke("--trace", "burst:300", "--compare", "--plot", str(plot))
    assert code == 0, output
    assert plot.read_bytes().startswith(PNG)
    assert "seed" in output and "fleet" in output and "drain time" in output


def test_bad_trace_is_one_error_line() -> None:
    code, output = invoke("--trace", "burst:many")
    assert code == 2
    assert output.strip().splitlines() == ["Error: 'burst:many': N must be numbers"]


def test_bad_flag_names_the_config_key() -> None:
    code, output = invoke("--trace", "burst:5", "--max-workers", "0")
    assert code == 2
    assert output.strip().splitlines() == [
        "Error: tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)"
    ]


def test_cloudwatch_trace_needs_a_queue() -> None:
    code, output = invoke("--trace", "cloudwatch")
    assert code == 2
    assert "needs --stack S (its queueUrl output) or --queue-name" in output


def test_cloudwatch_trace_from_moto(aws_env: dict[str, str]) -> None:
    import datetime as dt

    import boto3

    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    boto3.client("cloudwatch").put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[{
            "MetricName": "NumberOfMessagesSent",
            "Dimensions": [{"Name": "QueueName", "Value": "tts-jobs"}],
            "Timestamp": now - dt.timedelta(minutes=30),
            "Value": 12.0,
        }],
    )  # fmt: skip
    code, output = invoke(
        "--trace", "cloudwatch", "--queue-name", "tts-jobs", "--days", "1", "--json"
    )
    assert code == 0, output
    assert json.loads(output)["jobs"] == 12


def test_batching_flags_replace_the_profile_assumption() -> None:
    args = ("--trace", "burst:400", "--max-workers", "1", "--concurrency", "4", "--json")
    code, none = invoke(*args, "--batch-alpha", "1")
    code2, perfect = invoke(*args, "--batch-alpha", "0", "--job-seconds", "3")
    assert code == code2 == 0
    serial, batched = json.loads(none), json.loads(perfect)
    # A job's latency is set by the number in flight when it starts: at alpha 1 the four
    # first jobs take 2, 4, 6 and 8 s, then every job 8 s (four at a time, no gain at all).
    ready = serial["first_result_s"] - 2.0
    assert serial["drain_s"] == pytest.approx(ready + 8.0 + 99 * 8.0)
    # alpha 0: four at once, 3 s a round, 100 rounds.
    assert batched["drain_s"] == pytest.approx(batched["first_result_s"] - 3.0 + 100 * 3.0)
    bad = CliRunner().invoke(cli, ["simulate", "--trace", "burst:4", "--batch-alpha", "-1"])
    assert bad.exit_code == 2 and "--batch-alpha: must be >= 0 (got -1)" in bad.output


def test_the_timing_profile_is_timing_and_profile_is_the_aws_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, output = invoke("--trace", "burst:50", "--timing", "seed", "--json")
    assert code == 0, output
    assert json.loads(output)["profile"] == "seed"
    # --profile names an AWS profile, as in every command: it reaches the clients that
    # `--trace cloudwatch` makes, and a timing profile's name is no value of it.
    code, output = invoke("--trace", "burst:50", "--profile", "ops", "--json")
    assert code == 0, output
    assert json.loads(output)["profile"] == "default"
    asked: list[tuple[str, AwsSettings | None]] = []

    def client_for(service: str, settings: AwsSettings | None = None) -> None:
        asked.append((service, settings))
        raise NoRegion("no region")  # the command stops here: only the settings matter

    monkeypatch.setattr(aws, "client_for", client_for)
    args = ("--trace", "cloudwatch", "--queue-name", "q", "--profile", "ops", "--region", "r")
    code, output = invoke(*args)
    assert code == 2 and "no region" in output
    assert asked == [("cloudwatch", AwsSettings(region="r", profile="ops"))]
    code, output = invoke("--trace", "burst:50", "--timing", "nosuch")
    assert code == 2 and "--timing" in output


# -- capacity pools (issue #22) ------------------------------------------------------------

POOLED = ("--trace", "poisson:20:2", "--timing", "seed", "--max-workers", "20")
TWO_POOLS = ("--pool", "spot:spot", "--pool", "od:on-demand")


def test_pool_flags_price_each_pool_from_the_cost_tables_beside_the_pool_peers() -> None:
    from tts_fleet.config.stack_file import stack_config
    from tts_fleet.cost.pools import pool_specs

    code, output = invoke(
        *POOLED, *TWO_POOLS, "--compare", "fleet,on-demand-only,spot-only", "--json"
    )
    assert code == 0, output
    data = json.loads(output)
    assert set(data["fleet"]["pools"]) == {"spot", "od"}
    assert set(data["on-demand-only"]["pools"]) == {"od"}
    assert set(data["spot-only"]["pools"]) == {"spot"}
    cfg = stack_config(None, ROOT, {"gpu": {"pools": [
        {"name": "spot", "capacityType": "spot"}, {"name": "od", "capacityType": "on-demand"},
    ]}})  # fmt: skip
    price = {spec.name: spec.usd_per_hour for spec in pool_specs(cfg)}
    for run, pool in (("fleet", "spot"), ("on-demand-only", "od")):
        usage = data[run]["pools"][pool]
        assert usage["usd"] == round(usage["gpu_hours"] * price[pool], 2)
    assert data["fleet"]["total_usd"] < 0.6 * data["on-demand-only"]["total_usd"]


def test_a_stack_files_gpu_pools_and_timeout_drive_the_fallback(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.pools.yaml").write_text(
        "config:\n"
        "  aws:region: us-east-1\n"
        "  tts-fleet:scaling:\n"
        "    maxWorkers: 20\n"
        "  tts-fleet:gpu:\n"
        "    provisioningTimeoutSeconds: 120\n"
        "    pools:\n"
        "      - name: cheap\n"
        "        capacityType: spot\n"
        "      - name: sure\n"
        "        capacityType: on-demand\n"
    )
    code, output = invoke(
        "--trace", "poisson:20:2", "--timing", "seed", "--stack", "pools",
        "--project-dir", str(tmp_path), "--capacity-outage", "cheap:0:1:silent", "--json",
    )  # fmt: skip
    assert code == 0, output
    data = json.loads(output)
    assert set(data["pools"]) == {"cheap", "sure"}
    fallback = data["outages"][0]["fallback_s"]
    assert 120 < fallback <= 120 + 60
    assert data["pools"]["sure"]["gpu_hours"] > 0 and data["pools"]["cheap"]["fallbacks"] >= 1


def test_pool_flags_replace_a_stacks_single_capacity_type() -> None:
    # dev sets gpu.capacityType; with --pool the flags' pools are the capacity.
    code, output = invoke(
        "--trace", "burst:10", "--stack", "dev", "--project-dir", str(ROOT), *TWO_POOLS, "--json"
    )
    assert code == 0, output
    assert set(json.loads(output)["pools"]) == {"spot", "od"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--interruptions", "spot:0.05"), "no pool named spot"),
        ((*TWO_POOLS, "--capacity-outage", "gpu:0:2"), "no pool named gpu"),
        (("--pool", "spot"), "--pool 'spot': expected NAME:TYPE[:MAX]"),
        ((*TWO_POOLS, "--interruptions", "spot"), "--interruptions 'spot': expected"),
        (("--pool", "a:spot", "--pool", "a:on-demand"), "gpu.pools[1].name"),
        (("--pool", "a:spot:30"), "must be <= scaling.maxWorkers"),
    ],
)
def test_bad_capacity_flags_are_one_line(args: tuple[str, ...], message: str) -> None:
    code, output = invoke("--trace", "burst:10", "--max-workers", "20", *args)
    assert code == 2, output
    assert message in output and len(output.strip().splitlines()) == 1


def test_a_pooled_stack_in_alarms_mode_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.al.yaml").write_text(
        "config:\n"
        "  tts-fleet:scaling:\n"
        "    mode: alarms\n"
        "  tts-fleet:gpu:\n"
        "    pools:\n"
        "      - name: spot\n"
        "        capacityType: spot\n"
    )
    code, output = invoke("--trace", "burst:10", "--stack", "al", "--project-dir", str(tmp_path))
    assert code == 2 and "need scaling.mode controller" in output, output
