"""What a stack costs: the idle floor per month, and the running cost per GPU hour.

"Scale to zero" is zero *GPU* cost: the NAT gateway (or the interface endpoints), alarms,
dashboard, logs, the image in ECR and the outputs in S3 bill all month. `floor_lines` itemises
that floor for each network mode so the choice is made on numbers; `running_cost` is what
each GPU host adds per hour. Prices come from tts_fleet/cost/data/prices.json (source URLs and date
inside), with per-region overrides falling back to us-east-1; what the stack creates (NAT
gateways, endpoints, alarms, keys) comes from tts_fleet/config/topology.py, the facts the Pulumi
components build from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from typing import Any

from tts_fleet.config import topology
from tts_fleet.config.catalogue import BY_NAME
from tts_fleet.config.models import Pool, StackConfig
from tts_fleet.cost.spot import SpotTable, load_spot_prices
from tts_fleet.scaling.physics import SEED_IMAGE_GB
from tts_fleet.sim.report import CostRates

BASE_REGION = "us-east-1"
MODES = ("nat", "endpoints", "existing")


class CostError(ValueError):
    """No price or no instance type fits; one readable line."""


@dataclass(frozen=True)
class Prices:
    region: str
    values: dict[str, Any]
    fallback_keys: tuple[str, ...]  # keys the region does not override (us-east-1 used)
    meta: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def assumptions(self) -> dict[str, float]:
        assumptions: dict[str, float] = self.meta["assumptions"]
        return assumptions


@cache
def _document() -> dict[str, Any]:
    text = resources.files("tts_fleet.cost").joinpath("data/prices.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def load_prices(region: str = BASE_REGION) -> Prices:
    doc = _document()
    base = doc["regions"][BASE_REGION]
    override = doc["regions"].get(region, {})
    values = {**base, **override}
    fallback = () if region == BASE_REGION else tuple(k for k in base if k not in override)
    meta = {k: v for k, v in doc.items() if k != "regions"}
    return Prices(region, values, fallback, meta)


@dataclass(frozen=True)
class Line:
    item: str
    quantity: float
    unit: str
    unit_usd: float
    note: str = ""

    @property
    def monthly_usd(self) -> float:
        return self.quantity * self.unit_usd

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "monthly_usd": round(self.monthly_usd, 2)}


# components/controller.py MEMORY_MB: a few boto3 calls every 10 s need no more.
CONTROLLER_MEMORY_MB = 128


def floor_lines(
    cfg: StackConfig, prices: Prices, mode: str, outputs_per_day: float, image_gb: float
) -> list[Line]:
    """The monthly bill with no task running, item by item."""
    a = prices.assumptions
    lines = _network_lines(cfg, prices, mode)
    retained_days = cfg.outputs.expire_days or 365  # 0 = kept: show a year's worth
    outputs_gb = outputs_per_day * retained_days * a["output_mb"] / 1000.0
    alarm_note = "high resolution (10 s) would cost 3× per alarm metric"
    standard = topology.alarm_metrics(cfg)
    high = topology.alarm_metrics(cfg, high_resolution=True)
    lines += [
        Line("CloudWatch alarms (standard, 60 s)", standard, "alarm metric",
             prices["alarm_metric_standard_month"], alarm_note),
        Line("CloudWatch alarms (high resolution)", high,
             "alarm metric", prices["alarm_metric_high_resolution_month"]),
        Line("CloudWatch dashboard", topology.dashboards(cfg), "dashboard",
             prices["dashboard_month"], "the first 3 dashboards of an account are free"),
        Line("CloudWatch log storage", a["log_gb_stored"], "GB-month",
             prices["log_storage_gb_month"]),
        Line("ECR image storage", image_gb, "GB-month", prices["ecr_storage_gb_month"]),
        Line("KMS customer keys", topology.kms_keys(cfg), "key-month", prices["kms_key_month"],
             "the alerts topic's key; SQS-managed SSE and SSE-S3 need none"),
        Line("S3 outputs", round(outputs_gb, 3), "GB-month", prices["s3_standard_gb_month"],
             f"{outputs_per_day:g}/day × {retained_days} days × {a['output_mb']} MB"),
    ]  # fmt: skip
    return lines + _controller_lines(cfg, prices)


def _controller_lines(cfg: StackConfig, prices: Prices) -> list[Line]:
    """Controller mode's idle bill: a run a minute that samples once, and its metrics."""
    functions = topology.controller_functions(cfg)
    if not functions:
        return []
    runs = topology.CONTROLLER_RUNS_PER_HOUR * prices.meta["hours_per_month"] * functions
    seconds = prices.assumptions["controller_idle_seconds"]
    gb_seconds = runs * seconds * CONTROLLER_MEMORY_MB / 1024
    per_run = (
        gb_seconds * prices["lambda_gb_second"] / runs
        + prices["lambda_request_million"] / 1e6
        + prices["scheduler_invocation_million"] / 1e6
    )
    return [
        Line("Controller (Lambda + Scheduler)", runs, "run", round(per_run, 9),
             f"one a minute, ~{seconds:g} s at {CONTROLLER_MEMORY_MB} MB when idle; free tiers "
             "not counted"),
        Line("CloudWatch metrics (controller)", topology.custom_metrics_always_on(cfg),
             "metric-month", prices["custom_metric_month"], "its decisions, every minute"),
    ]  # fmt: skip


