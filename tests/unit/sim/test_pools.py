"""The simulator with capacity pools (issue #22): placement, interruptions, outages, costs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.physics import SEED_PROFILE
from tts_fleet.scaling.pools import PlacementParams, PoolSpec
from tts_fleet.sim.capacity import (
    NOTICE_S,
    Capacity,
    CapacityError,
    Outage,
    parse_interruptions,
    parse_outage,
    parse_pool,
)
from tts_fleet.sim.engine import Simulation, simulate
from tts_fleet.sim.model import PolicySetup, peer_policy, stack_policy
from tts_fleet.sim.report import CostRates
from tts_fleet.sim.text import simulation_table
from tts_fleet.sim.traces import Trace, parse_trace

RATES = CostRates(gpu_hourly_usd=1.0, floor_monthly_usd=0.0)
SPOT = PoolSpec("spot", "spot", "", 0, 20, 0.5)
OD = PoolSpec("od", "on-demand", "", 0, 20, 1.0)
PLACEMENT = PlacementParams(provisioning_timeout_s=300.0, cooldown_s=600.0)


def pooled(*pools: PoolSpec, max_workers: int = 20) -> PolicySetup:
    base = stack_policy(ScalingConfig(max_workers=max_workers), concurrency=1)
    return replace(base, pools=pools, placement=PLACEMENT)


def one_job_an_hour(hours: int = 4) -> Trace:
    return Trace("hourly", tuple(3600.0 * h + 1.0 for h in range(hours)), hours * 3600.0)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("spot:0.05", ("spot", 0.05)),
        ("spot-a:1", ("spot-a", 1.0)),
    ],
)
def test_interruptions_flag(text: str, parsed: tuple[str, float]) -> None:
    assert parse_interruptions(text) == parsed


@pytest.mark.parametrize("text", ["spot", "spot:x", "spot:1.5", "Spot:0.1", ":0.1"])
def test_bad_interruptions_flag_is_one_line(text: str) -> None:
    with pytest.raises(CapacityError, match="--interruptions"):
        parse_interruptions(text)


def test_outage_flag_in_hours_with_an_optional_silent() -> None:
    assert parse_outage("spot:2:1.5") == Outage("spot", 7200.0, 5400.0, silent=False)
    assert parse_outage("spot:0:2:silent") == Outage("spot", 0.0, 7200.0, silent=True)
    for bad in ("spot:2", "spot:2:0", "spot:2:1:quiet", "spot:-1:2"):
        with pytest.raises(CapacityError, match="--capacity-outage"):
            parse_outage(bad)


def test_pool_flag_is_a_raw_gpu_pools_entry() -> None:
    assert parse_pool("spot:spot") == {"name": "spot", "capacityType": "spot"}
    assert parse_pool("od:on-demand:8") == {
        "name": "od",
        "capacityType": "on-demand",
        "maxWorkers": 8,
    }
    with pytest.raises(CapacityError, match="stack file"):
        parse_pool("res:reserved")


def test_capacity_returns_when_chained_outages_end_and_checks_pool_names() -> None:
    capacity = Capacity(outages=(Outage("spot", 100.0, 100.0), Outage("spot", 150.0, 100.0)))
    assert capacity.capacity_from("spot", 120.0) == 250.0
    assert capacity.capacity_from("spot", 90.0) == 90.0
    assert capacity.capacity_from("od", 120.0) == 120.0
    with pytest.raises(CapacityError, match="no pool named spot"):
        capacity.check({"od"})


def test_growth_goes_to_the_cheapest_pool_and_each_pool_is_billed_at_its_price() -> None:
    result = simulate(one_job_an_hour(), SEED_PROFILE, pooled(OD, SPOT), RATES).summary
    usage = {pool.name: pool for pool in result.pools}
    assert usage["od"].gpu_hours == 0.0
    assert usage["spot"].gpu_hours > 0
    assert usage["spot"].usd == round(usage["spot"].gpu_hours * SPOT.usd_per_hour, 2)
    assert result.cost.gpu_usd == usage["spot"].usd
    assert result.latency.max is not None and result.latency.max < 15 * 60


def test_an_outage_with_placement_failures_moves_demand_at_the_first_failed_attempt() -> None:
    capacity = Capacity(outages=(Outage("spot", 0.0, 7200.0),))
    result = simulate(one_job_an_hour(), SEED_PROFILE, pooled(SPOT, OD), RATES, 0, capacity)
    summary = result.summary
    outage = summary.outages[0]
    assert outage.first_stuck_s is not None and outage.fallback_s is not None
    # Placed after task_placement_s, reported failed then, seen by the next 10-s sample.
    assert outage.fallback_s <= SEED_PROFILE.task_placement_s + 10.0
    usage = {pool.name: pool for pool in summary.pools}
    assert usage["spot"].fallbacks >= 1 and usage["od"].gpu_hours > 0
    assert all(not math.isnan(latency) for latency in result.latencies)


def test_a_silent_outage_is_found_by_the_provisioning_timeout() -> None:
    capacity = Capacity(outages=(Outage("spot", 0.0, 7200.0, silent=True),))
    summary = simulate(
        one_job_an_hour(), SEED_PROFILE, pooled(SPOT, OD), RATES, 0, capacity
    ).summary
    fallback = summary.outages[0].fallback_s
    assert fallback is not None
    assert PLACEMENT.provisioning_timeout_s < fallback <= PLACEMENT.provisioning_timeout_s + 60


def test_a_spot_only_fleet_waits_out_the_outage_and_still_finishes() -> None:
    capacity = Capacity(outages=(Outage("spot", 0.0, 3600.0, silent=True),))
    result = simulate(one_job_an_hour(2), SEED_PROFILE, pooled(SPOT), RATES, 0, capacity)
    first = result.latencies[0]
    assert first >= 3600.0 - 1.0  # nothing could start before capacity came back
    assert all(not math.isnan(latency) for latency in result.latencies)
    assert result.summary.outages[0].fallback_s is None  # nowhere to fall back to


def test_requests_that_waited_for_capacity_and_were_cut_bill_nothing() -> None:
    whole_run = Capacity(outages=(Outage("spot", 0.0, 10 * 3600.0, silent=True),))
    summary = simulate(
        one_job_an_hour(), SEED_PROFILE, pooled(SPOT, OD), RATES, 0, whole_run
    ).summary
    usage = {pool.name: pool for pool in summary.pools}
    assert usage["spot"].fallbacks >= 1  # Spot was asked, and gave nothing
    assert (usage["spot"].gpu_hours, usage["spot"].usd) == (0.0, 0.0)
    assert summary.cost.gpu_usd == usage["od"].usd


def test_an_interrupted_host_is_billed_to_the_end_of_its_notice_and_replaced() -> None:
    trace = parse_trace("poisson:20:2", 3)
    capacity = Capacity(interruptions=(("spot", 1.0),))
    sim = Simulation(trace, SEED_PROFILE, pooled(SPOT, OD), 3, capacity)
    finish, _, fleet, _ = sim.run()
    times = fleet.interruptions["spot"]
    assert times, "one interruption per host-hour over hours of Spot hosts"
    interrupted = [h for h in fleet.hosts if h.gone is not None and h.gone - NOTICE_S in times]
    assert len(interrupted) == len(times)
    assert len([h for h in fleet.hosts if h.pool == "spot"]) > len(times)  # replacements
    assert all(not math.isnan(f) for f in finish) and not fleet.draining


def test_interruptions_are_their_own_random_stream() -> None:
    """Host provisioning draws what it drew without interruptions: a run with them differs
    by the interruptions, not by a reshuffled jitter."""
    trace = parse_trace("poisson:20:2", 1)
    calm = Simulation(trace, SEED_PROFILE, pooled(SPOT), 1)
    calm.run()
    stormy = Simulation(trace, SEED_PROFILE, pooled(SPOT), 1, Capacity((("spot", 1.0),)))
    stormy.run()
    first = min(stormy.fleet.interruptions["spot"])
    before = [h for h in stormy.fleet.hosts if h.launched < first]
    assert before
    for host in before:
        twin = calm.fleet.hosts[host.index]
        assert (host.launched, host.provisioned_at) == (twin.launched, twin.provisioned_at)


def test_a_reserved_pool_bills_its_reservation_whether_used_or_not() -> None:
    reserved = PoolSpec("res", "reserved", "", 0, 2, 1.0)
    summary = simulate(one_job_an_hour(), SEED_PROFILE, pooled(reserved, SPOT), RATES).summary
    usage = {pool.name: pool for pool in summary.pools}
    assert usage["res"].gpu_hours > 0 and usage["spot"].gpu_hours == 0.0  # the floor first
    assert usage["res"].usd == round(2 * summary.period_s / 3600.0 * 1.0, 2)


def test_without_pools_the_document_and_the_table_are_what_they_were() -> None:
    trace = parse_trace("poisson:10:1", 0)
    plain = stack_policy(ScalingConfig(max_workers=4), concurrency=1)
    summary = simulate(trace, SEED_PROFILE, plain, RATES).summary
    assert "pools" not in summary.to_json() and "outages" not in summary.to_json()
    assert "pool " not in simulation_table([summary])
    with_pools = simulate(trace, SEED_PROFILE, pooled(SPOT, OD, max_workers=4), RATES).summary
    data = with_pools.to_json()
    assert set(data["pools"]) == {"spot", "od"}
    assert set(data["pools"]["spot"]) == {"gpu_hours", "usd", "interruptions", "fallbacks"}
    assert "pool spot: GPU-h, cost" in simulation_table([with_pools])


def test_pools_need_the_controller_and_peers_run_without_them() -> None:
    alarms = replace(pooled(SPOT, OD), mode="alarms")
    with pytest.raises(ValueError, match="controller"):
        Simulation(one_job_an_hour(), SEED_PROFILE, alarms)
    assert peer_policy("keda", pooled(SPOT, OD)).pools == ()


def test_requests_cut_in_an_outage_are_no_hosts_launched() -> None:
    whole_run = Capacity(outages=(Outage("spot", 0.0, 10 * 3600.0),))
    sim = Simulation(one_job_an_hour(), SEED_PROFILE, pooled(SPOT, OD), 0, whole_run)
    _, _, fleet, _ = sim.run()
    summary = simulate(
        one_job_an_hour(), SEED_PROFILE, pooled(SPOT, OD), RATES, 0, whole_run
    ).summary
    assert any(h.pool == "spot" for h in fleet.hosts)  # asked for, never launched
    assert summary.hosts_launched == len([h for h in fleet.hosts if h.pool == "od"])
