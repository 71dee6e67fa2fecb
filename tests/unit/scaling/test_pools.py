"""tts_fleet/scaling/pools.py: placing the policy's total across capacity pools (issue #22)."""

from __future__ import annotations

import json

import pytest

from tts_fleet.scaling.controller import ControllerParams, ControllerState, InvalidState
from tts_fleet.scaling.policy import ControllerPolicy, Counts, Fleet
from tts_fleet.scaling.pools import (
    INTERRUPTIONS,
    MAX_INTERRUPTIONS_KEPT,
    MAX_POOLS,
    PLACEMENT_FAILURE,
    PROVISIONING_TIMEOUT,
    PlacementParams,
    PoolEvent,
    PoolObservation,
    PoolSpec,
    PoolState,
    fill_order,
    launches_after,
    place,
    unseen,
)

PARAMS = PlacementParams(provisioning_timeout_s=300.0, cooldown_s=600.0)
SPOT = PoolSpec("spot", "spot", "", 0, 20, 0.45)
OD = PoolSpec("od", "on-demand", "", 0, 20, 1.04)
RESERVED = PoolSpec("res", "reserved", "", 0, 2, 1.04)
POOLS = (OD, SPOT)  # listed expensive first: the order placement uses is by price


def seen(
    name: str,
    desired: int = 0,
    running: int = 0,
    pending: int = 0,
    *,
    oldest: float = 0.0,
    failure: float | None = None,
    interruptions: tuple[float, ...] = (),
) -> PoolObservation:
    return PoolObservation(name, desired, running, pending, oldest, failure, interruptions)


def by_name(*observations: PoolObservation) -> dict[str, PoolObservation]:
    return {o.name: o for o in observations}


def test_fill_order_is_reserved_then_cheapest_first_stable_on_ties() -> None:
    twin = PoolSpec("spot-b", "spot", "", 0, 5, 0.45)
    assert fill_order((OD, SPOT, twin, RESERVED)) == (RESERVED, SPOT, twin, OD)


def test_growth_goes_to_the_cheapest_available_pool_up_to_its_max() -> None:
    placed = place(POOLS, PARAMS, (), {}, 25, now=0.0)
    assert placed.by_pool() == {"od": 5, "spot": 20}
    assert all(t.available for t in placed.targets)
    assert placed.events == ()


def test_reserved_pool_is_the_floor_before_the_cheaper_spot() -> None:
    placed = place((OD, SPOT, RESERVED), PARAMS, (), {}, 5, now=0.0)
    assert placed.by_pool() == {"od": 0, "spot": 3, "res": 2}


def test_placement_is_sticky_and_shrinks_the_dearest_pool_first() -> None:
    now_seen = by_name(seen("od", 4, 4), seen("spot", 3, 3))
    assert place(POOLS, PARAMS, (), now_seen, 9, now=0.0).by_pool() == {"od": 4, "spot": 5}
    assert place(POOLS, PARAMS, (), now_seen, 5, now=0.0).by_pool() == {"od": 2, "spot": 3}
    assert place(POOLS, PARAMS, (), now_seen, 2, now=0.0).by_pool() == {"od": 0, "spot": 2}


def test_a_pools_own_min_workers_is_kept_while_available() -> None:
    warm = PoolSpec("od", "on-demand", "", 1, 20, 1.04)
    assert place((warm, SPOT), PARAMS, (), {}, 0, now=0.0).by_pool() == {"od": 1, "spot": 0}


def test_provisioning_past_the_timeout_moves_demand_to_the_next_pool() -> None:
    stuck = by_name(seen("spot", 6, 2, 4, oldest=301.0))
    placed = place(POOLS, PARAMS, (), stuck, 6, now=1000.0)
    # Cut to its running tasks; the 4 it could not start go On-Demand.
    assert placed.by_pool() == {"od": 4, "spot": 2}
    assert placed.events == (PoolEvent("spot", "unavailable", PROVISIONING_TIMEOUT),)
    spot = next(t for t in placed.targets if t.name == "spot")
    assert (spot.available, spot.cause) == (False, PROVISIONING_TIMEOUT)
    state = next(s for s in placed.states if s.name == "spot")
    assert state.unavailable_until == 1600.0


def test_provisioning_within_the_timeout_keeps_the_pool() -> None:
    waiting = by_name(seen("spot", 6, 2, 4, oldest=300.0))
    placed = place(POOLS, PARAMS, (), waiting, 6, now=1000.0)
    assert placed.by_pool() == {"od": 0, "spot": 6}
    assert placed.events == ()