def _network_lines(cfg: StackConfig, prices: Prices, mode: str) -> list[Line]:
    hours = prices.meta["hours_per_month"]
    if mode == "nat":
        nats = topology.nat_count(cfg.network)
        return [
            Line("NAT gateway hours", nats * hours, "NAT-hour", prices["nat_gateway_hour"]),
            Line("NAT public IPv4", nats * hours, "IP-hour", prices["public_ipv4_hour"]),
        ]
    if mode == "endpoints":
        endpoints = len(topology.INTERFACE_ENDPOINTS)
        return [
            Line(
                "Interface endpoints × AZs",
                endpoints * cfg.network.az_count * hours,
                "endpoint-AZ-hour",
                prices["interface_endpoint_hour"],
                f"{endpoints} endpoints × {cfg.network.az_count} AZs",
            )
        ]
    return []  # existing: the VPC's own costs are somebody else's bill


@dataclass(frozen=True)
class Instance:
    type: str
    hourly_usd: float  # on-demand, or the Spot table's price
    fee_usd: float  # ECS Managed Instances management fee, per type (prices.json)

    @property
    def total_hourly_usd(self) -> float:
        return self.hourly_usd + self.fee_usd


def admitted_instances(
    cfg: StackConfig, prices: Prices, pool: Pool | None = None, instance_type: str | None = None
) -> list[Instance]:
    """The priced types a pool may launch (its allowed types, wildcards too, or any type
    gpu.* admits), cheapest first at the pool's own price: On-Demand list price for
    on-demand and reserved pools (a Capacity Reservation bills at On-Demand rates), the Spot
    table's for spot pools. Without `pool`, the stack's first pool."""
    gpu, chosen = cfg.gpu, pool or cfg.pools()[0]
    table: dict[str, dict[str, Any]] = prices["instances"]
    patterns = [instance_type] if instance_type else list(chosen.allowed_instance_types or ["*"])
    names = [n for n in table if any(fnmatchcase(n, p) for p in patterns)]
    fits = [n for n in names if (shape := BY_NAME.get(n)) is not None and shape.fits(gpu)]
    if not fits:
        raise CostError(
            f"no priced instance type fits tts-fleet:gpu ({gpu.gpu_count} GPU, ≥ "
            f"{gpu.min_gpu_memory_gib} GiB) for pool {chosen.name}; priced: "
            f"{', '.join(sorted(table))}"
        )
    spot = load_spot_prices(prices.region) if chosen.capacity_type == "spot" else None
    factor = prices.assumptions["spot_factor"]
    instances = [
        Instance(name, round(_hourly(table[name]["hourly"], name, spot, factor), 4),
                 table[name]["management_fee"])
        for name in fits
    ]  # fmt: skip
    return sorted(instances, key=lambda x: (x.total_hourly_usd, x.type))


def _hourly(on_demand: float, name: str, spot: SpotTable | None, factor: float) -> float:
    if spot is None:
        return on_demand
    quoted = spot.price(name)
    return quoted.usd_per_hour if quoted is not None else on_demand * factor


def pick_instance(
    cfg: StackConfig, prices: Prices, instance_type: str | None = None, pool: Pool | None = None
) -> Instance:
    """The cheapest admitted type: what Managed Instances launches, as it picks the most
    cost-optimized type that matches (developer guide, "Managed Instances instance types")."""
    return admitted_instances(cfg, prices, pool, instance_type)[0]


@dataclass(frozen=True)
class PoolCost:
    """What one worker of a pool costs an hour: the type Managed Instances would pick, and the
    dearest it may pick when that one is short (a 3-type Spot pool was given a g6e, not the
    cheaper g6: the public repo k-k1/agent-fleet, its ADR 0077 "engine boxes bought by cp")."""

    pool: str
    capacity_type: str
    min_workers: int
    max_workers: int
    instance_type: str
    hourly_usd: float
    management_fee_usd: float
    usd_per_hour: float
    dearest_type: str
    dearest_usd_per_hour: float


