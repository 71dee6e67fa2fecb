"""Cost model: the idle floor per network mode, instance choice, prices file, `tts-fleet cost`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import cli
from tts_fleet.config import topology
from tts_fleet.config.catalogue import BY_NAME
from tts_fleet.config.models import StackConfig
from tts_fleet.config.stack_file import StackFile
from tts_fleet.config.topology import INTERFACE_ENDPOINTS  # the set the Network component creates
from tts_fleet.cost.pools import pool_specs
from tts_fleet.cost.report import (
    CostError,
    cost_report,
    load_prices,
    pick_instance,
    pool_costs,
    rates_for,
)
from tts_fleet.cost.spot import load_spot_prices
from tts_fleet.cost.text import cost_table

ROOT = Path(__file__).resolve().parents[3]


def floor(report: dict, mode: str) -> dict[str, float]:
    return {x["item"]: x["monthly_usd"] for x in report["modes"][mode]["floor"]}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_scale_to_zero_is_not_a_zero_bill(stack: str) -> None:
    report = cost_report(StackFile.load(ROOT / f"Pulumi.{stack}.yaml").config()).to_json()
    totals = {m: v["floor_monthly_usd"] for m, v in report["modes"].items()}
    nat = floor(report, "nat")
    # nat: the NAT gateway is the largest line and more than half of the floor.
    assert max(nat, key=lambda k: nat[k]) == "NAT gateway hours"
    assert nat["NAT gateway hours"] > totals["nat"] / 2
    # existing mode adds no network of its own: the smallest floor.
    assert totals["existing"] == min(totals.values())
    assert totals["existing"] > 0  # alarms, dashboard, ECR, logs still bill
    assert sum(floor(report, "nat").values()) == pytest.approx(totals["nat"], abs=0.05)


def test_nat_hours_follow_the_gateway_count() -> None:
    prices = load_prices()
    single = StackConfig.from_raw({"network": {"azCount": 3, "natGateways": "single"}})
    per_az = StackConfig.from_raw({"network": {"azCount": 3, "natGateways": "one-per-az"}})
    one = floor(cost_report(single).to_json(), "nat")["NAT gateway hours"]
    three = floor(cost_report(per_az).to_json(), "nat")["NAT gateway hours"]
    assert one == pytest.approx(prices["nat_gateway_hour"] * 730, abs=0.01)
    assert three == pytest.approx(3 * one, abs=0.01)


def test_endpoints_are_priced_per_endpoint_and_az() -> None:
    prices = load_prices()
    cfg = StackConfig.from_raw({"network": {"mode": "endpoints", "azCount": 3}})
    line = floor(cost_report(cfg).to_json(), "endpoints")["Interface endpoints × AZs"]
    expected = len(INTERFACE_ENDPOINTS) * 3 * 730 * prices["interface_endpoint_hour"]
    assert line == pytest.approx(expected, abs=0.01)


def test_instance_choice_follows_gpu_config() -> None:
    prices = load_prices()
    table = prices["instances"]
    default = pick_instance(StackConfig(), prices)
    # Shapes from the config's catalogue, prices from the file: the cheapest admitted type.
    fits = [n for n in table if BY_NAME[n].gpus == 1 and BY_NAME[n].gpu_memory_mib >= 20 * 1024]
    assert default.type == min(fits, key=lambda n: table[n]["hourly"]) == "g6.xlarge"
    big = pick_instance(StackConfig.from_raw({"gpu": {"minGpuMemoryGib": 40}}), prices)
    assert (big.type, BY_NAME[big.type].gpu_memory_mib) == ("g6e.xlarge", 45_776)
    pinned = StackConfig.from_raw({"gpu": {"allowedInstanceTypes": ["g5.xlarge"]}})
    assert pick_instance(pinned, prices).type == "g5.xlarge"
    family = StackConfig.from_raw({"gpu": {"allowedInstanceTypes": ["g6e.*"]}})
    assert pick_instance(family, prices).type == "g6e.xlarge"  # a wildcard, as ECS takes it
    spot = pick_instance(StackConfig.from_raw({"gpu": {"capacityType": "spot"}}), prices)
    # Spot from the dated table: the middle of g6.xlarge's zones' range, not a factor.
    quoted = load_spot_prices().price("g6.xlarge")
    assert quoted is not None and (quoted.low_usd, quoted.high_usd) == (0.349, 0.401)
    assert (spot.type, spot.hourly_usd, spot.fee_usd) == ("g6.xlarge", 0.375, 0.0628)
    with pytest.raises(CostError, match="no priced instance type fits"):
        pick_instance(StackConfig.from_raw({"gpu": {"minGpuMemoryGib": 500}}), prices)


def test_running_cost_and_simulator_rates_agree() -> None:
    cfg = StackConfig()
    report = cost_report(cfg).to_json()
    run = report["modes"]["nat"]["running"]
    assert run["per_gpu_hour_usd"] == pytest.approx(
        run["gpu_hourly_usd"] + run["management_fee_hourly_usd"]
    )
    rates = rates_for(cfg)
    assert rates.gpu_hourly_usd == pytest.approx(run["per_gpu_hour_usd"])
    # The simulator's floor is the configured mode's floor without output storage.
    no_outputs = report["modes"]["nat"]["floor_monthly_usd"] - floor(report, "nat")["S3 outputs"]
    assert rates.floor_monthly_usd == pytest.approx(no_outputs, abs=0.01)
    assert run["network_data_per_cold_start_usd"] > 0
    assert report["modes"]["existing"]["running"]["network_data_per_cold_start_usd"] == 0


def test_region_overrides_fall_back_to_us_east_1_and_say_so() -> None:
    base, eu = load_prices(), load_prices("eu-west-1")
    assert eu["nat_gateway_hour"] > base["nat_gateway_hour"]
    assert eu["dashboard_month"] == base["dashboard_month"]
    assert "dashboard_month" in eu.fallback_keys and "nat_gateway_hour" not in eu.fallback_keys
    assert base.fallback_keys == ()


def test_prices_file_states_source_and_date() -> None:
    meta = load_prices().meta
    assert meta["as_of"] and "verify" in meta["status"]
    assert all(url.startswith("https://aws.amazon.com/") for url in meta["sources"].values())


def test_cost_command_prints_three_modes_side_by_side() -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["cost", "--stack", "dev", "--project-dir", str(ROOT)])
    assert text.exit_code == 0, text.output
    header = next(line for line in text.output.splitlines() if "idle floor" in line)
    assert header.split()[-3:] == ["nat", "endpoints", "existing"]
    as_json = runner.invoke(cli, ["cost", "--stack", "dev", "--project-dir", str(ROOT), "--json"])
    data = json.loads(as_json.output)
    assert data["stack"] == "dev" and set(data["modes"]) == {"nat", "endpoints", "existing"}
    assert data["modes"]["nat"]["running"]["capacity_type"] == "spot"  # from Pulumi.dev.yaml


def test_cost_command_bad_stack_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["cost", "--stack", "nope", "--project-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: {tmp_path / 'Pulumi.nope.yaml'}: no such stack file (stacks are "
        "Pulumi.<stack>.yaml)"
    ]


def test_counts_come_from_the_topology_not_the_prices_file() -> None:
    """The prices file holds prices and usage assumptions; what the stack creates (alarms,
    endpoints, keys) is the topology's, the facts the components build from."""
    assumptions = load_prices().assumptions
    for copied in ("interface_endpoints", "alarm_metrics_standard", "kms_keys", "dashboards"):
        assert copied not in assumptions
    report = cost_report(StackConfig())
    lines = {x.item: x for x in report.modes["existing"].floor}
    cfg = StackConfig()
    # Default (controller) mode: the safety net (3 metrics), the controller function's
    # errors alarm (3) and the two queue alarms.
    assert lines["CloudWatch alarms (standard, 60 s)"].quantity == topology.alarm_metrics(cfg) == 8
    alarms_mode = StackConfig.from_raw({"scaling": {"mode": "alarms"}})
    assert topology.alarm_metrics(alarms_mode) == 6  # scale-out and idle: 2 metrics each
    # The controller runs all month and reports every minute; alarms mode has neither line.
    assert lines["CloudWatch metrics (controller)"].quantity == 4
    runs = lines["Controller (Lambda + Scheduler)"]
    assert runs.quantity == 60 * 730 and 0 < runs.monthly_usd < 1
    alarm_lines = {x.item for x in cost_report(alarms_mode).modes["existing"].floor}
    assert "Controller (Lambda + Scheduler)" not in alarm_lines
    # The alerts topic's customer-managed key bills a month like any other.
    assert lines["KMS customer keys"].quantity == topology.kms_keys(cfg) == 1
    assert lines["KMS customer keys"].monthly_usd == load_prices()["kms_key_month"]


