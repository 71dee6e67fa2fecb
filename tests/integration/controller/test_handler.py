"""The controller function against moto: SQS, ECS, Application Auto Scaling and S3 in one
mocked account. The clock and sleep are the test's, so a 50-s invocation takes no time."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.lib.moto_stack import PARAMS, Stack, register_target
from tts_fleet.controller import handler
from tts_fleet.controller.metrics import DESIRED, NAMESPACE, OUTSTANDING
from tts_fleet.scaling import policy
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S, ControllerParams, ControllerState


def test_an_idle_stack_returns_after_one_sample_and_leaves_the_count(stack: Stack) -> None:
    outcome = stack.invoke()
    assert (outcome.samples, outcome.desired, outcome.changes) == (1, 0, 0)
    assert stack.clock.slept == []
    assert stack.desired() == 0


def test_a_job_in_an_idle_queue_starts_a_worker_within_one_invocation(stack: Stack) -> None:
    register_target(stack, 0, 4)
    stack.send(1)
    outcome = stack.invoke()
    assert stack.desired() == 1
    assert outcome.changes == 1  # set once, on the first sample; later samples agree
    # moto reports the new task running at once but nothing consumes the job, so it stays
    # outstanding: sampling goes on every 10 s for the whole budget, at 0, 10, .., 50 s.
    assert outcome.samples == 6
    assert stack.clock.slept == [SAMPLE_INTERVAL_S] * 5


def test_each_decision_is_an_emf_line_with_the_stack_dimension(stack: Stack) -> None:
    stack.send(3)
    stack.invoke(budget_s=0)
    [line] = stack.lines
    record = json.loads(line)
    directive = record["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == NAMESPACE
    assert directive["Dimensions"] == [["Stack"]]
    assert {m["Name"] for m in directive["Metrics"]} >= {DESIRED, OUTSTANDING}
    assert (record["Stack"], record[DESIRED], record[OUTSTANDING]) == ("dev", 1, 3)
    assert record["reason"] and record["visible"] == 3


def test_the_state_round_trips_through_s3(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.send(2)
    stack.invoke(budget_s=0)
    first = stack.stored()
    assert ControllerState.from_json(first).to_json() == first
    assert first["updated"] == stack.clock.now and first["desired"] == stack.desired() == 1
    # The next invocation starts from what the last one saved: the policy gets it back.
    seen: list[ControllerState] = []
    real = policy.decide

    def spy(params: ControllerParams, state: ControllerState, obs: Any) -> Any:
        seen.append(state)
        return real(params, state, obs)

    monkeypatch.setattr(policy, "decide", spy)
    stack.clock.now += 60
    stack.invoke(budget_s=0)
    assert [state.to_json() for state in seen] == [first]
    assert ControllerState.from_json(stack.stored()).updated == stack.clock.now
    assert stack.state_lines() == []  # a state the controller wrote is taken as it is


def test_an_empty_queue_releases_per_the_policy(stack: Stack) -> None:
    stack.send(20)
    stack.invoke(budget_s=0)
    stack.set_desired(3)  # as if the backlog had called up three workers
    stack.drain()
    # moto runs the tasks at once. The queue emptied: the surplus goes at once; at most one
    # warm worker waits for the next job (how long is the policy's learned idle window).
    stack.clock.now += 60
    outcome = stack.invoke()
    assert outcome.desired <= 1 and stack.desired() == outcome.desired
    # Still empty past idleMinutes: back to minWorkers; with nothing left running the
    # invocation returns after that one sample.
    stack.clock.now += PARAMS.idle_minutes * 60
    outcome = stack.invoke()
    assert (outcome.desired, stack.desired()) == (PARAMS.min_workers, PARAMS.min_workers)
    assert stack.stored()["desired"] == PARAMS.min_workers


def test_a_schedules_bounds_on_the_scalable_target_clamp_the_decision(stack: Stack) -> None:
    register_target(stack, 2, 3)  # what a scheduled action leaves: min 2, max 3
    outcome = stack.invoke(budget_s=0)
    assert (outcome.desired, stack.desired()) == (2, 2)
    # Slow jobs and a short cold start: 40 jobs are worth 5 workers, capped at the max 3.
    slow = replace(PARAMS, cold_start_s=10.0, seconds_per_job=60.0)
    stack.settings = replace(stack.settings, params=slow)
    stack.send(40)
    assert stack.invoke(budget_s=0).desired == 3


def test_the_handler_reads_its_settings_from_the_environment(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in stack.settings.to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(handler.Clients, "default", classmethod(lambda cls: stack.clients))
    stack.send(1)

    class Context:
        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 14_000  # 14 s left: 9 s of budget, so one sample and no sleep

    monkeypatch.setattr(handler.time, "sleep", lambda s: pytest.fail("slept past the budget"))
    assert handler.handle({"source": "test"}, Context()) == {
        "samples": 1,
        "desired": 1,
        "reason": stack.stored()["reason"],
        "changes": 1,
    }
