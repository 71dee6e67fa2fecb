"""`simulate --deadline` and `advise --deadline` (issue #23): the trace's batches, the planner
in the loop, the peers judged at the same deadline, and the report's keys."""

from __future__ import annotations

import math

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.physics import PROFILES
from tts_fleet.sim.advise import advise
from tts_fleet.sim.deadlines import BatchBook, judge, trace_batches
from tts_fleet.sim.engine import simulate
from tts_fleet.sim.model import PolicySetup, peer_policy, seed_policy, stack_policy
from tts_fleet.sim.report import CostRates
from tts_fleet.sim.traces import Trace, parse_trace

RATES = CostRates(gpu_hourly_usd=1.0, floor_monthly_usd=73.0)
SEED = PROFILES["seed"]


def controller(max_workers: int = 20) -> PolicySetup:
    return stack_policy(ScalingConfig(max_workers=max_workers), concurrency=1)


def test_each_burst_is_a_batch_with_the_deadline_from_its_arrival() -> None:
    batches = trace_batches(parse_trace("bursts:500:3:24"), 1800.0)
    assert len(batches) == 8
    assert [(b.first, b.last) for b in batches[:2]] == [(0, 500), (500, 1000)]
    assert [b.deadline - b.submitted_at for b in batches] == [1800.0] * 8
    assert batches[1].submitted_at == 3 * 3600.0


def test_a_trace_without_bursts_is_one_batch_per_hour_due_after_the_hours_end() -> None:
    trace = Trace("t", (10.0, 3000.0, 3700.0, 7300.0), 7300.0)
    batches = trace_batches(trace, 600.0)
    assert [(b.first, b.last) for b in batches] == [(0, 2), (2, 3), (3, 4)]
    assert [b.deadline for b in batches] == [3600.0 + 600, 7200.0 + 600, 10800.0 + 600]
    assert [b.submitted_at for b in batches] == [10.0, 3700.0, 7300.0]


def test_the_book_shows_the_open_batches_jobs_arrived_and_done() -> None:
    trace = Trace("t", (0.0, 0.0, 0.0, 50.0, 50.0), 50.0)
    book = BatchBook(trace_batches(trace, 600.0))
    assert [b.jobs for b in book.open_at(10.0, 3)] == [3]
    book.job_done(0)
    book.job_done(1)
    book.job_done(2)
    opened = book.open_at(60.0, 5)
    assert [(b.batch_id, b.jobs, b.done) for b in opened] == [("t50", 2, 0)]


def test_judge_counts_met_missed_and_the_worst_slack() -> None:
    trace = Trace("t", (0.0, 0.0, 100.0, 100.0), 100.0)
    batches = trace_batches(trace, 60.0)
    result = judge(batches, [30.0, 50.0, 150.0, 200.0], 60.0)
    assert (result.met, result.missed) == (1, 1)
    assert result.worst_slack_s == -40.0
    unfinished = judge(batches, [30.0, 50.0, math.nan, 120.0], 60.0)
    assert unfinished.missed == 1


def test_the_burst_day_meets_every_deadline_for_a_fraction_of_todays_gpu_hours() -> None:
    trace = parse_trace("bursts:500:3:24")
    today = simulate(trace, SEED, controller(), RATES).to_json()
    planned = simulate(trace, SEED, controller(), RATES, deadline_s=1800.0).to_json()
    assert "deadlines" not in today  # without --deadline the document is as before
    assert planned["deadlines"]["missed"] == 0
    assert planned["deadlines"]["met"] == 8
    assert planned["deadlines"]["worst_slack_s"] > 0
    # One worker per burst instead of a race: a cold start and 1,000 s of work each.
    assert planned["cold_starts"] == 8
    assert planned["gpu_instance_hours"] < today["gpu_instance_hours"] / 4


def test_the_json_puts_deadlines_beside_todays_keys() -> None:
    result = simulate(parse_trace("burst:200"), SEED, controller(), RATES, deadline_s=1800.0)
    data = result.to_json()
    plain = simulate(parse_trace("burst:200"), SEED, controller(), RATES).to_json()
    assert set(data) - set(plain) == {"deadlines"}
    assert set(data["deadlines"]) == {"met", "missed", "worst_slack_s"}


def test_peers_ignore_the_deadline_and_are_judged_by_it() -> None:
    # The AWS sample's one worker: its alarm (120 s), a cold start (about 650 s) and 2,000 s
    # of work for 1,000 jobs, about 16 minutes past a 30-minute deadline.
    trace = parse_trace("burst:1000")
    seed = simulate(trace, SEED, seed_policy(), RATES, deadline_s=1800.0).to_json()
    assert (seed["deadlines"]["met"], seed["deadlines"]["missed"]) == (0, 1)
    assert -1100 < seed["deadlines"]["worst_slack_s"] < -900
    keda = peer_policy("keda", controller())
    alone = simulate(trace, SEED, keda, RATES).to_json()
    judged = simulate(trace, SEED, keda, RATES, deadline_s=1800.0).to_json()
    judged.pop("deadlines")
    assert judged == alone  # the peer's run does not change with a deadline


def test_a_deadline_past_what_max_workers_reach_is_missed_at_full_speed() -> None:
    trace = parse_trace("burst:2000")
    run = simulate(trace, SEED, controller(max_workers=2), RATES, deadline_s=900.0).to_json()
    assert run["deadlines"]["missed"] == 1
    assert run["cold_starts"] == 2  # all the workers it may have, at once


def test_advise_recommends_the_cheapest_setting_that_meets_every_deadline() -> None:
    trace = parse_trace("bursts:100:3:9")
    report = advise(trace, SEED, controller(), RATES, deadline_s=1800.0)
    rec = report.recommendation
    assert rec is not None
    assert rec.point.deadlines_missed == 0
    meeting = [p for p in report.points if p.deadlines_missed == 0]
    assert rec.point.cost_usd == min(p.cost_usd for p in meeting)
    data = report.to_json()
    assert data["bounds"]["deadline_s"] == 1800.0
    assert data["recommendation"]["deadlines_missed"] == 0


def test_advise_without_a_deadline_writes_the_document_it_always_wrote() -> None:
    report = advise(parse_trace("burst:50"), SEED, controller(), RATES).to_json()
    assert "deadline_s" not in report["bounds"]
    assert all("deadlines_missed" not in p for p in report["points"])


def test_the_alarms_mode_is_told_the_batches_and_decides_as_without_them() -> None:
    trace = parse_trace("bursts:300:3:6")
    alarms = stack_policy(ScalingConfig(max_workers=20, mode="alarms"), concurrency=1)
    alone = simulate(trace, SEED, alarms, RATES).to_json()
    judged = simulate(trace, SEED, alarms, RATES, deadline_s=1800.0).to_json()
    assert judged.pop("deadlines")["met"] == 2
    assert judged == alone