def test_a_placement_failure_moves_demand_and_is_acted_on_once() -> None:
    failed = by_name(seen("spot", 3, 0, 3, failure=990.0))
    first = place(POOLS, PARAMS, (), failed, 3, now=1000.0)
    assert first.by_pool() == {"od": 3, "spot": 0}
    assert first.events == (PoolEvent("spot", "unavailable", PLACEMENT_FAILURE),)
    # The cooldown runs from the event; the same event seen again after it changes nothing.
    later = by_name(seen("spot", 0, 0, 0, failure=990.0), seen("od", 3, 3))
    back = place(POOLS, PARAMS, first.states, later, 5, now=1590.0)
    assert back.events == (PoolEvent("spot", "available"),)
    assert back.by_pool() == {"od": 3, "spot": 2}


def test_a_stale_placement_failure_in_a_fresh_state_is_ignored() -> None:
    old = by_name(seen("spot", 0, 0, 0, failure=100.0))
    assert place(POOLS, PARAMS, (), old, 2, now=1000.0).by_pool() == {"od": 0, "spot": 2}


def test_interruptions_past_the_rate_make_the_pool_unavailable_once() -> None:
    # Three interruptions within the hour of a 4-worker pool: past max(3, 0.5 × 4).
    times = (100.0, 200.0, 300.0)
    placed = place(POOLS, PARAMS, (), by_name(seen("spot", 4, 4, interruptions=times)), 6, 400.0)
    assert placed.events == (PoolEvent("spot", "unavailable", INTERRUPTIONS),)
    assert placed.by_pool() == {"od": 2, "spot": 4}
    # After the cooldown the same stopped tasks, still reported, do not count again.
    again = by_name(seen("spot", 4, 4, interruptions=times), seen("od", 2, 2))
    back = place(POOLS, PARAMS, placed.states, again, 6, now=1000.0)
    assert back.events == (PoolEvent("spot", "available"),)
    # Back: and with nothing launching, one worker starts moving from On-Demand to Spot.
    assert back.by_pool() == {"od": 2, "spot": 5}


def test_interruptions_below_the_rate_or_out_of_the_window_are_tolerated() -> None:
    big = by_name(seen("spot", 10, 10, interruptions=(100.0, 200.0, 300.0, 400.0)))
    assert place(POOLS, PARAMS, (), big, 10, now=500.0).events == ()
    old = by_name(seen("spot", 2, 2, interruptions=(10.0, 20.0, 30.0)))
    assert place(POOLS, PARAMS, (), old, 2, now=3700.0).events == ()


def test_a_pool_comes_back_after_its_cooldown_and_takes_growth_again() -> None:
    stuck = by_name(seen("spot", 4, 0, 4, oldest=400.0))
    down = place(POOLS, PARAMS, (), stuck, 4, now=0.0)
    assert down.by_pool() == {"od": 4, "spot": 0}
    during = by_name(seen("spot", 0), seen("od", 4, 4))
    held = place(POOLS, PARAMS, down.states, during, 6, now=599.0)
    assert held.by_pool() == {"od": 6, "spot": 0}
    assert held.events == ()
    after = by_name(seen("spot", 0), seen("od", 6, 6))
    back = place(POOLS, PARAMS, held.states, after, 8, now=600.0)
    assert back.events == (PoolEvent("spot", "available"),)
    assert back.by_pool() == {"od": 6, "spot": 2}


def test_with_every_pool_unavailable_demand_waits_in_fill_order() -> None:
    stuck = by_name(seen("spot", 2, 0, 2, oldest=400.0), seen("od", 2, 0, 2, oldest=400.0))
    placed = place(POOLS, PARAMS, (), stuck, 4, now=0.0)
    assert placed.by_pool() == {"od": 0, "spot": 4}
    assert not any(t.available for t in placed.targets)


def pooled_policy(state: ControllerState | None = None) -> ControllerPolicy:
    params = ControllerParams(
        min_workers=0,
        max_workers=40,
        jobs_per_worker=8,
        idle_minutes=5,
        cold_start_work=0.0,
        cold_start_s=600.0,
        seconds_per_job=2.0,
        concurrency=1,
        host_idle_s=200.0,
    )
    return ControllerPolicy(params, state, pools=POOLS, placement=PARAMS)


