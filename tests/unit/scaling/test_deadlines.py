"""The deadline planner (issue #23): meets every deadline with the fewest workers, says when
it cannot, keeps new workers off Spot once a lost one would miss, and leaves the controller
alone without batches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tts_fleet.scaling.batches import OpenBatch
from tts_fleet.scaling.controller import (
    ControllerParams,
    ControllerState,
    InvalidState,
    Observation,
    decide,
)
from tts_fleet.scaling.deadlines import (
    MIN_MARGIN_S,
    FleetNow,
    Pricing,
    finish_time,
    margin_s,
    plan,
    remaining,
)
from tts_fleet.scaling.policy import ControllerPolicy, Counts, Fleet
from tts_fleet.scaling.pools import PlacementParams, PoolObservation, PoolSpec

COLD = 630.0  # the seed profile's mean cold start
PER_JOB = 2.0  # the seed profile's seconds per job at concurrency 1


def fleet(running: int = 0, launches: tuple[float, ...] = (), max_workers: int = 20) -> FleetNow:
    return FleetNow(
        now=0.0,
        running=running,
        launches=launches,
        cold_start_s=COLD,
        seconds_per_job=PER_JOB,
        concurrency=1,
        max_workers=max_workers,
    )


def batch(jobs: int, minutes: float, name: str = "b", submitted: float = 0.0) -> OpenBatch:
    return OpenBatch(name, submitted, submitted + minutes * 60.0, jobs)


def test_one_worker_when_its_cold_start_and_the_whole_batch_fit() -> None:
    # 630 s + 500 × 2 s + one last round of 2 s = 1,632 s, inside 30 min less the 90-s margin.
    result = plan((batch(500, 30),), 500, fleet())
    assert result is not None
    assert result.workers == 1
    assert not result.at_risk
    (forecast,) = result.forecasts
    assert forecast.predicted_finish == pytest.approx(COLD + 500 * PER_JOB + PER_JOB)
    assert forecast.predicted_finish <= forecast.deadline - margin_s(batch(500, 30))


def test_the_fewest_workers_that_fit_and_no_fewer() -> None:
    # 1,000 jobs in 30 min: one worker needs 630 + 2,000 s (too late), two 630 + 1,000 s.
    result = plan((batch(1000, 30),), 1000, fleet())
    assert result is not None and result.workers == 2
    one = finish_time([COLD], 1000, PER_JOB)
    assert one > 30 * 60  # one worker would miss: two is the cheapest plan


def test_earliest_deadline_first_counts_the_earlier_batchs_work_too() -> None:
    # Alone, the late batch needs 1 worker; behind the early one's 900 jobs it needs more.
    early, late = batch(900, 40, "early"), batch(300, 60, "late")
    alone = plan((late,), 300, fleet())
    both = plan((early, late), 1200, fleet())
    assert alone is not None and both is not None
    assert alone.workers == 1
    assert both.workers == 2
    assert [f.batch_id for f in both.forecasts] == ["early", "late"]
    assert all(f.predicted_finish <= f.deadline for f in both.forecasts)


def test_running_workers_serve_from_now_and_launches_after_their_cold_start() -> None:
    # 1,000 jobs in 30 min: one running worker does 900 s of them before a new one arrives,
    # so one running worker plus nothing new is 2,000 s (too late) but + one new one fits.
    result = plan((batch(1000, 30),), 1000, fleet(running=1))
    assert result is not None and result.workers == 2
    # A launch asked 600 s ago serves in 30 s: with it, the same work needs no new worker.
    launched = plan((batch(1000, 30),), 1000, fleet(launches=(-600.0, -600.0)))
    assert launched is not None and launched.workers == 2
    assert launched.forecasts[0].predicted_finish == pytest.approx(30 + 1000 + PER_JOB)


def test_a_launch_under_way_is_never_cancelled_for_a_deadline() -> None:
    result = plan((batch(10, 60),), 10, fleet(launches=(0.0, 0.0, 0.0)))
    assert result is not None and result.workers == 3


def test_at_risk_when_even_max_workers_miss_with_the_finish_they_reach() -> None:
    # 10,000 jobs in 15 min: 20 workers finish at 630 + 1,000 + 2 s, past 900 s.
    result = plan((batch(10_000, 15),), 10_000, fleet())
    assert result is not None
    assert result.at_risk and result.reason == "deadline-at-risk"
    assert result.workers == 20
    (forecast,) = result.forecasts
    assert forecast.at_risk
    assert forecast.predicted_finish == pytest.approx(COLD + 10_000 * PER_JOB / 20 + PER_JOB)


def test_a_met_batch_beside_one_at_risk_is_not_at_risk() -> None:
    result = plan((batch(10, 5, "late"), batch(10, 120, "easy")), 20, fleet())
    assert result is not None
    by_id = {f.batch_id: f for f in result.forecasts}
    assert by_id["late"].at_risk and not by_id["easy"].at_risk


def test_the_queue_holds_the_newest_batches_jobs_first() -> None:
    old, new = batch(100, 60, "old", 0.0), batch(50, 60, "new", 10.0)
    assert remaining((old, new), 80) == {"new": 50, "old": 30}
    assert remaining((old, new), 0) == {"new": 0, "old": 0}
    assert remaining((replace(old, done=90), new), 1000) == {"new": 50, "old": 10}
    assert plan((old, new), 0, fleet()) is None  # nothing of theirs left: no plan


def test_the_margin_is_a_twentieth_of_the_window_at_least_a_minute() -> None:
    assert margin_s(batch(1, 30)) == 90.0
    assert margin_s(batch(1, 10)) == MIN_MARGIN_S


SPOT_AND_OD = Pricing(spot_usd_per_hour=0.44, on_demand_usd_per_hour=0.87)


def test_spot_while_the_deadline_survives_a_lost_worker() -> None:
    # 500 jobs in 2 h: losing a worker (a cold start and its job again) still fits.
    result = plan((batch(500, 120),), 500, fleet(), SPOT_AND_OD)
    assert result is not None and result.spot
    assert result.workers == 1


def test_spot_plans_a_worker_to_spare_when_that_is_cheaper() -> None:
    # 1,000 jobs in 30 min: two workers meet it, but losing one of them would not; three
    # on Spot survive a loss and cost less than two On-Demand.
    result = plan((batch(1000, 30),), 1000, fleet(), SPOT_AND_OD)
    assert result is not None and result.spot
    assert result.workers == 3


def test_on_demand_once_the_slack_cannot_cover_a_lost_spot_worker() -> None:
    # Ten minutes in, two workers (all the stack allows) and 900 jobs left: they finish at
    # 1,502 s, inside the 1,710 s due time, but losing one (its replacement serves 630 s
    # later) would take them to 1,817 s: new workers go On-Demand.
    late = FleetNow(
        now=600.0, running=2, launches=(), cold_start_s=COLD, seconds_per_job=PER_JOB,
        concurrency=1, max_workers=2,
    )  # fmt: skip
    result = plan((batch(1000, 30),), 900, late, SPOT_AND_OD)
    assert result is not None
    assert not result.at_risk
    assert not result.spot
    assert result.workers == 2


def test_spot_only_stacks_stay_on_spot() -> None:
    only_spot = Pricing(spot_usd_per_hour=0.44, on_demand_usd_per_hour=None)
    result = plan((batch(1000, 30),), 1000, fleet(), only_spot)
    assert result is not None and result.spot and result.workers == 2


PARAMS = ControllerParams(
    min_workers=0,
    max_workers=20,
    jobs_per_worker=8,
    idle_minutes=5,
    cold_start_work=0.12,
    cold_start_s=COLD,
    seconds_per_job=PER_JOB,
    concurrency=1,
    host_idle_s=200.0,
)


def test_the_controller_sizes_a_deadline_batch_by_the_plan_not_the_race() -> None:
    obs = Observation(0.0, 500, 0, 0, 0)
    racing = decide(PARAMS, ControllerState(), obs)
    planned = decide(PARAMS, ControllerState(), replace(obs, batches=(batch(500, 30),)))
    assert racing.desired > 1  # today's policy races the burst
    assert planned.desired == 1 and planned.reason == "deadline"
    assert planned.state.launches == (0.0,)
    assert [f.batch_id for f in planned.forecasts] == ["b"]


def test_other_jobs_in_the_queue_keep_the_existing_policy_as_the_floor() -> None:
    obs = Observation(0.0, 600, 0, 0, 0, batches=(batch(100, 120),))
    racing = decide(PARAMS, ControllerState(), replace(obs, batches=()))
    mixed = decide(PARAMS, ControllerState(), obs)
    assert mixed.desired == racing.desired and mixed.reason == racing.reason


def test_a_measured_seconds_per_job_replaces_the_profiles() -> None:
    slow = Observation(0.0, 500, 0, 0, 0, batches=(batch(500, 30),), seconds_per_job=4.0)
    assert decide(PARAMS, ControllerState(), slow).desired == 2


def test_without_batches_the_controller_decides_exactly_as_before() -> None:
    """A run with batches that have nothing left in the queue (every job of theirs done)
    decides, sample by sample, what a run without them decides."""
    finished = (replace(batch(10, 30), done=10),)
    plain, with_done = ControllerPolicy(PARAMS), ControllerPolicy(PARAMS)
    queue = [0, 40, 40, 30, 10, 0, 0, 0, 5, 0]
    for step, waiting in enumerate(queue):
        now = step * 10.0
        plain.observe(now, Counts(waiting, 0))
        with_done.observe(now, Counts(waiting, 0, finished))
        fleet_now = Fleet(running=min(step, 2), pending=0)
        a, b = plain.decide(now, fleet_now), with_done.decide(now, fleet_now)
        assert (a.desired, a.reason) == (b.desired, b.reason)
        assert a.forecasts == ()
        assert b.forecasts[0].at_risk is False
    assert plain.state == with_done.state


def pools_policy(max_workers: int = 20) -> ControllerPolicy:
    pools = (
        PoolSpec("spot", "spot", "", 0, max_workers, 0.44),
        PoolSpec("od", "on-demand", "", 0, max_workers, 0.87),
    )
    params = replace(PARAMS, max_workers=max_workers)
    return ControllerPolicy(params, pools=pools, placement=PlacementParams(300.0, 600.0))


def test_placement_puts_new_workers_on_spot_while_the_deadline_survives_a_loss() -> None:
    policy = pools_policy()
    policy.observe(0.0, Counts(500, 0, (batch(500, 120),)))
    decision = policy.decide(0.0, Fleet.of_pools(()))
    assert {t.name: t.desired for t in decision.pools} == {"spot": 1, "od": 0}


def test_placement_switches_new_workers_to_on_demand_when_a_loss_would_miss() -> None:
    # 15 min in, 900 jobs left, two Spot workers running, at most 4 workers: two new ones
    # meet the deadline, but no 4 survive losing one, so Spot keeps its two and the two new
    # workers go On-Demand.
    policy = pools_policy(max_workers=4)
    seen = (PoolObservation("spot", 2, 2, 0), PoolObservation("od", 0, 0, 0))
    work = batch(1000, 30)
    policy.observe(900.0, Counts(900, 0, (replace(work, done=100),)))
    decision = policy.decide(900.0, Fleet.of_pools(seen))
    assert decision.reason == "deadline"
    assert {t.name: t.desired for t in decision.pools} == {"spot": 2, "od": 2}


def test_no_swap_to_a_cheaper_pool_while_a_deadline_plan_runs() -> None:
    # After a fallback two workers run On-Demand and Spot has room: without batches the
    # placement swaps one worker to Spot (one extra launch); with a deadline it does not.
    seen = (PoolObservation("spot", 0, 0, 0), PoolObservation("od", 2, 2, 0))
    plain, planned = pools_policy(), pools_policy()
    plain.observe(0.0, Counts(50, 0))
    planned.observe(0.0, Counts(50, 0, (batch(50, 120),)))
    swapped = {t.name: t.desired for t in plain.decide(0.0, Fleet.of_pools(seen)).pools}
    kept = {t.name: t.desired for t in planned.decide(0.0, Fleet.of_pools(seen)).pools}
    assert swapped == {"spot": 1, "od": 2}
    assert kept == {"spot": 0, "od": 2}


def test_the_measured_drain_rate_replaces_the_profiles_once_it_has_five_samples() -> None:
    """Two workers draining 10 jobs per 10-s sample take 2 × 10 / 10 = 2 s per job, twice
    the configured 1 s: from the fifth such sample the plan uses 2 s and asks for more."""
    params = replace(PARAMS, seconds_per_job=1.0)
    work = batch(6000, 60)
    state = ControllerState()
    desired = []
    for step in range(8):
        left = 5000 - 10 * step
        obs = Observation(
            10.0 * step, left - 2, 2, 2, 0, batches=(replace(work, done=6000 - left),)
        )
        decision = decide(params, state, obs)
        state = decision.state
        desired.append(decision.desired)
    assert state.served == (2.0,) * 7
    # 3,000 jobs at 1 s: two running workers (3,000 s ≤ 3,420 s) do; at 2 s they need help.
    assert desired[:5] == [2] * 5
    assert desired[5] > 2
    assert ControllerState.from_json(state.to_json()) == state


def test_a_state_without_measurements_writes_no_served_key_and_bad_ones_are_refused() -> None:
    assert "served" not in ControllerState().to_json()
    with pytest.raises(InvalidState, match="served"):
        ControllerState.from_json({"served": [0.0]})
    with pytest.raises(InvalidState, match="served"):
        ControllerState.from_json({"served": [1.0] * 31})
