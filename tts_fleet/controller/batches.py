"""The controller's side of deadline batches (issue #23): read the open batch records, work
out each batch's progress, forecast it, report it, and retire the finished ones.

Once per invocation `load` lists `batches/` and reads at most MAX_OPEN_BATCHES records, the
oldest first (batch ids sort by submission time). Each record is untrusted input: read
bounded and checked by `tts_fleet.scaling.batches.parse_record`; a bad one is skipped with
one log line, and a failed listing costs the batches, never the scaling decision.

Progress is estimated, not counted: a HEAD of every job's manifest at every sample would be
10,000 requests a minute for one batch of 10,000. Instead each sample's outstanding count
(visible + in flight) is allocated to the open batches newest first: SQS standard queues
hand out roughly in arrival order, so the newest batch holds the work still waiting, and
whatever exceeds all batches' jobs is work sent without a batch, assumed ahead of them. A
batch's done count is its jobs minus its share. The approximation errs when order breaks
(retries, a job sent again, jobs moved to the DLQ count as done) and is conservative where
unbatched work arrives after a batch (that work is counted against the batch).

Each sample's `OpenBatch`es go to the policy with the queue's counts; its deadline planner
(tts_fleet/scaling/deadlines.py) sets the worker count and forecasts each batch. The
first sample of an invocation logs one EMF line per batch; a batch the fleet cannot finish
in time even at maxWorkers is logged at once, the first time it is known (`batch-at-risk`).
At the end the forecasts are written to FORECASTS_KEY for `tts-fleet status`, and the record
of each finished batch is deleted so the listing stays short.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.controller.metrics import NAMESPACE, STACK_DIMENSION
from tts_fleet.scaling.batches import (
    BATCHES_PREFIX,
    FORECASTS_KEY,
    MAX_FORECASTS_BYTES,
    MAX_RECORD_BYTES,
    BatchForecast,
    BatchProgress,
    BatchRecord,
    InvalidBatch,
    OpenBatch,
    batch_id_of_key,
    forecasts_body,
    parse_forecasts,
    parse_record,
)

# The most records read per invocation: bounds the controller's reads whatever is planted
# under `batches/` (each record is at most MAX_RECORD_BYTES).
MAX_OPEN_BATCHES = 20
# A batch is retired only this long after its submission: its record is written before its
# messages, so a sample taken while they are being sent sees none of them outstanding.
FINISH_GRACE_S = 300.0
NOT_FOUND = ("NoSuchKey", "404", "NotFound")
# The batch metrics (EMF, dimension Stack): one line per open batch and invocation; the
# Maximum of BATCH_AT_RISK over a period says whether any batch was at risk.
BATCH_REMAINING = "BatchRemaining"
BATCH_SLACK = "BatchSlackSeconds"  # deadline - predicted finish; negative: late
BATCH_AT_RISK = "BatchAtRisk"
BATCH_METRICS = {BATCH_REMAINING: "Count", BATCH_SLACK: "Seconds", BATCH_AT_RISK: "Count"}


def allocate(records: list[BatchRecord], outstanding: int) -> list[OpenBatch]:
    """Each record's progress from the outstanding count: the newest batches hold it."""
    left = max(0, outstanding)
    shares = {}
    for record in sorted(records, key=lambda r: (r.submitted_at, r.batch_id), reverse=True):
        shares[record.batch_id] = min(record.jobs, left)
        left -= shares[record.batch_id]
    return [record.open_batch(record.jobs - shares[record.batch_id]) for record in records]


@dataclass
class BatchBook:
    """The open batches of one invocation, their latest progress and forecasts."""

    stack: str
    records: list[BatchRecord] = field(default_factory=list)
    previous: dict[str, BatchProgress] = field(default_factory=dict)  # last invocation's
    latest: list[BatchProgress] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)  # ids already logged at risk

    def open(self, outstanding: int) -> tuple[OpenBatch, ...]:
        """The open batches at this sample, as the policy's deadline planner takes them."""
        return tuple(allocate(self.records, outstanding)) if self.records else ()

    def sample(
        self,
        *,
        now: float,
        outstanding: int,
        forecasts: Sequence[BatchForecast],
        first: bool,
    ) -> list[str]:
        """Progress at one sample and the deadline planner's forecasts for it
        (`Decision.forecasts`, tts_fleet/scaling/deadlines.py, one per open batch); the log
        lines to emit for it."""
        if not self.records:
            return []
        batches = allocate(self.records, outstanding)
        by_id = {forecast.batch_id: forecast for forecast in forecasts}
        batches = [batch for batch in batches if batch.batch_id in by_id]
        self.latest = [BatchProgress(batch, by_id[batch.batch_id]) for batch in batches]
        lines = []
        for item in self.latest:
            risk = item.forecast.at_risk and item.batch.batch_id not in self.reported
            if first or risk:
                lines.append(forecast_line(self.stack, now, item, "batch-at-risk" if risk else ""))
            if risk:
                self.reported.add(item.batch.batch_id)
        return lines

    def finish(self, s3: Any, bucket: str, now: float) -> list[str]:
        """Writes the forecasts for `status` and deletes the finished batches' records; the
        log lines of what failed. Nothing is written when there were and are no batches."""
        lines = []
        done = [
            item.batch
            for item in self.latest
            if item.batch.done >= item.batch.jobs and now - item.batch.submitted_at > FINISH_GRACE_S
        ]
        for batch in done:
            try:
                s3.delete_object(Bucket=bucket, Key=f"{BATCHES_PREFIX}{batch.batch_id}.json")
                lines.append(event_line(self.stack, "batch-finished", batch.batch_id))
            except (ClientError, BotoCoreError) as error:
                lines.append(
                    event_line(self.stack, "batch-not-retired", f"{batch.batch_id}: {error}")
                )
        finished = {batch.batch_id for batch in done}
        kept = [item for item in self.latest if item.batch.batch_id not in finished]
        if not kept and not self.previous:
            return lines
        try:
            s3.put_object(
                Bucket=bucket,
                Key=FORECASTS_KEY,
                Body=forecasts_body(now, kept),
                ContentType="application/json",
            )
        except (ClientError, BotoCoreError) as error:
            lines.append(event_line(self.stack, "batches-not-saved", str(error)))
        return lines


