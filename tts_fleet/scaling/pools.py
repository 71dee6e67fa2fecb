"""Capacity pools (issue #22): what the scaling core knows of each pool it places workers in.

A pool is one Managed Instances capacity provider with its own ECS service (its capacity option
type cannot change after creation), all pools reading the one queue. The stack config's
`gpu.pools` (tts_fleet/config) resolves to an ordered tuple of `PoolSpec`; the deployed
controller reads it from its environment (tts_fleet/controller/settings.py), the simulator and
the local fleet from the stack file. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CapacityType = Literal["spot", "on-demand", "reserved"]
CAPACITY_TYPES: tuple[CapacityType, ...] = ("spot", "on-demand", "reserved")


@dataclass(frozen=True)
class PoolSpec:
    """One pool as the scaling core sees it, in the order the stack lists it."""

    name: str
    capacity_type: CapacityType
    # The pool's ECS service name; "" where there is no ECS (the simulator, the local fleet).
    service: str
    min_workers: int
    max_workers: int
    # What one worker of this pool costs an hour (instance + Managed Instances fee), the price
    # the controller orders non-reserved pools by; computed at deploy time from the cost tables.
    usd_per_hour: float
