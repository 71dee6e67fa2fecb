"""The stack's pools as the scaling core sees them (tts_fleet/scaling/pools.py::PoolSpec), each
priced from the cost tables: what one worker of the pool costs an hour, instance and Managed
Instances fee (tts_fleet/cost/report.py::pool_costs).

The Pulumi program computes them at deploy time for the controller's environment, with each
pool's ECS service name; the simulator and the local fleet take them without services.
"""

from __future__ import annotations

from collections.abc import Mapping

from tts_fleet.config.models import StackConfig
from tts_fleet.cost.report import BASE_REGION, load_prices, pool_costs
from tts_fleet.scaling.pools import PoolSpec


def pool_specs(
    cfg: StackConfig, region: str = BASE_REGION, services: Mapping[str, str] | None = None
) -> tuple[PoolSpec, ...]:
    """The pools in the stack's order, priced in `region` (us-east-1 prices where it has
    none). `services`: each pool's ECS service name by pool name; a pool not in it gets ""
    (no ECS: the simulator, the local fleet)."""
    named = services or {}
    return tuple(
        PoolSpec(
            name=cost.pool,
            capacity_type=pool.capacity_type,
            service=named.get(cost.pool, ""),
            min_workers=cost.min_workers,
            max_workers=cost.max_workers,
            usd_per_hour=cost.usd_per_hour,
        )
        for pool, cost in zip(cfg.pools(), pool_costs(cfg, load_prices(region)), strict=True)
    )