def pool_costs(cfg: StackConfig, prices: Prices) -> tuple[PoolCost, ...]:
    """Each of the stack's pools, in order, priced."""
    costs = []
    for pool in cfg.pools():
        admitted = admitted_instances(cfg, prices, pool)
        best, dearest = admitted[0], admitted[-1]
        costs.append(
            PoolCost(
                pool=pool.name,
                capacity_type=pool.capacity_type,
                min_workers=pool.min_workers,
                max_workers=pool.max_workers,
                instance_type=best.type,
                hourly_usd=best.hourly_usd,
                management_fee_usd=best.fee_usd,
                usd_per_hour=round(best.total_hourly_usd, 4),
                dearest_type=dearest.type,
                dearest_usd_per_hour=round(dearest.total_hourly_usd, 4),
            )
        )
    return tuple(costs)


@dataclass(frozen=True)
class RunningCost:
    """What each running GPU host adds, per hour, and the network data of a cold start."""

    instance_type: str
    capacity_type: str
    gpu_hourly_usd: float
    management_fee_hourly_usd: float
    per_gpu_hour_usd: float
    network_data_per_cold_start_usd: float


def running_cost(cfg: StackConfig, prices: Prices, mode: str, instance: Instance) -> RunningCost:
    gb = prices.assumptions["nat_gb_per_cold_start"]
    per_gb = {"nat": prices["nat_gateway_gb"], "endpoints": prices["interface_endpoint_gb"]}
    return RunningCost(
        instance_type=instance.type,
        capacity_type=cfg.pools()[0].capacity_type,
        gpu_hourly_usd=instance.hourly_usd,
        management_fee_hourly_usd=instance.fee_usd,
        per_gpu_hour_usd=round(instance.total_hourly_usd, 4),
        network_data_per_cold_start_usd=round(gb * per_gb.get(mode, 0.0), 5),
    )


@dataclass(frozen=True)
class ModeCost:
    floor: tuple[Line, ...]
    running: RunningCost

    @property
    def floor_monthly_usd(self) -> float:
        return round(sum(x.monthly_usd for x in self.floor), 2)

    def to_json(self) -> dict[str, Any]:
        return {
            "floor": [x.to_json() for x in self.floor],
            "floor_monthly_usd": self.floor_monthly_usd,
            "running": asdict(self.running),
        }


@dataclass(frozen=True)
class CostReport:
    """`tts-fleet cost`: the floor and running cost of each network mode, side by side."""

    region: str
    configured_mode: str
    prices_as_of: str
    prices_status: str
    prices_fallback_to_us_east_1: tuple[str, ...]
    modes: dict[str, ModeCost]  # in MODES order
    stack: str = "defaults"  # the stack file read, for the report's title
    pools: tuple[PoolCost, ...] = ()  # per pool, in the stack's order
    spot_prices_as_of: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "configured_mode": self.configured_mode,
            "prices_as_of": self.prices_as_of,
            "prices_status": self.prices_status,
            "prices_fallback_to_us_east_1": list(self.prices_fallback_to_us_east_1),
            "modes": {name: mode.to_json() for name, mode in self.modes.items()},
            "stack": self.stack,
            "pools": [asdict(pool) for pool in self.pools],
            "spot_prices_as_of": self.spot_prices_as_of,
        }


def cost_report(
    cfg: StackConfig, region: str = BASE_REGION, outputs_per_day: float = 1000.0,
    image_gb: float = SEED_IMAGE_GB, stack: str = "defaults",
) -> CostReport:  # fmt: skip
    prices = load_prices(region)
    instance = pick_instance(cfg, prices)
    modes = {
        mode: ModeCost(
            tuple(floor_lines(cfg, prices, mode, outputs_per_day, image_gb)),
            running_cost(cfg, prices, mode, instance),
        )
        for mode in MODES
    }
    return CostReport(
        region=region,
        configured_mode=cfg.network.mode,
        prices_as_of=prices.meta["as_of"],
        prices_status=prices.meta["status"],
        prices_fallback_to_us_east_1=prices.fallback_keys,
        modes=modes,
        stack=stack,
        pools=pool_costs(cfg, prices),
        spot_prices_as_of=load_spot_prices(region).as_of,
    )


def rates_for(
    cfg: StackConfig, region: str = BASE_REGION, instance_type: str | None = None
) -> CostRates:
    """What the simulator charges: per GPU-host hour, and the configured mode's floor."""
    prices = load_prices(region)
    instance = pick_instance(cfg, prices, instance_type)
    lines = floor_lines(cfg, prices, cfg.network.mode, 0.0, SEED_IMAGE_GB)
    return CostRates(round(instance.total_hourly_usd, 4), sum(x.monthly_usd for x in lines))
