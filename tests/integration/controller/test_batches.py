"""Deadline batches end to end against moto (issue #23): `submit`'s record and message
attribute, the controller's forecasts and at-risk report, `status`'s reading of both."""

from __future__ import annotations

import json
from typing import Any

from tests.lib.moto_stack import PARAMS, Stack, register_target
from tts_fleet.client.batches import new_batch, read_open_batches, write_batch
from tts_fleet.client.submit import submit_jobs
from tts_fleet.controller.batches import BATCH_AT_RISK, FINISH_GRACE_S
from tts_fleet.scaling.batches import BATCH_ATTRIBUTE, FORECASTS_KEY, parse_forecasts
from worker.jobs import Job


def submit_batch(stack: Stack, count: int, within_s: float, tag: str = "") -> str:
    """What `tts-fleet submit --within` does: the record first, then the marked messages."""
    jobs = [Job(text=f"sentence {tag}{index}.") for index in range(count)]
    now = stack.clock.now
    record = new_batch(now, now + within_s, {job.job_id: job.digest() for job in jobs})
    write_batch(stack.clients.s3, stack.settings.bucket, record)
    report = submit_jobs(stack.clients.sqs, stack.queue_url, jobs, batch_id=record.batch_id)
    assert len(report.sent) == count
    return record.batch_id


def events(stack: Stack, name: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stack.lines]
    return [record for record in records if record.get("event") == name]


def forecasts(stack: Stack) -> dict[str, Any]:
    body = stack.clients.s3.get_object(Bucket=stack.settings.bucket, Key=FORECASTS_KEY)["Body"]
    return parse_forecasts(body.read())[1]


def test_a_batch_too_short_for_max_workers_is_at_risk_within_one_sample(stack: Stack) -> None:
    register_target(stack, 0, PARAMS.max_workers)
    # 400 jobs of 2 s on at most 4 workers after a 630-s cold start: 830 s, not 10 minutes.
    batch_id = submit_batch(stack, 400, within_s=600)
    outcome = stack.invoke(budget_s=0)
    assert outcome.samples == 1
    [risk] = events(stack, "batch-at-risk")
    assert risk["batch_id"] == batch_id and risk[BATCH_AT_RISK] == 1
    # The planner's forecast (tts_fleet/scaling/deadlines.py): no sooner than maxWorkers after
    # one cold start can make it, and late.
    assert risk["predicted_finish"] >= stack.clock.now + 630 + 400 * 2 / 4
    assert risk["predicted_finish"] > risk["deadline"] and risk["BatchSlackSeconds"] < 0
    # The batch went to the policy: its planner asks for every worker the target allows.
    [decision] = events(stack, "decision")
    assert (decision["reason"], decision["ControllerDesired"]) == (
        "deadline-at-risk",
        PARAMS.max_workers,
    )
    assert forecasts(stack)[batch_id].forecast.at_risk
    # Reported once: the next invocation logs its forecast, not another alarm. (moto runs the
    # 4 workers at once, so no cold start is left: 200 s of work with 150 s to go.)
    stack.lines.clear()
    stack.clock.now += 450
    stack.invoke(budget_s=0)
    assert events(stack, "batch-at-risk") == []
    [again] = events(stack, "batch-forecast")
    assert again[BATCH_AT_RISK] == 1


def test_a_batch_with_time_to_spare_is_on_track_and_shown_by_status(stack: Stack) -> None:
    register_target(stack, 0, PARAMS.max_workers)
    batch_id = submit_batch(stack, 10, within_s=7200)
    stack.invoke(budget_s=0)
    assert events(stack, "batch-at-risk") == []
    # The planner sets the count: the fewest workers that finish it in time (one, here).
    [decision] = events(stack, "decision")
    assert (decision["reason"], decision["ControllerDesired"]) == ("deadline", 1)
    [line] = events(stack, "batch-forecast")
    assert (line["batch_id"], line[BATCH_AT_RISK], line["BatchRemaining"]) == (batch_id, 0, 10)
    [shown] = read_open_batches(stack.clients.s3, stack.settings.bucket).to_json()
    assert (shown["batch_id"], shown["jobs"], shown["done"], shown["remaining"]) == (
        batch_id,
        10,
        0,
        10,
    )
    assert shown["on_track"] is True and shown["predicted_finish"] < shown["deadline"]


def test_done_is_the_work_no_longer_outstanding_newest_batch_last(stack: Stack) -> None:
    register_target(stack, 0, PARAMS.max_workers)
    older = submit_batch(stack, 10, within_s=7200, tag="a")
    stack.clock.now += 5
    newer = submit_batch(stack, 10, within_s=7200, tag="b")
    take(stack, 15)  # the workers took the older batch's 10 and 5 of the newer
    stack.invoke(budget_s=0)
    seen = forecasts(stack)
    assert (seen[older].batch.done, seen[newer].batch.done) == (10, 5)


def test_a_finished_batch_is_retired_after_the_grace(stack: Stack) -> None:
    register_target(stack, 0, PARAMS.max_workers)
    batch_id = submit_batch(stack, 3, within_s=7200)
    stack.invoke(budget_s=0)
    stack.drain()
    stack.clock.now += 60  # done, but within the grace: its messages might still be coming
    stack.invoke(budget_s=0)
    assert [r.batch_id for r in read_open_batches(stack.clients.s3, "outputs").records] == [
        batch_id
    ]
    stack.clock.now += FINISH_GRACE_S
    stack.lines.clear()
    stack.invoke(budget_s=0)
    assert [line["problem"] for line in events(stack, "batch-finished")] == [batch_id]
    assert read_open_batches(stack.clients.s3, "outputs").records == []
    assert forecasts(stack) == {}


def test_a_bad_record_is_skipped_with_one_line_and_the_decision_stands(stack: Stack) -> None:
    register_target(stack, 0, PARAMS.max_workers)
    stack.clients.s3.put_object(
        Bucket="outputs", Key="batches/b-20261202T010000Z-0badf00d.json", Body=b'{"jobs": 1e999}'
    )
    stack.send(2)
    outcome = stack.invoke(budget_s=0)
    [skipped] = events(stack, "batch-skipped")
    assert "b-20261202T010000Z-0badf00d" in skipped["problem"]
    assert outcome.desired == 1 and events(stack, "batch-forecast") == []


def test_each_message_names_its_batch_in_an_attribute_and_the_body_is_the_job(
    stack: Stack,
) -> None:
    batch_id = submit_batch(stack, 1, within_s=3600)
    [message] = stack.clients.sqs.receive_message(
        QueueUrl=stack.queue_url, MessageAttributeNames=["All"]
    )["Messages"]
    assert message["MessageAttributes"][BATCH_ATTRIBUTE]["StringValue"] == batch_id
    assert Job.model_validate_json(message["Body"]).text == "sentence 0."


def take(stack: Stack, count: int) -> None:
    """What workers would do to `count` jobs: receive and delete them, oldest first."""
    while count > 0:
        answer = stack.clients.sqs.receive_message(
            QueueUrl=stack.queue_url, MaxNumberOfMessages=min(10, count)
        )
        for message in answer["Messages"]:
            stack.clients.sqs.delete_message(
                QueueUrl=stack.queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        count -= len(answer["Messages"])