def test_cost_report_is_typed_and_its_json_keeps_the_document_keys() -> None:
    report = cost_report(StackConfig(), stack="dev")
    assert list(report.modes) == ["nat", "endpoints", "existing"]
    nat = report.modes["nat"]
    assert nat.floor_monthly_usd == round(sum(x.monthly_usd for x in nat.floor), 2)
    data = report.to_json()
    assert set(data) == {
        "region", "configured_mode", "prices_as_of", "prices_status",
        "prices_fallback_to_us_east_1", "modes", "stack", "pools", "spot_prices_as_of",
    }  # fmt: skip
    assert set(data["modes"]["nat"]) == {"floor", "floor_monthly_usd", "running"}
    assert set(data["modes"]["nat"]["floor"][0]) == {
        "item", "quantity", "unit", "unit_usd", "monthly_usd", "note",
    }  # fmt: skip
    assert data["modes"]["nat"]["running"]["instance_type"] == nat.running.instance_type
    assert data["stack"] == "dev"


# ---- capacity pools (issue #22): the fee per type, the Spot table, the cost per pool ----------


def test_the_managed_instances_fee_is_the_published_cut_per_family() -> None:
    """After 2026-07-01: G families -35 % and P families -60 % from about 12 % of On-Demand,
    so 7.8 % and 4.8 % (Cost Explorer billed 7.80 % for g6.xlarge and g6e.xlarge)."""
    table = load_prices()["instances"]
    for name, row in table.items():
        share = {"g": 0.078, "p": 0.048}[name[0]]
        assert row["management_fee"] == pytest.approx(row["hourly"] * share, abs=5e-5), name
    assert table["g6.xlarge"] == {"hourly": 0.8048, "management_fee": 0.0628}
    assert table["p5.4xlarge"] == {"hourly": 6.88, "management_fee": 0.3302}