def load(s3: Any, bucket: str, stack: str) -> tuple[BatchBook, list[str]]:
    """The open batch records (at most MAX_OPEN_BATCHES, oldest first) and, when there are
    any, the last invocation's forecasts; the log lines of what could not be used. Never
    raises."""
    book, lines = BatchBook(stack), []
    try:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=BATCHES_PREFIX, MaxKeys=MAX_OPEN_BATCHES)
    except (ClientError, BotoCoreError) as error:
        return book, [
            event_line(stack, "batches-unread", f"ListObjectsV2 {BATCHES_PREFIX}: {error}")
        ]
    if listed.get("IsTruncated"):
        lines.append(
            event_line(
                stack, "batches-unread", f"more than {MAX_OPEN_BATCHES} open; the oldest read"
            )
        )
    for item in listed.get("Contents", []):
        key = str(item.get("Key", ""))
        problem = _read_record(s3, bucket, key, book.records)
        if problem:
            lines.append(event_line(stack, "batch-skipped", f"{key}: {problem}"))
    if not book.records:  # readers join forecasts to records: stale ones show nowhere
        return book, lines
    try:
        _, book.previous = parse_forecasts(_read(s3, bucket, FORECASTS_KEY, MAX_FORECASTS_BYTES))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in NOT_FOUND:
            lines.append(event_line(stack, "batches-unread", f"{FORECASTS_KEY}: {error}"))
    except (BotoCoreError, InvalidBatch) as error:
        lines.append(event_line(stack, "batches-unread", f"{FORECASTS_KEY}: {error}"))
    book.reported = {key for key, item in book.previous.items() if item.forecast.at_risk}
    return book, lines


def _read_record(s3: Any, bucket: str, key: str, into: list[BatchRecord]) -> str | None:
    """Reads one record into `into`; why not, when it cannot be used."""
    batch_id = batch_id_of_key(key)
    if batch_id is None:
        return "not a batch record's name"
    try:
        record = parse_record(_read(s3, bucket, key, MAX_RECORD_BYTES))
    except (ClientError, BotoCoreError, InvalidBatch) as error:
        return str(error)
    if record.batch_id != batch_id:
        return f"names batch {record.batch_id}"
    into.append(record)
    return None


def _read(s3: Any, bucket: str, key: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes: an oversized object is refused without being read whole."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    try:
        return bytes(body.read(limit + 1))
    finally:
        body.close()


def forecast_line(stack: str, now: float, item: BatchProgress, event: str) -> str:
    """One EMF record of a batch's forecast (`event`: "batch-at-risk" when first known)."""
    forecast = item.forecast
    slack = forecast.deadline - forecast.predicted_finish
    values = {
        BATCH_REMAINING: item.remaining,
        BATCH_SLACK: round(slack, 1),
        BATCH_AT_RISK: 1 if forecast.at_risk else 0,
    }
    record: dict[str, Any] = {
        "_aws": {
            "Timestamp": int(now * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [[STACK_DIMENSION]],
                    "Metrics": [{"Name": n, "Unit": u} for n, u in BATCH_METRICS.items()],
                }
            ],
        },
        STACK_DIMENSION: stack,
        "event": event or "batch-forecast",
        "batch_id": forecast.batch_id,
        "jobs": item.batch.jobs,
        "done": item.batch.done,
        "deadline": forecast.deadline,
        "predicted_finish": forecast.predicted_finish,
        **values,
    }
    return json.dumps(record, separators=(",", ":"))


def event_line(stack: str, event: str, problem: str) -> str:
    """A plain log line about the batch records (Logs Insights: `filter event like /batch/`)."""
    return json.dumps({"event": event, STACK_DIMENSION: stack, "problem": problem})