def test_the_controller_policy_places_its_total_and_keeps_the_pools_in_its_state() -> None:
    policy = pooled_policy()
    policy.observe(0.0, Counts(80, 0))
    stuck = (seen("spot", 10, 0, 10, oldest=400.0), seen("od", 0))
    decision = policy.decide(0.0, Fleet.of_pools(stuck))
    assert decision.desired == 10
    assert {t.name: t.desired for t in decision.pools} == {"od": 10, "spot": 0}
    assert decision.events == (PoolEvent("spot", "unavailable", PROVISIONING_TIMEOUT),)
    saved = json.loads(json.dumps(policy.state.to_json()))
    restored = ControllerState.from_json(saved, now=0.0)
    assert restored == policy.state
    assert restored.pools[1] == PoolState(
        "spot", unavailable_until=600.0, cause=PROVISIONING_TIMEOUT
    )


def test_a_stack_without_pools_writes_and_reads_the_state_it_always_did() -> None:
    state = ControllerState(updated=5.0, desired=2, reason="backlog")
    assert "pools" not in state.to_json()
    assert ControllerState.from_json(state.to_json(), now=5.0) == state


def test_pool_state_round_trips_every_field() -> None:
    pool = PoolState("spot", 900.0, INTERRUPTIONS, 100.0, 200.0, (150.0, 250.0), 1, 3, 1)
    state = ControllerState(updated=300.0, pools=(pool, PoolState("od")))
    assert ControllerState.from_json(json.loads(json.dumps(state.to_json())), now=300.0) == state


GOOD = {"name": "spot", "unavailable_until": 900.0, "cause": INTERRUPTIONS}


@pytest.mark.parametrize(
    ("pools", "problem"),
    [
        ({"spot": {}}, "pools: {'spot': {}} is not a list"),
        ([GOOD] * (MAX_POOLS + 1), f"more than {MAX_POOLS}"),
        ([GOOD, GOOD], "names repeat"),
        (["spot"], "pools[0]: 'spot' is not a JSON object"),
        ([{**GOOD, "extra": 1}], "pools[0]: unknown fields ['extra']"),
        ([{**GOOD, "name": ""}], "pools[0].name"),
        ([{**GOOD, "name": "a\nb"}], "pools[0].name"),
        ([{**GOOD, "cause": "bored"}], "pools[0].cause"),
        ([{**GOOD, "cause": ""}], "unavailable_until and cause go together"),
        ([{**GOOD, "unavailable_until": 1e12}], "pools[0].unavailable_until"),
        ([{**GOOD, "last_failure": 301.0}], "pools[0].last_failure"),
        ([{**GOOD, "counted_since": float("nan")}], "pools[0].counted_since"),
        ([{**GOOD, "interruptions": [True]}], "pools[0].interruptions[0]: True is not"),
        ([{**GOOD, "interruptions": "1"}], "is not a list"),
        ([{**GOOD, "interruptions": [1.0] * (MAX_INTERRUPTIONS_KEPT + 1)}], "entries, more"),
        ([{**GOOD, "swapping": 2}], "pools[0].swapping: 2 is not a whole number in [0, 1]"),
        ([{**GOOD, "swap_base": 0.5}], "pools[0].swap_base"),
        ([{**GOOD, "swap_base": "1"}], "pools[0].swap_base: '1' is not a number"),
        ([{**GOOD, "retiring": -1}], "pools[0].retiring"),
    ],
)
def test_a_bad_pool_state_is_rejected_naming_the_field(pools: object, problem: str) -> None:
    with pytest.raises(InvalidState, match=None) as raised:
        ControllerState.from_json({"updated": 300.0, "pools": pools}, now=300.0)
    assert problem in str(raised.value)


def test_shrinking_stops_a_launch_not_yet_serving_before_a_running_worker() -> None:
    # The dear pool's worker serves; the cheap pool's is still booting: the boot goes.
    booting = by_name(seen("od", 1, 1), seen("spot", 1, 0, 1))
    assert place(POOLS, PARAMS, (), booting, 1, now=0.0).by_pool() == {"od": 1, "spot": 0}


def test_launches_stopped_by_a_cut_are_forgotten_and_their_replacements_start_now() -> None:
    stuck = by_name(seen("spot", 3, 1, 2, oldest=400.0), seen("od", 1, 0, 1))
    placed = place(POOLS, PARAMS, (), stuck, 4, now=1000.0)
    assert placed.by_pool() == {"od": 3, "spot": 1}
    # Pending: spot's two (asked at 500 and 600, the oldest) and od's one (asked at 990).
    assert launches_after(placed, stuck, (500.0, 600.0, 990.0), 1000.0) == (
        990.0,
        1000.0,
        1000.0,
    )


