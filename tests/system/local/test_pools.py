"""Capacity pools in the local fleet (issue #22) with real processes: a pool in an outage keeps
its new workers pending, and the controller's placement moves the demand to the next pool.

The scaler tests script the queue and run sleeper workers (test_scaler.py's), so the steps are
exact and quick; the last test runs the whole `tts-fleet local` with a stack's gpu.pools.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lib.local_cli import RUN_TIMEOUT, Run
from tests.system.local.test_scaler import SLEEPER, Script, agent, controller_params
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.local.scaler import PoolScaler, Tick
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S
from tts_fleet.scaling.policy import ControllerPolicy
from tts_fleet.scaling.pools import PlacementParams, PoolSpec
from tts_fleet.sim.capacity import Capacity, Outage

pytestmark = pytest.mark.processes
__all__ = ["agent"]  # the stand-in ECS agent fixture the scaler's workers use

SPOT = PoolSpec("spot", "spot", "", 0, 2, 0.40)
ON_DEMAND = PoolSpec("od", "on-demand", "", 0, 2, 1.01)
# On the fleet's clock: a minute of provisioning, two of cooldown (6 and 12 samples).
PLACEMENT = PlacementParams(provisioning_timeout_s=60.0, cooldown_s=120.0)


@pytest.fixture
def make_pooled(agent: Any, tmp_path: Path) -> Iterator[Any]:
    made: list[tuple[WorkerPool, EventLog]] = []

    def make(outstanding: list[int], *outages: Outage) -> PoolScaler:
        log = EventLog(tmp_path / "events.jsonl")
        pool = WorkerPool(os.environ, agent, tmp_path / "logs", 2.0, log, command=SLEEPER)
        made.append((pool, log))
        policy = ControllerPolicy(
            # Slow jobs: the workers running clear little of a backlog in a cold start.
            controller_params(max_workers=4, seconds_per_job=60.0),
            pools=(SPOT, ON_DEMAND),
            placement=PLACEMENT,
        )
        capacity = Capacity(outages=outages)
        return PoolScaler(
            policy, pool, Script(outstanding), lambda: 0, log, 0, (SPOT, ON_DEMAND), capacity
        )

    yield make
    for pool, log in made:
        pool.shutdown(lambda: True)
        log.close()


def groups(sample: Tick) -> dict[str, tuple[int, int, int]]:
    """Each pool's (desired, running, pending) after the step."""
    return {
        str(p["pool"]): (int(str(p["desired"])), int(str(p["running"])), int(str(p["pending"])))
        for p in sample.pools
    }


def test_without_an_outage_the_cheapest_pool_takes_the_demand(make_pooled: Any) -> None:
    scaler = make_pooled([8])
    first = scaler.step()
    assert groups(first) == {"spot": (2, 2, 0), "od": (0, 0, 0)}
    assert [w["pool"] for w in first.workers] == ["spot", "spot"]


def test_a_silent_outage_moves_demand_on_past_the_provisioning_timeout(make_pooled: Any) -> None:
    scaler = make_pooled([8], Outage("spot", 0.0, 3600.0, silent=True))
    samples = [scaler.step() for _ in range(9)]
    # Spot's workers are asked for and stay pending: no host in the outage.
    assert groups(samples[0]) == {"spot": (2, 0, 2), "od": (0, 0, 0)}
    moved = next(i for i, s in enumerate(samples) if groups(s)["od"][0] > 0)
    # Asked for at the first sample; waiting longer than the timeout only past 6 more.
    assert moved == PLACEMENT.provisioning_timeout_s / SAMPLE_INTERVAL_S + 1
    assert groups(samples[moved]) == {"spot": (0, 0, 0), "od": (2, 2, 0)}
    assert samples[moved].pools[0]["cause"] == "provisioning-timeout"


def test_a_reported_outage_moves_demand_at_the_next_sample_and_the_pool_comes_back(
    make_pooled: Any,
) -> None:
    # A minute without Spot capacity; the backlog doubles after the cooldown.
    backlog = [8] * 13 + [16]
    scaler = make_pooled(backlog, Outage("spot", 0.0, 60.0))
    samples = [scaler.step() for _ in range(len(backlog))]
    assert groups(samples[1]) == {"spot": (0, 0, 0), "od": (2, 2, 0)}
    assert samples[1].pools[0]["cause"] == "placement-failure"
    # The cooldown (12 samples from the failure at the first) is over at the 13th: the
    # outage ended long before, so the growth goes to Spot again and its workers start;
    # On-Demand keeps the workers it has.
    assert samples[12].pools[0]["change"] == "available"
    assert groups(samples[13]) == {"spot": (2, 2, 0), "od": (2, 2, 0)}


def test_tts_fleet_local_falls_back_to_the_next_pool_during_an_outage(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.pools.yaml").write_text(
        "config:\n"
        "  tts-fleet:scaling:\n    maxWorkers: 2\n    jobsPerWorker: 2\n"
        "  tts-fleet:gpu:\n    pools:\n"
        "      - {name: spot, capacityType: spot}\n"
        "      - {name: od, capacityType: on-demand}\n"
    )
    run = Run(
        tmp_path,
        "--demo", "4", "--stack", "pools", "--project-dir", str(tmp_path), "--tick", "0.1",
        "--backend", "tone", "--capacity-outage", "spot:0:1",
    )  # fmt: skip
    code, _, stderr = run.finish(RUN_TIMEOUT)
    assert code == 0, stderr
    events = run.events()
    kinds = [(e["event"], e.get("pool")) for e in events if e["event"].startswith("pool_")]
    assert kinds[0] == ("pool_unavailable", "spot")
    refused = {e["worker"] for e in events if e["event"] == "worker_refused"}
    started = [e["worker"] for e in events if e["event"] == "worker_started"]
    assert refused and all(worker.startswith("spot-") for worker in refused)
    assert started and all(worker.startswith("od-") for worker in started)
    [finished] = [e for e in events if e["event"] == "finished"]
    assert (finished["completed"], finished["submitted"]) == (4, 4)
