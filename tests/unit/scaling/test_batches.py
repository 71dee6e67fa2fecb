"""The batch record and the controller's forecasts object: what every reader accepts of
what anyone could have planted under `batches/` or `controller/`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tts_fleet.scaling.batches import (
    MAX_BATCH_JOBS,
    MAX_RECORD_BYTES,
    BatchForecast,
    BatchProgress,
    BatchRecord,
    InvalidBatch,
    OpenBatch,
    batch_id_of_key,
    forecasts_body,
    new_batch_id,
    parse_forecasts,
    parse_record,
)

DIGEST = "a" * 64
RECORD = BatchRecord("b-20261202T010000Z-0123abcd", 1796173200.0, 1796194800.0,
                     {"ch01": DIGEST, "ch02": "b" * 64})  # fmt: skip


def planted(**changes: Any) -> bytes:
    return json.dumps(RECORD.to_json() | changes).encode()


def test_a_record_round_trips_through_its_bytes() -> None:
    assert parse_record(RECORD.body()) == RECORD
    assert RECORD.key == "batches/b-20261202T010000Z-0123abcd.json"
    assert batch_id_of_key(RECORD.key) == RECORD.batch_id
    assert RECORD.open_batch(5) == OpenBatch(RECORD.batch_id, RECORD.submitted_at,
                                             RECORD.deadline, 2, 2)  # fmt: skip


def test_the_batch_id_sorts_by_submission_and_is_checked() -> None:
    assert new_batch_id(RECORD.submitted_at, "0123abcd") == "b-20261202T010000Z-0123abcd"
    assert new_batch_id(1_796_000_001.0, "00000000") > new_batch_id(1_796_000_000.0, "ffffffff")
    with pytest.raises(ValueError):
        new_batch_id(1_796_000_000.0, "../x")
    assert batch_id_of_key("batches/../state.json") is None
    assert batch_id_of_key("batches/b-20261202T010000Z-0123abcd.txt") is None


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\xff", "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),
        (b"{", "not JSON"),
        (planted(deadline=float("inf")), "not JSON"),  # Infinity is no JSON number
        (planted(extra=1), "exactly"),
        (planted(version=2), "version"),
        (planted(version=True), "version"),
        (planted(batch_id="b-x"), "batch_id"),
        (planted(deadline=RECORD.submitted_at), "after submitted_at"),
        (planted(deadline=RECORD.submitted_at + 8 * 86_400), "at most"),
        (planted(submitted_at="now"), "epoch seconds"),
        (planted(digests={}), "1..20000"),
        (planted(digests={"../x": DIGEST}, jobs=1), "not a job id"),
        (planted(digests={"ch01": "zz"}, jobs=1), "not a request digest"),
        (planted(jobs=3), "number of digests"),
        (planted(jobs=True), "number of digests"),
        (b" " * (MAX_RECORD_BYTES + 1), "over"),
    ],
)
def test_a_bad_record_is_refused_with_its_reason(body: bytes, problem: str) -> None:
    with pytest.raises(InvalidBatch, match=problem):
        parse_record(body)


def test_a_batch_holds_at_most_max_batch_jobs() -> None:
    digests = {f"j{n}": DIGEST for n in range(MAX_BATCH_JOBS + 1)}
    with pytest.raises(InvalidBatch, match="digests"):
        parse_record(planted(digests=digests, jobs=len(digests)))


def test_the_forecasts_round_trip_and_are_checked() -> None:
    batch = OpenBatch(RECORD.batch_id, 0.0, RECORD.deadline, 2, 1)
    item = BatchProgress(batch, BatchForecast(RECORD.batch_id, RECORD.deadline, 1.8e9, True))
    at, found = parse_forecasts(forecasts_body(1_796_000_100.0, [item]))
    assert at == 1_796_000_100.0 and found == {RECORD.batch_id: item}
    assert found[RECORD.batch_id].remaining == 1
    forged = json.loads(forecasts_body(1.0, [item]))
    forged["batches"][0]["done"] = 3  # more done than jobs
    with pytest.raises(InvalidBatch, match="done <= jobs"):
        parse_forecasts(json.dumps(forged).encode())
    forged["batches"][0] |= {"done": 1, "at_risk": "yes"}
    with pytest.raises(InvalidBatch, match="at_risk"):
        parse_forecasts(json.dumps(forged).encode())
