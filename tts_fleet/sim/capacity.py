"""What the cloud does to capacity pools in a simulation (issue #22): Spot interruptions and
capacity outages, and the command-line forms of both.

- **Interruptions** (`--interruptions POOL:PER_HOUR`): every host of the pool is reclaimed as
  a Poisson process of PER_HOUR per host-hour. The host gets EC2's 2-minute notice
  (NOTICE_S); ECS puts the instance in DRAINING and the service starts a replacement task at
  once (PENDING tasks there are stopped); the worker, which is told nothing, serves on until
  the host goes at the notice's end, billed until then, and the jobs it still holds go back
  to the queue as it drains on SIGTERM.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/spot-instance-draining-linux-container.html
- **Outages** (`--capacity-outage POOL:START_H:HOURS[:silent]`): no new host of the pool
  launches in the window. A task asked for then stays PROVISIONING (ECS never falls back by
  itself, aws/containers-roadmap#773) until capacity returns, unbilled, and its service
  reports a placement failure at each attempt: the first as the task is placed, then every
  PLACEMENT_RETRY_S. `silent` reports none, so only the controller's provisioning timeout
  finds it (the signal that comes first in AWS is not measured yet: research note on
  capacity, §5.6). Hosts already running are not touched (interruptions are their own flag).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# EC2's Spot interruption notice.
NOTICE_S = 120.0
# How often a waiting task's service logs UnfulfillableCapacity: a public vLLM deployment on
# Managed Instances logged it 4 times in 17 minutes (k-k1/agent-fleet, research note
# docs capacity §1), one every 255 s.
PLACEMENT_RETRY_S = 17 * 60 / 4

_INTERRUPTIONS = re.compile(r"^([a-z][a-z0-9-]*):(\d+(?:\.\d+)?)$")
_OUTAGE = re.compile(r"^([a-z][a-z0-9-]*):(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)(:silent)?$")
# A reserved pool needs its reservation group: it comes from a stack file, not a flag.
_POOL = re.compile(r"^([a-z][a-z0-9-]*):(spot|on-demand)(?::(\d+))?$")
# At most one interruption per host-hour in a flag: past it every host dies within its
# cold start and nothing is ever served, which measures nothing.
MAX_INTERRUPTIONS_PER_HOUR = 1.0


class CapacityError(ValueError):
    """A bad --interruptions, --capacity-outage or --pool value; one readable line."""


@dataclass(frozen=True)
class Outage:
    pool: str
    start_s: float
    duration_s: float
    silent: bool = False  # no placement-failure events: only the provisioning timeout tells

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Capacity:
    """The interruptions and outages a run plays, by pool name."""

    interruptions: tuple[tuple[str, float], ...] = ()  # (pool, per host-hour)
    outages: tuple[Outage, ...] = ()

    def pools(self) -> set[str]:
        return {name for name, _ in self.interruptions} | {o.pool for o in self.outages}

    def rate_per_hour(self, pool: str) -> float:
        return sum(rate for name, rate in self.interruptions if name == pool)

    def capacity_from(self, pool: str, t: float) -> float:
        """The first time at or after `t` when the pool can launch a host (outages chain)."""
        moved = True
        while moved:
            moved = False
            for outage in self.outages:
                if outage.pool == pool and outage.start_s <= t < outage.end_s:
                    t, moved = outage.end_s, True
        return t

    def reports_failures(self, pool: str, t: float) -> bool:
        """A task placed at `t` in a pool without capacity sees placement-failure events."""
        return not any(
            o.silent for o in self.outages if o.pool == pool and o.start_s <= t < o.end_s
        )

    def check(self, names: set[str]) -> None:
        """Every pool these name is one of the run's pools."""
        unknown = sorted(self.pools() - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none: pass --pool or a stack with gpu.pools"
            raise CapacityError(f"no pool named {', '.join(unknown)} (pools: {known})")


def parse_interruptions(text: str) -> tuple[str, float]:
    """`POOL:PER_HOUR`, e.g. `spot:0.05` (5 % of the pool's hosts an hour)."""
    match = _INTERRUPTIONS.match(text.strip())
    if not match:
        raise CapacityError(f"--interruptions {text!r}: expected POOL:PER_HOUR, e.g. spot:0.05")
    rate = float(match.group(2))
    if rate > MAX_INTERRUPTIONS_PER_HOUR:
        raise CapacityError(
            f"--interruptions {text!r}: at most {MAX_INTERRUPTIONS_PER_HOUR:g} per host-hour"
        )
    return match.group(1), rate


def parse_outage(text: str) -> Outage:
    """`POOL:START_H:HOURS[:silent]`, e.g. `spot:2:2` (no new spot host from hour 2 to hour
    4, each attempt reported as a placement failure; `silent`: not reported)."""
    match = _OUTAGE.match(text.strip())
    if not match:
        raise CapacityError(
            f"--capacity-outage {text!r}: expected POOL:START_H:HOURS[:silent], e.g. spot:2:2"
        )
    hours = float(match.group(3))
    if hours <= 0:
        raise CapacityError(f"--capacity-outage {text!r}: HOURS must be > 0")
    start, silent = float(match.group(2)) * 3600.0, match.group(4) is not None
    return Outage(match.group(1), start, hours * 3600.0, silent)


def parse_pool(text: str) -> dict[str, object]:
    """`NAME:TYPE[:MAX]` as one raw `gpu.pools` entry (the stack config validates it)."""
    match = _POOL.match(text.strip())
    if not match:
        raise CapacityError(
            f"--pool {text!r}: expected NAME:TYPE[:MAX] with TYPE spot or on-demand, e.g. "
            "spot:spot or od:on-demand:20 (a reserved pool needs a stack file's gpu.pools)"
        )
    entry: dict[str, object] = {"name": match.group(1), "capacityType": match.group(2)}
    if match.group(3) is not None:
        entry["maxWorkers"] = int(match.group(3))
    return entry