def test_every_priced_type_has_a_shape_in_the_config_catalogue() -> None:
    assert set(load_prices()["instances"]) <= set(BY_NAME)


def test_the_spot_table_is_dated_sourced_and_sane() -> None:
    table = load_spot_prices()
    assert table.as_of == "2026-12-01" and not table.fallback
    assert set(table.sources) == {"us-east-1", "ap-northeast-1", "interruption_band"}
    for price in table.prices.values():
        assert 0 < price.low_usd <= price.high_usd
        # A Spot price above the On-Demand list price would be a typo.
        assert price.high_usd < load_prices()["instances"][price.instance_type]["hourly"]
    g6e = table.price("g6e.xlarge")
    assert g6e is not None and (g6e.usd_per_hour, g6e.interruption_band) == (1.0565, "5-10")
    tokyo = load_spot_prices("ap-northeast-1").price("g6.xlarge")
    assert tokyo is not None and tokyo.usd_per_hour == 0.57
    elsewhere = load_spot_prices("eu-west-1")
    assert elsewhere.fallback and elsewhere.price("g6.xlarge") == table.price("g6.xlarge")


POOLED = {
    "gpu": {
        "pools": [
            {"name": "spot", "capacityType": "spot"},
            {"name": "od", "capacityType": "on-demand", "maxWorkers": 2},
            {
                "name": "res",
                "capacityType": "reserved",
                "capacityReservationGroupArn": (
                    "arn:aws:resource-groups:us-east-1:123456789012:group/tts"
                ),
                "allowedInstanceTypes": ["g6e.xlarge"],
                "minWorkers": 1,
            },
        ]
    }
}


def test_each_pool_is_priced_at_the_type_managed_instances_would_launch() -> None:
    pools = pool_costs(StackConfig.from_raw(POOLED), load_prices())
    assert [
        (p.pool, p.instance_type, p.hourly_usd, p.management_fee_usd, p.usd_per_hour) for p in pools
    ] == [
        ("spot", "g6.xlarge", 0.375, 0.0628, 0.4378),  # the Spot table's middle + fee
        ("od", "g6.xlarge", 0.8048, 0.0628, 0.8676),
        ("res", "g6e.xlarge", 1.861, 0.1452, 2.0062),  # a reservation bills at On-Demand rates
    ]
    # The dearest a pool admits: the Spot pool's default set ends at g6e.xlarge.
    assert (pools[0].dearest_type, pools[0].dearest_usd_per_hour) == ("g6e.xlarge", 1.2017)
    assert [(p.min_workers, p.max_workers) for p in pools] == [(0, 4), (0, 2), (1, 4)]


def test_pool_specs_carry_the_prices_and_the_services_named() -> None:
    cfg = StackConfig.from_raw(POOLED)
    specs = pool_specs(cfg, services={"spot": "svc-spot", "od": "svc-od"})
    assert [(s.name, s.capacity_type, s.service, s.usd_per_hour) for s in specs] == [
        ("spot", "spot", "svc-spot", 0.4378),
        ("od", "on-demand", "svc-od", 0.8676),
        ("res", "reserved", "", 2.0062),
    ]
    (only,) = pool_specs(StackConfig())
    assert (only.name, only.capacity_type, only.usd_per_hour) == ("on-demand", "on-demand", 0.8676)


def test_cost_itemises_each_pool() -> None:
    report = cost_report(StackConfig.from_raw(POOLED))
    lines = cost_table(report).splitlines()
    start = lines.index(
        "running, per worker-hour (instance + Managed Instances fee; Spot as of 2026-12-01):"
    )
    assert lines[start + 1 : start + 4] == [
        "  spot (spot, 0-4 workers): g6.xlarge $0.3750 + $0.0628 = $0.4378;"
        " up to $1.2017 (g6e.xlarge)",
        "  od (on-demand, 0-2 workers): g6.xlarge $0.8048 + $0.0628 = $0.8676;"
        " up to $7.2102 (p5.4xlarge)",
        "  res (reserved, 1-4 workers): g6e.xlarge $1.8610 + $0.1452 = $2.0062",
    ]
    assert [p["pool"] for p in report.to_json()["pools"]] == ["spot", "od", "res"]
