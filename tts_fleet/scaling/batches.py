"""Deadline batches (issue #23): the shapes the submitting client, the controller and the
deadline planner share.

`tts-fleet submit --deadline/--within` writes one record per batch to `batches/<batch-id>.json`
in the stack's bucket; the controller reads the open ones (untrusted input) and hands them to
the planner as `OpenBatch`es; the planner answers with one `BatchForecast` per batch, which the
controller logs (EMF) and keeps in its state for `tts-fleet status`. Pure: stdlib only.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

# Where batch records live in the stack's bucket, outside `outputs/` and `failures/`.
BATCHES_PREFIX = "batches/"


@dataclass(frozen=True)
class OpenBatch:
    """One batch not yet finished, as the planner sees it."""

    batch_id: str
    submitted_at: float  # epoch seconds
    deadline: float  # epoch seconds
    jobs: int  # jobs in the batch
    done: int = 0  # jobs of the batch known to be done (0 where the reader cannot tell)


@dataclass(frozen=True)
class BatchForecast:
    """What the planner expects of one open batch at its current plan."""

    batch_id: str
    deadline: float  # epoch seconds
    predicted_finish: float  # epoch seconds, at the plan's worker count
    at_risk: bool  # the deadline cannot be met even at maxWorkers


# ---- the record: `batches/<batch-id>.json` ------------------------------------------------
#
# Written once by `tts-fleet submit` (If-None-Match *) before any message of the batch is
# sent, read by the controller and by `status`/`wait`. Anyone allowed to write the bucket's
# `batches/` could plant one, so every reader parses it with `parse_record`: bounded, exact
# keys, every value checked.

# The SQS message attribute naming a job's batch: the job body (worker/jobs.py) is unchanged.
BATCH_ATTRIBUTE = "batch"
RECORD_VERSION = 1
RECORD_KEYS = ("version", "batch_id", "jobs", "submitted_at", "deadline", "digests")
# `b-<UTC second of submission>-<8 hex>`: the listing's order (lexicographic) is submission
# order, and the id fits an SQS attribute value and an S3 key as it is.
BATCH_ID_PATTERN = re.compile(r"b-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")  # worker/jobs.py ID_PATTERN
DIGEST_PATTERN = re.compile(r"[0-9a-f]{64}")  # SHA-256 of the request (worker/jobs.py)
# A batch's size bound, so a record stays small enough for the controller to read every
# invocation: 20,000 × (id ≤ 128 + digest 64 + JSON punctuation) is under 4 MiB.
MAX_BATCH_JOBS = 20_000
MAX_RECORD_BYTES = 4 * 1024 * 1024
# The longest deadline a record may set, from its submission: beyond it the number is more
# likely a unit slip than a plan (a week).
MAX_DEADLINE_S = 7 * 86_400.0


class InvalidBatch(ValueError):
    """A batch record that is not one: the message says what is wrong, in one line."""


@dataclass(frozen=True)
class BatchRecord:
    """One batch as submitted: its jobs (id -> request digest) and its deadline."""

    batch_id: str
    submitted_at: float  # epoch seconds
    deadline: float  # epoch seconds
    digests: dict[str, str]  # job id -> request digest, every job of the batch

    @property
    def jobs(self) -> int:
        return len(self.digests)

    @property
    def key(self) -> str:
        return record_key(self.batch_id)

    def open_batch(self, done: int) -> OpenBatch:
        return OpenBatch(
            self.batch_id, self.submitted_at, self.deadline, self.jobs, max(0, min(done, self.jobs))
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "batch_id": self.batch_id,
            "jobs": self.jobs,
            "submitted_at": self.submitted_at,
            "deadline": self.deadline,
            "digests": dict(self.digests),
        }

    def body(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")


def record_key(batch_id: str) -> str:
    return f"{BATCHES_PREFIX}{batch_id}.json"


def batch_id_of_key(key: str) -> str | None:
    """The batch id a `batches/<id>.json` key names; None for any other key."""
    if not (key.startswith(BATCHES_PREFIX) and key.endswith(".json")):
        return None
    candidate = key[len(BATCHES_PREFIX) : -len(".json")]
    return candidate if BATCH_ID_PATTERN.fullmatch(candidate) else None


def new_batch_id(now: float, token: str) -> str:
    """The id of a batch submitted at `now`; `token` is 8 random hex digits (the caller's)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    batch_id = f"b-{stamp}-{token}"
    if not BATCH_ID_PATTERN.fullmatch(batch_id):
        raise ValueError(f"not a batch id: {batch_id!r}")
    return batch_id


def parse_record(body: bytes) -> BatchRecord:
    """A record's bytes checked: at most MAX_RECORD_BYTES of UTF-8 JSON, an object of exactly
    RECORD_KEYS, a batch id, 1..MAX_BATCH_JOBS jobs each with a job id and a digest, finite
    times with submitted_at < deadline <= submitted_at + MAX_DEADLINE_S. InvalidBatch else."""
    if len(body) > MAX_RECORD_BYTES:
        raise InvalidBatch(f"over {MAX_RECORD_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise InvalidBatch("not UTF-8") from None
    except RecursionError:
        raise InvalidBatch("nested too deeply") from None
    except ValueError as error:
        raise InvalidBatch(f"not JSON: {error}") from None
    return record_from_json(data)


def record_from_json(data: object) -> BatchRecord:
    if not isinstance(data, dict) or set(data) != set(RECORD_KEYS):
        raise InvalidBatch(f"must be an object of exactly {', '.join(RECORD_KEYS)}")
    if data["version"] != RECORD_VERSION or isinstance(data["version"], bool):
        raise InvalidBatch(f"version must be {RECORD_VERSION}")
    batch_id = data["batch_id"]
    if not (isinstance(batch_id, str) and BATCH_ID_PATTERN.fullmatch(batch_id)):
        raise InvalidBatch("batch_id is not a batch id")
    submitted, deadline = _time(data, "submitted_at"), _time(data, "deadline")
    if not submitted < deadline <= submitted + MAX_DEADLINE_S:
        raise InvalidBatch(f"deadline must be after submitted_at, by at most {MAX_DEADLINE_S:g} s")
    digests = data["digests"]
    if not isinstance(digests, dict) or not 0 < len(digests) <= MAX_BATCH_JOBS:
        raise InvalidBatch(f"digests must be an object of 1..{MAX_BATCH_JOBS} jobs")
    for job_id, digest in digests.items():
        if not JOB_ID_PATTERN.fullmatch(job_id):
            raise InvalidBatch("digests names a key that is not a job id")
        if not (isinstance(digest, str) and DIGEST_PATTERN.fullmatch(digest)):
            raise InvalidBatch(f"digests[{job_id}] is not a request digest")
    jobs = data["jobs"]
    if isinstance(jobs, bool) or jobs != len(digests):
        raise InvalidBatch(f"jobs must be the number of digests ({len(digests)})")
    return BatchRecord(batch_id, submitted, deadline, dict(digests))


def _time(data: dict[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidBatch(f"{key} must be epoch seconds")
    if not 0 < value < 1e11:  # NaN and Infinity never get here: the parser refuses them
        raise InvalidBatch(f"{key} must be epoch seconds")
    return float(value)


def _no_constant(name: str) -> float:
    """json.loads reads NaN and Infinity, which JSON does not have: refuse them."""
    raise ValueError(f"{name} is not a JSON number")


# ---- the controller's forecasts: `controller/batches.json` ---------------------------------
#
# The controller rewrites it at the end of each invocation that saw open batches; `status`
# and `wait` read it. Under `controller/`, which only the controller role may write (the
# bucket policy, components/storage.py), but still read as untrusted input.

FORECASTS_KEY = "controller/batches.json"
MAX_FORECASTS = 100  # more open batches than the controller reads (controller/batches.py)
MAX_FORECASTS_BYTES = 64 * 1024
FORECAST_KEYS = ("batch_id", "jobs", "done", "deadline", "predicted_finish", "at_risk")


@dataclass(frozen=True)
class BatchProgress:
    """One open batch as the controller last saw it: its progress and the planner's forecast."""

    batch: OpenBatch
    forecast: BatchForecast

    @property
    def remaining(self) -> int:
        return self.batch.jobs - self.batch.done

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch.batch_id,
            "jobs": self.batch.jobs,
            "done": self.batch.done,
            "deadline": self.forecast.deadline,
            "predicted_finish": self.forecast.predicted_finish,
            "at_risk": self.forecast.at_risk,
        }


def forecasts_body(at: float, progress: list[BatchProgress]) -> bytes:
    document = {"at": at, "batches": [item.to_json() for item in progress]}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_forecasts(body: bytes) -> tuple[float, dict[str, BatchProgress]]:
    """`controller/batches.json` checked: (when it was written, batch id -> progress)."""
    if len(body) > MAX_FORECASTS_BYTES:
        raise InvalidBatch(f"over {MAX_FORECASTS_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, RecursionError, ValueError) as error:
        raise InvalidBatch(f"not JSON: {error}") from None
    if not isinstance(data, dict) or set(data) != {"at", "batches"}:
        raise InvalidBatch("must be an object of exactly at, batches")
    items = data["batches"]
    if not isinstance(items, list) or len(items) > MAX_FORECASTS:
        raise InvalidBatch(f"batches must be a list of at most {MAX_FORECASTS}")
    found = [_progress(item) for item in items]
    return _time(data, "at"), {item.batch.batch_id: item for item in found}


def _progress(item: object) -> BatchProgress:
    if not isinstance(item, dict) or set(item) != set(FORECAST_KEYS):
        raise InvalidBatch(f"a forecast must be an object of exactly {', '.join(FORECAST_KEYS)}")
    batch_id = item["batch_id"]
    if not (isinstance(batch_id, str) and BATCH_ID_PATTERN.fullmatch(batch_id)):
        raise InvalidBatch("batch_id is not a batch id")
    jobs, done = item["jobs"], item["done"]
    counts_ok = all(isinstance(n, int) and not isinstance(n, bool) for n in (jobs, done))
    if not counts_ok or not 0 <= done <= jobs <= MAX_BATCH_JOBS:
        raise InvalidBatch(f"{batch_id}: need 0 <= done <= jobs <= {MAX_BATCH_JOBS}")
    if not isinstance(item["at_risk"], bool):
        raise InvalidBatch(f"{batch_id}: at_risk must be true or false")
    deadline, finish = _time(item, "deadline"), _time(item, "predicted_finish")
    # The record's submission time is not kept here: readers that need it read the record.
    batch = OpenBatch(batch_id, 0.0, deadline, jobs, done)
    return BatchProgress(batch, BatchForecast(batch_id, deadline, finish, item["at_risk"]))
