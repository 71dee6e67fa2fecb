"""The controller's state object is input (issue 20, item 3): whatever is in the bucket, the
function neither raises nor lets it hold workers on an empty queue, says once what was wrong,
and of two overlapping invocations only the first to write keeps its state."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.lib.moto_stack import PARAMS, Stack, register_target
from tts_fleet.controller.handler import MAX_STATE_BYTES, run
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S, ControllerState

NOW = 1_700_000_000.0  # the Clock's start (moto_stack.Clock)


def forged(**fields: Any) -> bytes:
    return json.dumps(fields).encode("utf-8")


# Each bad state and a word its one log line must name.
BAD_STATES = {
    "a rate that is text": (forged(rates=["x"]), "rates[0]"),
    "launches null": (forged(launches=None), "launches"),
    "updated as text": (forged(updated="yesterday"), "updated"),
    "a count that is a bool": (forged(running=True), "running"),
    "a fractional count": (forged(visible=2.5), "visible"),
    "a negative count": (forged(in_flight=-5), "in_flight"),
    "a negative gap": (forged(gaps=[-1.0]), "gaps[0]"),
    "a huge count": (forged(visible=10**30), "visible"),
    "a huge floor": (forged(floor=10**9), "floor"),
    "an inflated previous desired count": (forged(desired=10**9), "desired"),
    "inflated rates": (forged(rates=[1e6] * 30), "rates[0]"),
    "too many rates": (forged(rates=[0.1] * 31), "rates"),
    "too many gaps": (forged(gaps=[60.0] * 9), "gaps"),
    "NaN": (b'{"rate": NaN}', "NaN"),
    "Infinity": (b'{"updated": -Infinity}', "Infinity"),
    "a number that overflows to inf": (b'{"gaps": [1e999]}', "gaps[0]"),
    "updated in the future": (forged(updated=NOW + 3600), "updated"),
    "idle since after the last sample": (
        forged(updated=NOW - 60, idle_since=NOW + 600),
        "idle_since",
    ),
    "a launch after the last sample": (forged(updated=NOW - 60, launches=[NOW]), "launches[0]"),
    "a reason that is a list": (forged(reason=["backlog"]), "reason"),
    "an unknown key": (forged(rates=[], surprise=1), "surprise"),
    "a list": (b"[1, 2]", "list"),
    "a string": (b'"state"', "str"),
    "null": (b"null", "NoneType"),
    "not JSON": (b"not json", "not JSON"),
    "truncated JSON": (b'{"rates": [1', "not JSON"),
    "not UTF-8": ('{"reason": "é"}'.encode("latin-1"), "UTF-8"),
    "nested too deeply": (b"[" * 100_000, "nested"),
    "oversized": (b"{" + b" " * MAX_STATE_BYTES + b"}", "bytes"),
}


@pytest.mark.parametrize("body,named", BAD_STATES.values(), ids=list(BAD_STATES))
def test_a_bad_state_is_logged_once_replaced_and_the_empty_queue_releases(
    stack: Stack, body: bytes, named: str
) -> None:
    register_target(stack, 0, 4)
    stack.set_desired(3)  # three workers up (moto runs them at once), nothing queued
    stack.plant_state(body)
    outcome = stack.invoke()
    [line] = stack.state_lines()
    assert line["event"] == "state-reset" and line["Stack"] == "dev"
    assert named in line["problem"]
    # A fresh state on an empty queue with no idle gap learned: nothing is kept warm.
    assert (outcome.desired, outcome.reason, stack.desired()) == (0, "idle-release", 0)
    # The bad object is gone: the next invocation reads what this one decided.
    assert ControllerState.from_json(stack.stored()).updated == stack.clock.now
    stack.lines.clear()
    stack.clock.now += 60
    stack.invoke()
    assert stack.state_lines() == []


def test_the_forged_state_that_held_forty_workers_releases_them_at_once(stack: Stack) -> None:
    """The review's probe: an inflated rate history and floor held maxWorkers 40 on an empty
    queue for 13 one-minute invocations."""
    stack.settings = replace(stack.settings, params=replace(PARAMS, max_workers=40))
    register_target(stack, 0, 40)
    stack.set_desired(40)
    stack.plant_state(
        forged(
            updated=NOW - 60,
            rates=[1e6] * 30,
            rate=1e6,
            floor=10**9,
            running=40,
            desired=40,
            reason="rate-floor",
        )
    )
    desired = []
    for _ in range(13):
        desired.append(stack.invoke().desired)
        stack.clock.now += 60
    assert desired == [0] * 13 and stack.desired() == 0
    assert [line["event"] for line in stack.state_lines()] == ["state-reset"]


def test_a_previous_desired_count_is_not_an_input_to_the_decision(stack: Stack) -> None:
    """Within its bound, a stored desired count over maxWorkers passes the check (a schedule
    may have lowered maxWorkers since), and changes nothing: the policy decides from the
    queue and the service."""
    register_target(stack, 0, 4)
    stack.set_desired(4)
    stack.plant_state(forged(updated=NOW - 60, desired=40, running=40, reason="backlog"))
    outcome = stack.invoke()
    assert stack.state_lines() == []
    assert (outcome.desired, stack.desired()) == (0, 0)


class DeniedReads:
    """The bucket's S3 client, with every GetObject of the state refused (an IAM or KMS
    mistake): writes still go through to the bucket."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def get_object(self, **params: Any) -> Any:
        error = {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}
        raise ClientError(error, "GetObject")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)


