"""`simulate --deadline MINUTES` (issue #23): a trace's jobs as deadline batches, and the
report of which deadlines a run met.

Which jobs form a batch:

- **a burst**: the jobs arriving at one instant (`burst:N`, each burst of `bursts:...`, and
  any instant of a CSV trace with more than one job); its deadline is that instant + MINUTES;
- **a trace with no burst at all** (`poisson`, `sparse`, `diurnal`: one job per instant):
  each clock hour's arrivals from t = 0, as a producer sending an hourly batch would; the
  batch is known from its first job on, and its deadline is the hour's end + MINUTES, so
  every job of it has at least MINUTES.

The engine hands the controller the batches open at each sample as `OpenBatch`es (the jobs
arrived so far and the jobs done: what a batch record and the outputs show); the peers ignore
them, and every run is judged against the same deadlines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby

from tts_fleet.scaling.batches import OpenBatch
from tts_fleet.sim.traces import Trace

HOUR_S = 3600.0


@dataclass(frozen=True)
class SimBatch:
    batch_id: str
    first: int  # index of its first job in the trace's arrivals
    last: int  # one past its last job
    submitted_at: float
    deadline: float


def trace_batches(trace: Trace, deadline_s: float) -> tuple[SimBatch, ...]:
    """The trace's batches (see the module's docstring), in arrival order."""
    arrivals = trace.arrivals
    bursts = [(t, len(list(group))) for t, group in groupby(arrivals)]
    batches: list[SimBatch] = []
    start = 0
    if any(count > 1 for _, count in bursts):
        for t, count in bursts:
            batches.append(SimBatch(f"t{t:g}", start, start + count, t, t + deadline_s))
            start += count
        return tuple(batches)
    for hour, group in groupby(arrivals, key=lambda t: math.floor(t / HOUR_S)):
        count = len(list(group))
        end_of_hour = (hour + 1) * HOUR_S
        batches.append(
            SimBatch(f"h{hour}", start, start + count, arrivals[start], end_of_hour + deadline_s)
        )
        start += count
    return tuple(batches)


class BatchBook:
    """The batches of one run: which batch each job is of, and how many of each are done."""

    def __init__(self, batches: tuple[SimBatch, ...]) -> None:
        self.batches = batches
        self.of_job: list[int] = []
        for index, batch in enumerate(batches):
            self.of_job += [index] * (batch.last - batch.first)
        self.done = [0] * len(batches)
        self.next_open = 0  # batches before it are all done

    def job_done(self, job: int) -> None:
        self.done[self.of_job[job]] += 1

    def open_at(self, now: float, arrived: int) -> tuple[OpenBatch, ...]:
        """The batches submitted by `now` with jobs left (`arrived` jobs of the trace so far)."""
        while self.next_open < len(self.batches) and self.done[self.next_open] >= self._size(
            self.next_open
        ):
            self.next_open += 1
        open_batches = []
        for index in range(self.next_open, len(self.batches)):
            batch = self.batches[index]
            if batch.submitted_at > now or batch.first >= arrived:
                break
            jobs = min(batch.last, arrived) - batch.first
            if self.done[index] < jobs:
                open_batches.append(
                    OpenBatch(batch.batch_id, batch.submitted_at, batch.deadline, jobs,
                              self.done[index])
                )  # fmt: skip
        return tuple(open_batches)

    def _size(self, index: int) -> int:
        batch = self.batches[index]
        return batch.last - batch.first


@dataclass(frozen=True)
class DeadlineResult:
    """How a run did against the deadlines: `simulate --json`'s `deadlines`."""

    deadline_s: float
    batches: int
    met: int
    missed: int
    worst_slack_s: float | None  # the smallest deadline − finish over the batches (< 0: late)

    def to_json(self) -> dict[str, float | int | None]:
        return {"met": self.met, "missed": self.missed, "worst_slack_s": self.worst_slack_s}


def judge(batches: tuple[SimBatch, ...], finish: list[float], deadline_s: float) -> DeadlineResult:
    """Each batch's last finish against its deadline (a job never finished misses)."""
    met = 0
    worst: float | None = None
    for batch in batches:
        done = finish[batch.first : batch.last]
        last = math.inf if any(math.isnan(f) for f in done) else max(done)
        slack = batch.deadline - last
        met += slack >= 0
        worst = slack if worst is None else min(worst, slack)
    rounded = None if worst is None or not math.isfinite(worst) else round(worst, 3)
    return DeadlineResult(deadline_s, len(batches), met, len(batches) - met, rounded)
