"""The controller's metric contract: one EMF log line per decision (no PutMetricData calls).

Lambda ships stdout to CloudWatch Logs, which turns each line into metrics in NAMESPACE with
the `Stack` dimension; the stack's dashboard (components/observability.py) graphs these
names. Pure: the component imports this module to name the metrics it graphs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

NAMESPACE = "TtsFleet"  # the worker's namespace (worker/metrics.py): one place to look
STACK_DIMENSION = "Stack"
DESIRED = "ControllerDesired"
OUTSTANDING = "ControllerOutstanding"
RUNNING = "ControllerRunning"
PENDING = "ControllerPending"
METRIC_NAMES = (DESIRED, OUTSTANDING, RUNNING, PENDING)
# With capacity pools (issue #22): one more line per pool and decision, with the `Pool`
# dimension beside `Stack`: its desired, running and pending counts, and whether it is
# unavailable (1) after a capacity failure, its demand moved to the next pool.
POOL_DIMENSION = "Pool"
POOL_DESIRED = "ControllerPoolDesired"
POOL_RUNNING = "ControllerPoolRunning"
POOL_PENDING = "ControllerPoolPending"
POOL_UNAVAILABLE = "ControllerPoolUnavailable"
POOL_METRIC_NAMES = (POOL_DESIRED, POOL_RUNNING, POOL_PENDING, POOL_UNAVAILABLE)


def emf_line(
    stack: str,
    timestamp_ms: int,
    values: Mapping[str, float],
    properties: Mapping[str, Any],
    pool: str | None = None,
) -> str:
    """One Embedded Metric Format record; `properties` ride along as searchable log fields.
    With `pool`, the record is that pool's (POOL_METRIC_NAMES, dimensions Stack and Pool)."""
    known = METRIC_NAMES if pool is None else POOL_METRIC_NAMES
    unknown = set(values) - set(known)
    if unknown:
        raise ValueError(f"unknown controller metrics {sorted(unknown)}")
    dimensions = [STACK_DIMENSION] if pool is None else [STACK_DIMENSION, POOL_DIMENSION]
    record: dict[str, Any] = {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [dimensions],
                    "Metrics": [{"Name": name, "Unit": "Count"} for name in values],
                }
            ],
        },
        STACK_DIMENSION: stack,
        **({} if pool is None else {POOL_DIMENSION: pool}),
        **properties,
        **values,
    }
    return json.dumps(record, separators=(",", ":"))