def test_a_state_it_cannot_read_is_neither_trusted_nor_overwritten(stack: Stack) -> None:
    stack.send(2)
    stack.invoke(budget_s=0)
    before = stack.stored_object()
    stack.clients = replace(stack.clients, s3=DeniedReads(stack.clients.s3))
    stack.lines.clear()
    stack.clock.now += 60
    outcome = stack.invoke(budget_s=0)
    assert outcome.desired == 1  # decided from the queue: two jobs, one worker up
    reset, kept = stack.state_lines()
    assert (reset["event"], kept["event"]) == ("state-reset", "state-not-saved")
    assert "AccessDenied" in reset["problem"] and "PreconditionFailed" in kept["problem"]
    stack.clients = replace(stack.clients, s3=stack.clients.s3.s3)
    assert stack.stored_object() == before


class RecordedPuts:
    """The bucket's S3 client, keeping the parameters of every PutObject it passes on."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3
        self.calls: list[dict[str, Any]] = []

    def put_object(self, **params: Any) -> Any:
        self.calls.append(params)
        return self.s3.put_object(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)


@pytest.mark.parametrize("existing", [False, True], ids=["no state yet", "a state read"])
def test_of_two_overlapping_invocations_the_later_writer_keeps_nothing(
    stack: Stack, existing: bool
) -> None:
    """B starts while A sleeps between samples, reads the same object (or none) and saves
    first; A's write is conditional on what A read, so it loses and B's state stays."""
    if existing:
        stack.invoke(budget_s=0)
        stack.clock.now += 60
    stack.send(1)
    written_by_b: list[tuple[bytes, str]] = []
    b_lines: list[str] = []
    a_puts = RecordedPuts(stack.clients.s3)

    def sleep_while_b_runs(seconds: float) -> None:
        stack.clock.sleep(seconds)
        if not written_by_b:
            run(
                stack.settings,
                stack.clients,
                budget_s=0,
                clock=stack.clock,
                sleep=stack.clock.sleep,
                emit=b_lines.append,
            )
            written_by_b.append(stack.stored_object())

    a = run(
        stack.settings,
        replace(stack.clients, s3=a_puts),
        budget_s=SAMPLE_INTERVAL_S,  # two samples, B's whole invocation between them
        clock=stack.clock,
        sleep=sleep_while_b_runs,
        emit=stack.lines.append,
    )
    assert a.samples == 2 and written_by_b
    assert all(json.loads(line)["event"] == "decision" for line in b_lines)  # B saved
    [lost] = stack.state_lines()
    assert lost["event"] == "state-not-saved" and "PreconditionFailed" in lost["problem"]
    [(b_body, b_etag)] = written_by_b
    assert stack.stored_object() == (b_body, b_etag)
    # A did try to write, and what it wrote would have differed from B's state.
    [a_body] = [put["Body"] for put in a_puts.calls]
    assert a_body != b_body
