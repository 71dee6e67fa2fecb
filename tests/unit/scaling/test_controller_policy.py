"""tts_fleet/scaling/controller.py: the controller policy the Lambda, the local fleet and the
simulator all call (issue #13)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.controller import (
    CLOCK_SKEW_S,
    MAX_RATE,
    MAX_TASKS,
    ControllerDecision,
    ControllerParams,
    ControllerState,
    InvalidState,
    Observation,
    decide,
)

PARAMS = ControllerParams(
    min_workers=0,
    max_workers=20,
    jobs_per_worker=8,
    idle_minutes=5,
    cold_start_work=0.5,
    cold_start_s=630.0,
    seconds_per_job=2.0,
    concurrency=1,
    host_idle_s=200.0,
)


def obs(
    now: float, visible: int = 0, in_flight: int = 0, running: int = 0, pending: int = 0
) -> Observation:
    return Observation(now, visible, in_flight, running, pending)


def run(params: ControllerParams, observations: list[Observation]) -> list[ControllerDecision]:
    state = ControllerState()
    decisions: list[ControllerDecision] = []
    for o in observations:
        decision = decide(params, state, o)
        state = decision.state
        decisions.append(decision)
    return decisions


def test_from_config_reads_the_stack_keys() -> None:
    scaling = ScalingConfig(max_workers=7, jobs_per_worker=3, idle_minutes=9, cold_start_work=2)
    params = ControllerParams.from_config(
        scaling,
        cold_start_s=600,
        seconds_per_job=2.5,
        concurrency=2,
        cold_start_work=scaling.cold_start_work,
        host_idle_seconds=-1,
    )
    assert (params.max_workers, params.jobs_per_worker, params.idle_minutes) == (7, 3, 9)
    assert (params.cold_start_work, params.concurrency) == (2.0, 2)
    assert (params.cold_start_s, params.seconds_per_job) == (600, 2.5)
    assert params.host_idle_s == 0.0  # -1 keeps hosts forever: no released host is counted on


def test_fresh_state_from_empty_json() -> None:
    assert ControllerState.from_json({}) == ControllerState()


def test_a_stored_state_takes_integral_floats_as_counts() -> None:
    state = ControllerState.from_json({"visible": 3.0, "floor": 2, "rates": [1, 0.5]})
    assert (state.visible, state.floor, state.rates) == (3, 2, (1.0, 0.5))
    assert isinstance(state.visible, int)


def test_a_stored_timestamp_may_lead_the_readers_clock_by_the_skew_only() -> None:
    ahead = {"updated": 100.0 + CLOCK_SKEW_S}
    assert ControllerState.from_json(ahead, now=100.0).updated == 100.0 + CLOCK_SKEW_S
    with pytest.raises(InvalidState, match="updated"):
        ControllerState.from_json({"updated": 100.1 + CLOCK_SKEW_S}, now=100.0)


@pytest.mark.parametrize(
    "data,named",
    [
        ({"rates": [MAX_RATE * 2]}, "rates[0]"),
        ({"launches": [0.0] * (MAX_TASKS + 1)}, "launches"),
        ({"running": MAX_TASKS + 1}, "running"),
        ({"gaps": [float("nan")]}, "gaps[0]"),
        ({"reason": "two\nlines"}, "reason"),
    ],
)
def test_a_stored_state_past_a_bound_is_refused_naming_the_field(
    data: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidState) as refused:
        ControllerState.from_json(data)
    assert str(refused.value).startswith(f"{named}:")


def test_state_round_trips_through_json_text() -> None:
    decisions = run(
        PARAMS,
        [
            obs(0, visible=40),
            obs(10, visible=30, in_flight=1, running=1),
            obs(20),
            obs(30, visible=1),
        ],
    )
    state = decisions[-1].state
    text = json.dumps(state.to_json())
    assert ControllerState.from_json(json.loads(text)) == state


def test_a_job_into_an_idle_fleet_starts_a_worker_at_once() -> None:
    decision = decide(PARAMS, ControllerState(), obs(0, visible=1))
    assert decision.desired == 1


def test_never_cancels_a_launch_while_work_waits() -> None:
    decision = decide(PARAMS, ControllerState(), obs(0, visible=1, pending=5))
    assert decision.desired >= 5


def short_gaps_state() -> ControllerState:
    """A state that has seen work come back after three 2-minute lulls (no rate estimate:
    the samples are too far apart to tell arrivals from completions)."""
    samples = []
    for start in (0, 200, 400):
        samples += [obs(start, visible=1, running=1), obs(start + 10, running=1)]
        samples.append(obs(start + 130, visible=1, running=1))
    return run(PARAMS, samples)[-1].state


def test_empty_queue_keeps_one_warm_worker_and_releases_the_rest() -> None:
    decision = decide(PARAMS, short_gaps_state(), obs(540, running=12))
    assert decision.desired == 1
    assert decision.reason == "warm-one"


def test_the_warm_worker_goes_after_idle_minutes() -> None:
    state = short_gaps_state()
    decisions = []
    for t in range(540, 540 + PARAMS.idle_minutes * 60 + 11, 10):
        decision = decide(PARAMS, state, obs(t, running=1))
        state = decision.state
        decisions.append(decision)
    assert decisions[0].desired == 1
    assert decisions[-1].desired == 0 and decisions[-1].reason == "idle-release"


def test_long_gaps_release_at_once() -> None:
    """Work came back only after hours: a warm worker would have idled for nothing."""
    samples = []
    for start in (0, 4 * 3600, 8 * 3600):
        samples += [obs(start, visible=1, running=1), obs(start + 10, running=1)]
    samples.append(obs(12 * 3600, visible=1, running=1))
    state = run(PARAMS, samples)[-1].state
    assert decide(PARAMS, state, obs(12 * 3600 + 10, running=1)).desired == 0


def test_with_no_gap_seen_the_last_worker_goes_at_once() -> None:
    """No history: its host lingers hostIdleSeconds, so a short gap still restarts warm."""
    assert decide(PARAMS, ControllerState(), obs(0, running=12)).desired == 0


def test_kappa_limits_cold_gpus_for_a_small_backlog() -> None:
    """100 jobs × 2 s is 200 GPU-seconds: κ 0.5 of a 630-s cold start is 315 s, so one
    worker; κ 0.12 (76 s) is worth two more."""
    strict = ControllerParams(**{**PARAMS.__dict__, "cold_start_work": 0.5})
    loose = ControllerParams(**{**PARAMS.__dict__, "cold_start_work": 0.12})
    assert decide(strict, ControllerState(), obs(0, visible=100)).desired == 1
    assert decide(loose, ControllerState(), obs(0, visible=100)).desired == 2
    zero = ControllerParams(**{**PARAMS.__dict__, "cold_start_work": 0.0})
    assert decide(zero, ControllerState(), obs(0, visible=100)).desired == 13  # the bands


def test_a_big_backlog_starts_every_gpu_at_once() -> None:
    assert decide(PARAMS, ControllerState(), obs(0, visible=10_000)).desired == 20


def test_launches_under_way_count_as_capacity() -> None:
    """20 jobs, 1 worker launched 600 s ago: it clears them before a new one could boot."""
    state = decide(PARAMS, ControllerState(), obs(0, visible=400)).state
    assert (
        decide(PARAMS, state, obs(0, visible=400)).desired
        == decide(PARAMS, ControllerState(), obs(0, visible=400)).desired
    )  # the same sample twice asks for no more
    launched = ControllerState(launches=(0.0,))
    assert decide(PARAMS, launched, obs(600, visible=20, pending=1)).desired == 1


def test_steady_load_holds_a_rate_floor_through_empty_moments() -> None:
    """One job per second at 2 s each needs at least 3 workers (85 % busy at most): an empty
    sample between jobs does not release them."""
    state = ControllerState()
    for i in range(40):
        # Two of three workers busy complete 10 jobs per 10 s and outstanding holds at 2:
        # 10 arrivals per 10 s.
        state = decide(PARAMS, state, obs(i * 10.0, visible=0, in_flight=2, running=3)).state
    assert state.rate == pytest.approx(1.0, rel=0.3)
    assert decide(PARAMS, state, obs(400.0, running=3)).desired >= 3


def test_min_workers_are_kept_when_idle() -> None:
    params = ControllerParams(**{**PARAMS.__dict__, "min_workers": 3})
    decisions = run(params, [obs(t, running=3) for t in range(0, 3600, 60)])
    assert all(d.desired == 3 for d in decisions)


counts = st.integers(0, 400)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(counts, counts, st.integers(0, 25), st.integers(0, 25)), min_size=1, max_size=40
    ),
    st.integers(0, 5),
    st.integers(1, 25),
    st.floats(0, 4),
)
def test_desired_stays_within_bounds_and_keeps_busy_and_launching_workers(
    samples: list[tuple[int, int, int, int]], min_workers: int, extra: int, kappa: float
) -> None:
    params = ControllerParams(
        min_workers=min_workers,
        max_workers=min_workers + extra,
        jobs_per_worker=4,
        idle_minutes=3,
        cold_start_work=kappa,
        cold_start_s=630.0,
        seconds_per_job=2.0,
        concurrency=1,
        host_idle_s=200.0,
    )
    state = ControllerState()
    for i, (visible, in_flight, running, pending) in enumerate(samples):
        o = obs(i * 10.0, visible, in_flight, running, pending)
        decision = decide(params, state, o)
        assert params.min_workers <= decision.desired <= params.max_workers
        if o.outstanding:
            busy = min(running, in_flight)
            # Never below what is busy or launching while work is outstanding.
            assert decision.desired >= min(params.max_workers, max(busy, running + pending))
        if o.outstanding and running + pending == 0:
            assert decision.desired >= 1  # waiting work always gets a worker
        if not o.outstanding:
            # An empty queue never asks for more than it has, beyond minWorkers/the floor.
            assert decision.desired <= max(min_workers, running + pending, decision.state.floor)
        assert ControllerState.from_json(json.loads(json.dumps(decision.state.to_json()))) == (
            decision.state
        )
        state = decision.state
