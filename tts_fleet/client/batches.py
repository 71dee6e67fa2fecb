"""Deadline batches on the client side (issue #23): `submit --deadline/--within` parsed,
the batch record written before any of its messages is sent, and the open batches read back
for `status` and `wait` with the controller's last forecasts.

The record's shape and its checks are in tts_fleet/scaling/batches.py, shared with the
controller; everything read back from the bucket goes through those checks.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.scaling.batches import (
    BATCHES_PREFIX,
    FORECASTS_KEY,
    MAX_BATCH_JOBS,
    MAX_DEADLINE_S,
    MAX_FORECASTS_BYTES,
    MAX_RECORD_BYTES,
    BatchProgress,
    BatchRecord,
    InvalidBatch,
    batch_id_of_key,
    new_batch_id,
    parse_forecasts,
    parse_record,
)

# `--deadline`: an ISO 8601 UTC or offset time, to the minute or second; a time without a
# zone is refused rather than guessed.
DEADLINE_PATTERN = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?(Z|[+-]\d{2}:\d{2})", re.IGNORECASE
)
# `--within`: days, hours, minutes in that order, each at most once: 6h, 90m, 1h30m, 2d.
WITHIN_PATTERN = re.compile(r"(?:(\d{1,3})d)?(?:(\d{1,4})h)?(?:(\d{1,6})m)?")
# The most batch records `status` reads (the oldest first, as listed).
MAX_SHOWN_BATCHES = 20


class BadDeadline(ValueError):
    """A deadline that cannot be used: one line saying why."""


def parse_deadline(text: str, now: float) -> float:
    """`--deadline` as epoch seconds; BadDeadline when malformed, past, or too far."""
    if not DEADLINE_PATTERN.fullmatch(text.strip()):
        raise BadDeadline(
            f"--deadline {text!r}: give a UTC time such as 2026-12-02T06:00Z (or +01:00)"
        )
    value = text.strip().upper().replace("Z", "+00:00")
    try:
        deadline = datetime.fromisoformat(value).timestamp()
    except ValueError as error:
        raise BadDeadline(f"--deadline {text!r}: {error}") from None
    return _checked(deadline, now, f"--deadline {text}")


def parse_within(text: str, now: float) -> float:
    """`--within` (6h, 90m, 1h30m, 2d) as the epoch second it ends at."""
    match = WITHIN_PATTERN.fullmatch(text.strip().lower())
    if not match or not any(match.groups()):
        raise BadDeadline(f"--within {text!r}: give a duration such as 6h, 90m, 1h30m or 2d")
    days, hours, minutes = (int(part or 0) for part in match.groups())
    seconds = ((days * 24 + hours) * 60 + minutes) * 60.0
    return _checked(now + seconds, now, f"--within {text}")


def _checked(deadline: float, now: float, given: str) -> float:
    if deadline <= now:
        shown = datetime.fromtimestamp(deadline, UTC).strftime("%Y-%m-%dT%H:%MZ")
        raise BadDeadline(f"{given}: the deadline {shown} has already passed")
    if deadline - now > MAX_DEADLINE_S:
        raise BadDeadline(f"{given}: a deadline is at most {MAX_DEADLINE_S / 86_400:g} days away")
    return deadline


def resolve_deadline(
    deadline: str | None, within: str | None, default_minutes: int, now: float
) -> float | None:
    """The batch's deadline: --deadline, --within (not both), else the stack's
    scaling.deadlineMinutes from now; None (no batch, today's behaviour) when all are unset."""
    if deadline and within:
        raise BadDeadline("give --deadline or --within, not both")
    if deadline:
        return parse_deadline(deadline, now)
    if within:
        return parse_within(within, now)
    if default_minutes > 0:
        return _checked(now + default_minutes * 60.0, now, "scaling.deadlineMinutes")
    return None


def new_batch(now: float, deadline: float, digests: dict[str, str]) -> BatchRecord:
    """The record of a batch of these jobs; BadDeadline when it would be too large to read."""
    if len(digests) > MAX_BATCH_JOBS:
        raise BadDeadline(
            f"a batch with a deadline holds at most {MAX_BATCH_JOBS} jobs ({len(digests)} "
            "given); submit them in parts"
        )
    return BatchRecord(new_batch_id(now, secrets.token_hex(4)), now, deadline, dict(digests))


def write_batch(s3: Any, bucket: str, record: BatchRecord) -> None:
    """Writes the record once (If-None-Match *: a batch id is never reused). Raises the
    AWS error: without the record the controller could not plan for the jobs, so nothing
    is sent."""
    s3.put_object(
        Bucket=bucket,
        Key=record.key,
        Body=record.body(),
        ContentType="application/json",
        IfNoneMatch="*",
    )


@dataclass
class OpenBatches:
    """What `status` and `wait` show of the batches: the open records, the controller's
    last forecasts (None when it has written none or they cannot be read), and one line per
    record or object that could not be used."""

    records: list[BatchRecord] = field(default_factory=list)
    forecast_at: float | None = None
    forecasts: dict[str, BatchProgress] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> list[dict[str, Any]]:
        """One object per open batch (docs/cli.md, `status --json`'s `batches`)."""
        return [batch_json(record, self.forecasts.get(record.batch_id)) for record in self.records]


def batch_json(record: BatchRecord, progress: BatchProgress | None) -> dict[str, Any]:
    """Done, remaining, predicted finish and on track are the controller's (None until it
    has planned for the batch)."""
    shown: dict[str, Any] = {
        "batch_id": record.batch_id,
        "jobs": record.jobs,
        "done": None,
        "remaining": None,
        "submitted_at": _iso(record.submitted_at),
        "deadline": _iso(record.deadline),
        "predicted_finish": None,
        "on_track": None,
    }
    if progress is not None:
        done = min(progress.batch.done, record.jobs)
        shown["done"], shown["remaining"] = done, record.jobs - done
        shown["predicted_finish"] = _iso(progress.forecast.predicted_finish)
        shown["on_track"] = not progress.forecast.at_risk
    return shown


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def read_open_batches(s3: Any, bucket: str) -> OpenBatches:
    """The batch records still in the bucket (at most MAX_SHOWN_BATCHES, oldest first) and
    the controller's forecasts. An unreadable or invalid object is a problem line, not an
    error: status shows what it can."""
    found = OpenBatches()
    answer = s3.list_objects_v2(Bucket=bucket, Prefix=BATCHES_PREFIX, MaxKeys=MAX_SHOWN_BATCHES)
    for item in answer.get("Contents", []):
        key = str(item.get("Key", ""))
        if batch_id_of_key(key) is None:
            found.problems.append(f"{key}: not a batch record's name")
            continue
        try:
            found.records.append(parse_record(_read(s3, bucket, key, MAX_RECORD_BYTES)))
        except InvalidBatch as error:
            found.problems.append(f"{key}: {error}")
        except ClientError as error:  # e.g. finished and deleted since the listing
            found.problems.append(f"{key}: {error.response.get('Error', {}).get('Code')}")
    try:
        found.forecast_at, found.forecasts = parse_forecasts(
            _read(s3, bucket, FORECASTS_KEY, MAX_FORECASTS_BYTES)
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404", "NotFound"):
            found.problems.append(f"{FORECASTS_KEY}: {error}")
    except InvalidBatch as error:
        found.problems.append(f"{FORECASTS_KEY}: {error}")
    return found


def _read(s3: Any, bucket: str, key: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of an object: one more than any valid one, so an oversized
    object is refused by its parser without being read whole."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    try:
        return bytes(body.read(limit + 1))
    finally:
        body.close()


def optional_batches(s3: Any, bucket: str | None) -> OpenBatches | None:
    """The open batches, or None when there is no bucket or the caller may not list it."""
    if not bucket:
        return None
    try:
        return read_open_batches(s3, bucket)
    except (ClientError, BotoCoreError):
        return None