def test_a_fleet_on_the_dearer_pool_moves_back_one_worker_at_a_time() -> None:
    on_od = by_name(seen("od", 2, 2), seen("spot", 0))
    first = place(POOLS, PARAMS, (), on_od, 2, now=0.0, ceiling=20)
    assert first.by_pool() == {"od": 2, "spot": 1}  # make before break
    # While the Spot launch boots: held, and no second swap.
    booting = by_name(seen("od", 2, 2), seen("spot", 1, 0, 1))
    held = place(POOLS, PARAMS, first.states, booting, 2, now=10.0, ceiling=20)
    assert held.by_pool() == {"od": 2, "spot": 1}
    # It serves: the policy's total leaves it out (`unseen`), so an On-Demand worker goes.
    serving = by_name(seen("od", 2, 2), seen("spot", 1, 1))
    done = place(POOLS, PARAMS, held.states, serving, 2, now=700.0, ceiling=20)
    assert done.by_pool() == {"od": 1, "spot": 1}
    assert [(s.name, s.swapping, s.retiring) for s in done.states] == [
        ("od", 0, 1),
        ("spot", 0, 0),
    ]


def test_a_swap_waits_for_room_under_the_ceiling_and_for_a_quiet_fleet() -> None:
    on_od = by_name(seen("od", 2, 2), seen("spot", 0))
    assert place(POOLS, PARAMS, (), on_od, 2, now=0.0, ceiling=2).by_pool() == {
        "od": 2,
        "spot": 0,
    }
    launching = by_name(seen("od", 3, 2, 1), seen("spot", 0))
    assert place(POOLS, PARAMS, (), launching, 3, now=0.0).by_pool() == {"od": 3, "spot": 0}


def test_a_swap_whose_pool_is_cut_ends_without_retiring_anything() -> None:
    on_od = by_name(seen("od", 2, 2), seen("spot", 0))
    first = place(POOLS, PARAMS, (), on_od, 2, now=0.0)
    stuck = by_name(seen("od", 2, 2), seen("spot", 1, 0, 1, oldest=301.0))
    cut = place(POOLS, PARAMS, first.states, stuck, 3, now=320.0)
    assert cut.by_pool() == {"od": 3, "spot": 0}
    assert all(state.swapping == 0 for state in cut.states)


def test_the_policy_does_not_count_a_swap_launch_or_a_retired_worker_still_busy() -> None:
    states = (PoolState("spot", swapping=1, swap_base=0), PoolState("od", retiring=1))
    observed = by_name(seen("spot", 1, 0, 1), seen("od", 1, 2))
    assert unseen(states, observed) == (1, 1)
    # The launch serves: still left out, once (the placement then retires a dearer worker).
    assert unseen(states, by_name(seen("spot", 1, 1), seen("od", 1, 1))) == (1, 0)
    settled = (PoolState("spot"), PoolState("od"))
    assert unseen(settled, by_name(seen("spot", 1, 1), seen("od", 1, 2))) == (0, 0)


def test_a_retired_worker_blocks_the_next_swap_until_it_stops() -> None:
    on_od = by_name(seen("od", 2, 2), seen("spot", 0))
    first = place(POOLS, PARAMS, (), on_od, 2, now=0.0)
    serving = by_name(seen("od", 2, 2), seen("spot", 1, 1))
    done = place(POOLS, PARAMS, first.states, serving, 2, now=700.0)
    assert done.by_pool() == {"od": 1, "spot": 1}
    still_busy = by_name(seen("od", 1, 2), seen("spot", 1, 1))
    held = place(POOLS, PARAMS, done.states, still_busy, 2, now=710.0)
    assert held.by_pool() == {"od": 1, "spot": 1}  # no second swap while od's worker finishes
    stopped = by_name(seen("od", 1, 1), seen("spot", 1, 1))
    again = place(POOLS, PARAMS, held.states, stopped, 2, now=720.0)
    assert again.by_pool() == {"od": 1, "spot": 2}  # the next worker starts moving


def test_pools_without_their_placement_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="PlacementParams"):
        ControllerPolicy(pooled_policy().params, pools=POOLS)


def test_a_policy_without_pools_decides_as_before_and_carries_no_pools() -> None:
    plain = ControllerPolicy(pooled_policy().params)
    plain.observe(0.0, Counts(80, 0))
    decision = plain.decide(0.0, Fleet(0, 0))
    assert decision.desired > 0 and decision.pools == () and decision.events == ()
    assert "pools" not in plain.state.to_json()
