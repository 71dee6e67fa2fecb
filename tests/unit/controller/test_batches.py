"""The controller's batch progress estimate and its stand-in forecast, with exact values."""

from __future__ import annotations

from dataclasses import replace

from tests.lib.moto_stack import PARAMS
from tts_fleet.controller.batches import allocate, drain_finish, forecast_batches
from tts_fleet.scaling.batches import BatchRecord, OpenBatch

NOW = 1_796_000_000.0


def record(tag: str, submitted: float, jobs: int, deadline: float = NOW + 3600) -> BatchRecord:
    return BatchRecord(f"b-20261202T010000Z-0000000{tag}", submitted, deadline,
                       {f"j{n}": "a" * 64 for n in range(jobs)})  # fmt: skip


def test_outstanding_work_is_the_newest_batches_and_the_rest_unbatched() -> None:
    old, new = record("1", NOW - 60, 10), record("2", NOW - 30, 10)
    assert [b.done for b in allocate([old, new], 15)] == [5, 0]
    assert [b.done for b in allocate([old, new], 4)] == [10, 6]
    assert [b.done for b in allocate([old, new], 0)] == [10, 10]
    assert [b.done for b in allocate([old, new], 50)] == [0, 0]  # 30 sent without a batch


def test_the_drain_counts_running_workers_from_now_and_new_ones_after_a_cold_start() -> None:
    params = replace(PARAMS, cold_start_s=600.0, seconds_per_job=2.0)
    assert drain_finish(params, 0, NOW, 0, 4) == NOW
    assert drain_finish(params, 100, NOW, 2, 2) == NOW + 100.0  # 200 worker-s on 2
    assert drain_finish(params, 100, NOW, 2, 4) == NOW + 100.0  # done before the others start
    assert drain_finish(params, 1000, NOW, 1, 5) == NOW + 600 + (2000 - 600) / 5
    assert drain_finish(params, 1000, NOW, 0, 4) == NOW + 600 + 2000 / 4


def test_a_batch_behind_another_waits_for_it_and_is_at_risk_only_at_max_workers() -> None:
    params = replace(PARAMS, max_workers=4, cold_start_s=600.0, seconds_per_job=2.0)
    first = OpenBatch("b-20261202T010000Z-00000001", NOW - 60, NOW + 3600, 400, 0)
    second = OpenBatch("b-20261202T010000Z-00000002", NOW - 30, NOW + 1500, 400, 0)
    one, two = forecast_batches(params, [second, first], now=NOW, running=0, planned=2)
    assert one.batch_id == first.batch_id
    assert (one.predicted_finish, one.at_risk) == (NOW + 600 + 800 / 2, False)
    # Behind the first: 800 jobs, 1,400 s at the plan's 2 workers, inside its 1,500 s.
    assert (two.predicted_finish, two.at_risk) == (NOW + 600 + 1600 / 2, False)
    tight = replace(second, deadline=NOW + 900)
    # With 900 s even 4 workers need 600 + 400 s: at risk, forecast at what 4 can reach.
    _, late = forecast_batches(params, [first, tight], now=NOW, running=0, planned=2)
    assert (late.predicted_finish, late.at_risk) == (NOW + 1000, True)
