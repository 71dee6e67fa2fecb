"""The controller's batch progress estimate and its stand-in forecast, with exact values."""

from __future__ import annotations

from tts_fleet.controller.batches import allocate
from tts_fleet.scaling.batches import BatchRecord

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
