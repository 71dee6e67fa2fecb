"""The stack's alarms, dashboard and KMS keys against tts_fleet.config.topology, which the cost
model prices: an alarm or key added to a component without the topology fails here."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lib.stack_support import run_platform
from tts_fleet.config import topology
from tts_fleet.config.models import StackConfig

ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def _metrics(inputs: dict[str, Any]) -> int:
    """Metrics an alarm evaluates: its metric queries' metrics, else its one metric."""
    queries = inputs.get("metricQueries") or []
    return sum(1 for q in queries if q.get("metric")) if queries else 1


@pytest.mark.parametrize(
    "raw",
    [{}, {"alerts": {"monthlyBudgetUsd": 50, "email": "ops@example.com"}},
     {"network": {"mode": "endpoints"}, "scaling": {"minWorkers": 1, "idleMinutes": 30}},
     {"scaling": {"mode": "alarms"}}],
    ids=["defaults", "budget-and-email", "endpoints-always-on", "alarms-mode"],
)  # fmt: skip
def test_the_stack_creates_the_alarms_dashboard_and_keys_the_topology_lists(
    raw: dict[str, Any],
) -> None:
    cfg = StackConfig.from_raw(raw)
    mocks = run_platform(raw)
    alarms = mocks.of_type(ALARM)
    expected = topology.alarms(cfg)
    for spec in expected:
        found = [a for a in alarms if a.name.endswith(f"-{spec.name}")]
        assert len(found) == 1, spec.name
        assert _metrics(found[0].inputs) == spec.metrics, spec.name
    assert len(alarms) == len(expected)
    assert sum(_metrics(a.inputs) for a in alarms) == topology.alarm_metrics(cfg)
    assert len(mocks.of_type("aws:cloudwatch/dashboard:Dashboard")) == topology.dashboards(cfg)
    assert len(mocks.of_type("aws:kms/key:Key")) == topology.kms_keys(cfg)


def test_the_controller_metrics_the_cost_model_counts_are_the_ones_it_emits() -> None:
    from tts_fleet.controller.metrics import METRIC_NAMES

    assert len(METRIC_NAMES) == topology.CONTROLLER_METRICS
    controller = StackConfig.from_raw({"scaling": {"mode": "controller"}})
    alarms_mode = StackConfig.from_raw({"scaling": {"mode": "alarms"}})
    assert topology.custom_metrics_always_on(controller) == len(METRIC_NAMES)
    assert topology.custom_metrics_always_on(alarms_mode) == 0
