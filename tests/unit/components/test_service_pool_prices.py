"""POOL_USD_PER_HOUR in the task definition: each capacity type's worker-hour price from the
stack's priced pools, for the manifest's cost estimate (worker/throughput.py; issue #23)."""

from __future__ import annotations

import json

from components.service import pool_prices
from tests.unit.components.test_service import build, container_of, service_args
from tts_fleet.scaling.pools import CapacityType, PoolSpec


def _pool(name: str, capacity_type: CapacityType, usd: float) -> PoolSpec:
    return PoolSpec(name, capacity_type, "", 0, 4, usd)


def test_each_capacity_type_is_priced_by_its_first_pool() -> None:
    pools = [
        _pool("spot-l4", "spot", 0.4378),
        _pool("od", "on-demand", 0.8676),
        _pool("spot-l40s", "spot", 1.12),  # a later Spot pool: not the preferred price
    ]
    assert pool_prices(pools) == {"spot": 0.4378, "on-demand": 0.8676}


def test_the_task_env_carries_the_prices_as_one_json_object() -> None:
    args = service_args(pool_usd_per_hour={"spot": 0.4378, "on-demand": 0.8676})
    env = {e["name"]: e["value"] for e in container_of(build(args)[0])["environment"]}
    assert env["POOL_USD_PER_HOUR"] == '{"on-demand":0.8676,"spot":0.4378}'
    assert json.loads(env["POOL_USD_PER_HOUR"]) == {"spot": 0.4378, "on-demand": 0.8676}


def test_no_prices_no_variable() -> None:
    names = [e["name"] for e in container_of(build(service_args())[0])["environment"]]
    assert "POOL_USD_PER_HOUR" not in names
