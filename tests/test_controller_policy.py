"""tts_fleet/spec/controller.py: the controller policy the Lambda, the local fleet and the
simulator all call (issue #13)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tts_fleet.spec.config import ScalingConfig
from tts_fleet.spec.controller import (
    ControllerParams,
    ControllerState,
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
)


def obs(now: float, visible: int = 0, in_flight: int = 0, running: int = 0, pending: int = 0):
    return Observation(now, visible, in_flight, running, pending)


def run(params: ControllerParams, observations):
    state = ControllerState()
    decisions = []
    for o in observations:
        decision = decide(params, state, o)
        state = decision.state
        decisions.append(decision)
    return decisions


def test_from_config_reads_the_stack_keys() -> None:
    scaling = ScalingConfig(max_workers=7, jobs_per_worker=3, idle_minutes=9, cold_start_work=2)
    params = ControllerParams.from_config(scaling, cold_start_s=600, seconds_per_job=2.5)
    assert (params.max_workers, params.jobs_per_worker, params.idle_minutes) == (7, 3, 9)
    assert params.cold_start_work == 2.0
    assert (params.cold_start_s, params.seconds_per_job) == (600, 2.5)


def test_fresh_state_from_empty_json() -> None:
    assert ControllerState.from_json({}) == ControllerState()


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


def test_empty_queue_keeps_one_warm_worker_and_releases_the_rest() -> None:
    decision = decide(PARAMS, ControllerState(), obs(0, running=12))
    assert decision.desired == 1
    assert decision.reason == "warm-one"


def test_releases_the_last_worker_by_idle_minutes() -> None:
    decisions = run(PARAMS, [obs(t, running=1) for t in range(0, 301, 10)])
    assert decisions[-1].desired == 0
    assert decisions[0].desired == 1


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
    samples, min_workers, extra, kappa
) -> None:
    params = ControllerParams(
        min_workers=min_workers,
        max_workers=min_workers + extra,
        jobs_per_worker=4,
        idle_minutes=3,
        cold_start_work=kappa,
        cold_start_s=630.0,
        seconds_per_job=2.0,
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
        assert ControllerState.from_json(json.loads(json.dumps(decision.state.to_json()))) == (
            decision.state
        )
        state = decision.state
