"""Deadline batches (issue #23): the shapes the submitting client, the controller and the
deadline planner share.

`tts-fleet submit --deadline/--within` writes one record per batch to `batches/<batch-id>.json`
in the stack's bucket; the controller reads the open ones (untrusted input) and hands them to
the planner as `OpenBatch`es; the planner answers with one `BatchForecast` per batch, which the
controller logs (EMF) and keeps in its state for `tts-fleet status`. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

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
