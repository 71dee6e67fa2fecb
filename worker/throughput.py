"""What this worker's GPU delivers (issue 23): audio seconds produced per wall second at the
worker's concurrency, over a rolling window of completed jobs, and what each job cost at
that rate.

The wall time is the union of the window's synthesis intervals: the seconds in which at least
one job was on the GPU. Jobs that overlap share their seconds (the rate is the one the worker's
concurrency reached, not one job's), and an idle worker (an empty queue) does not drag the rate
down: what is measured is the GPU's rate while fed, which is what a planner divides work by.
Eligible instance types differ in real throughput, so the rate goes out per `InstanceType`
(worker/metrics.py `AudioSecondsPerSecond`).

A job's estimated cost is its share of the GPU-hour at that rate: the pool's price per hour ÷
3,600 × the job's audio seconds ÷ the rate. The price comes from `POOL_USD_PER_HOUR`, a JSON
object of capacity type → USD per worker-hour (instance and Managed Instances fee) written from
the stack's priced pools (components/service.py): every pool's service runs the one task
definition, so the env cannot name the pool; the host's life cycle (IMDS
`instance-life-cycle`: `spot` or `on-demand`) picks the price. One price (one pool, or every
pool the same capacity type and price) needs no lookup.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from worker.coldstart import (
    INSTANCE_TYPE_ENV,
    METADATA_ENV,
    UNKNOWN_INSTANCE_TYPE,
    instance_metadata,
)

# Long enough to span several jobs of a few seconds to a minute at 4–16 in flight, short enough
# to follow a change of load (a burst of long chapters after short lines).
WINDOW_SECONDS = 300.0
# The host's purchase option when set (a test, a host without IMDS), else IMDSv2.
LIFE_CYCLE_ENV = "INSTANCE_LIFE_CYCLE"


@dataclass(frozen=True)
class Host:
    """This host as the price and the metric need it."""

    instance_type: str
    life_cycle: str  # `spot`, `on-demand`, or `unknown`


def this_host(environ: Mapping[str, str]) -> Host:
    """Asked of IMDS only inside ECS (or when the overrides are set), as the cold start does
    (worker/coldstart.py gather): elsewhere it would wait out its timeouts for nothing."""
    in_ecs = bool(environ.get(METADATA_ENV))

    def ask(name: str, override_env: str) -> str:
        if in_ecs or environ.get(override_env):
            return instance_metadata(environ, name, override_env)
        return UNKNOWN_INSTANCE_TYPE

    return Host(ask("instance-type", INSTANCE_TYPE_ENV), ask("instance-life-cycle", LIFE_CYCLE_ENV))


def hourly_price(prices: Mapping[str, float], life_cycle: str) -> float | None:
    """The worker-hour price of this host: the only one, else the one of its life cycle, else
    None (no price given, or a life cycle no pool has)."""
    if len(set(prices.values())) == 1:
        return next(iter(prices.values()))
    return prices.get(life_cycle)


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


@dataclass(frozen=True)
class Measured:
    """One completed job as the manifest and the metric record it."""

    instance_type: str
    audio_s_per_s: float | None  # the window's rate, None before any audio was measured
    cost_usd: float | None  # None without a price, a duration or a rate


class Throughput:
    """Thread-safe rolling window of completed syntheses (start, end on the monotonic clock,
    audio seconds). The host is looked up once, at the first job, off the start-up path."""

    def __init__(
        self,
        prices: Mapping[str, float],
        host: Callable[[], Host],
        window_s: float = WINDOW_SECONDS,
    ) -> None:
        self._prices = dict(prices)
        self._host_of = host
        self._host: Host | None = None
        self._window_s = window_s
        self._jobs: deque[tuple[float, float, float]] = deque()
        self._lock = threading.Lock()

    def completed(self, started: float, ended: float, audio_s: float | None) -> Measured:
        with self._lock:
            if self._host is None:
                self._host = self._host_of()
            if audio_s is not None and audio_s > 0:
                self._jobs.append((started, ended, audio_s))
            while self._jobs and self._jobs[0][1] < ended - self._window_s:
                self._jobs.popleft()
            rate = self._rate()
            host = self._host
        price = hourly_price(self._prices, host.life_cycle)
        cost = None
        if price is not None and rate is not None and audio_s is not None:
            cost = float(f"{price / 3600.0 * audio_s / rate:.6g}")  # a tiny cost keeps its digits
        return Measured(host.instance_type, rate, cost)

    def _rate(self) -> float | None:
        busy = busy_seconds([(start, end) for start, end, _ in self._jobs])
        if busy <= 0:
            return None
        return sum(audio for _, _, audio in self._jobs) / busy
