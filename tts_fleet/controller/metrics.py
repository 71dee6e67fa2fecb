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


def emf_line(
    stack: str, timestamp_ms: int, values: Mapping[str, float], properties: Mapping[str, Any]
) -> str:
    """One Embedded Metric Format record; `properties` ride along as searchable log fields."""
    unknown = set(values) - set(METRIC_NAMES)
    if unknown:
        raise ValueError(f"unknown controller metrics {sorted(unknown)}")
    record: dict[str, Any] = {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [[STACK_DIMENSION]],
                    "Metrics": [{"Name": name, "Unit": "Count"} for name in values],
                }
            ],
        },
        STACK_DIMENSION: stack,
        **properties,
        **values,
    }
    return json.dumps(record, separators=(",", ":"))
