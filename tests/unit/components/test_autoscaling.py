"""ScalableTarget and StepScaling (the alarms mode) under recording mocks, built from the
stack config entry point.

What a mock cannot prove: that Application Auto Scaling and CloudWatch accept these requests
(step bounds, metric math, alarm actions); that is `pulumi preview`/`up` against AWS. These
tests pin exactly what the engine would send: counts and inputs per type token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components.autoscaling import (
    ModeArgs,
    ScalableTarget,
    ScalableTargetArgs,
    StepScaling,
)
from components.stack_config import load_stack_config
from tests.lib.pulumi_harness import RecordingMocks, run_program, stack_config
from tts_fleet.config.models import ConfigError, StackConfig
from tts_fleet.scaling.bands import bands

ROOT = Path(__file__).resolve().parents[3]
TARGET = "aws:appautoscaling/target:Target"
POLICY = "aws:appautoscaling/policy:Policy"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
SCHEDULE = "aws:appautoscaling/scheduledAction:ScheduledAction"
TARGET_COMPONENT = "tts-fleet:autoscaling:QueueAutoscaling"  # the token stack state holds
STEP_SCALING = "tts-fleet:autoscaling:StepScaling"


def stack_file_config(stack: str) -> dict[str, Any]:
    """The engine config map of a checked-in stack file (what `pulumi up -s <stack>` sees)."""
    document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(document["config"])


def program() -> None:
    cfg = load_stack_config()
    service = pulumi.Output.from_input("tts-workers")
    target = ScalableTarget(
        "fleet",
        ScalableTargetArgs(cluster_name="tts-cluster", service_name=service, scaling=cfg.scaling),
    )
    on_target = ModeArgs(
        target=target,
        queue_name="tts-jobs",
        cluster_name="tts-cluster",
        service_name=service,
        scaling=cfg.scaling,
    )
    StepScaling("fleet", on_target, opts=pulumi.ResourceOptions(parent=target))


def run(config: dict[str, Any]) -> RecordingMocks:
    """The alarms design (`scaling.mode: alarms`), which these tests pin; controller
    mode's safety net is in test_controller.py."""
    return run_program(program, path_set(config, "scaling", "mode", "alarms"))


def by_name(mocks: RecordingMocks, type_token: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in mocks.of_type(type_token) if r.name == name]
    return found.inputs


def expected_steps(cfg: StackConfig) -> list[dict[str, Any]]:
    """bands() in the provider's wire shape, written independently of the component."""
    steps = []
    for band in bands(cfg.scaling).bands:
        step: dict[str, Any] = {
            "metricIntervalLowerBound": str(band.lower),
            "scalingAdjustment": band.capacity,
        }
        if band.upper is not None:
            step["metricIntervalUpperBound"] = str(band.upper)
        steps.append(step)
    return steps


@pytest.mark.parametrize(
    "config",
    [
        stack_file_config("dev"),
        stack_file_config("prod"),
        stack_config({"scaling": {"maxWorkers": 200, "jobsPerWorker": 4}}),
        stack_config({"scaling": {"minWorkers": 2, "maxWorkers": 6}}),
    ],
    ids=["dev", "prod", "max200", "min2"],
)
def test_scale_out_policy_steps_are_the_bands(config: dict[str, Any]) -> None:
    mocks = run(config)
    cfg = StackConfig.from_raw(
        {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("tts-fleet:")}
    )
    policy = by_name(mocks, POLICY, "fleet-scale-out")
    assert policy["policyType"] == "StepScaling"
    conf = policy["stepScalingPolicyConfiguration"]
    assert conf["adjustmentType"] == "ExactCapacity"
    assert conf["metricAggregationType"] == "Maximum"
    assert conf["stepAdjustments"] == expected_steps(cfg)
    assert len(conf["stepAdjustments"]) <= 20


def test_exact_resources_and_target_follows_config() -> None:
    mocks = run(stack_config({"scaling": {"minWorkers": 1, "maxWorkers": 7}}))
    # No target tracking / CPU policy: exactly two step policies and two alarms (DESIGN §4).
    assert mocks.counts() == {TARGET_COMPONENT: 1, STEP_SCALING: 1, TARGET: 1, POLICY: 2, ALARM: 2}
    assert mocks.one(TARGET).inputs == {
        "serviceNamespace": "ecs",
        "scalableDimension": "ecs:service:DesiredCount",
        "resourceId": "service/tts-cluster/tts-workers",
        "minCapacity": 1,
        "maxCapacity": 7,
    }
    for policy in mocks.of_type(POLICY):
        assert policy.inputs["resourceId"] == "service/tts-cluster/tts-workers"
        assert policy.inputs["policyType"] == "StepScaling"


def expected_queries(queue: str) -> list[dict[str, Any]]:
    def metric(query_id: str, name: str) -> dict[str, Any]:
        return {
            "id": query_id,
            "returnData": False,
            "metric": {
                "namespace": "AWS/SQS",
                "metricName": name,
                "dimensions": {"QueueName": queue},
                "period": 60,
                "stat": "Maximum",
            },
        }

    return [
        metric("visible", "ApproximateNumberOfMessagesVisible"),
        metric("notVisible", "ApproximateNumberOfMessagesNotVisible"),
        {
            "id": "outstanding",
            "expression": "visible + notVisible",
            "label": "Outstanding jobs",
            "returnData": True,
        },
    ]


def test_scale_out_alarm_sums_visible_and_in_flight_of_the_jobs_queue() -> None:
    mocks = run({})
    alarm = by_name(mocks, ALARM, "fleet-scale-out")
    assert alarm["metricQueries"] == expected_queries("tts-jobs")
    assert [q["returnData"] for q in alarm["metricQueries"]].count(True) == 1
    assert alarm["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["threshold"] == 1
    assert (alarm["evaluationPeriods"], alarm["datapointsToAlarm"]) == (1, 1)
    assert alarm["treatMissingData"] == "notBreaching"
    # The mock's ARN for the policy resource; the alarm must invoke that policy.
    assert alarm["alarmActions"] == [
        "arn:aws:appautoscaling:us-east-1:123456789012:fleet-scale-out"
    ]


@pytest.mark.parametrize(("idle_minutes", "min_workers"), [(5, 0), (17, 0), (1440, 2)])
def test_idle_alarm_waits_idle_minutes_then_sets_min_workers(
    idle_minutes: int, min_workers: int
) -> None:
    scaling = {"idleMinutes": idle_minutes, "minWorkers": min_workers, "maxWorkers": 4}
    mocks = run(stack_config({"scaling": scaling}))
    alarm = by_name(mocks, ALARM, "fleet-idle")
    assert alarm["metricQueries"] == expected_queries("tts-jobs")
    assert alarm["evaluationPeriods"] == idle_minutes
    assert alarm["datapointsToAlarm"] == idle_minutes
    assert alarm["comparisonOperator"] == "LessThanOrEqualToThreshold"
    assert alarm["threshold"] == 0
    assert alarm["treatMissingData"] == "breaching"
    assert alarm["alarmActions"] == ["arn:aws:appautoscaling:us-east-1:123456789012:fleet-idle"]
    idle = by_name(mocks, POLICY, "fleet-idle")["stepScalingPolicyConfiguration"]
    assert idle["adjustmentType"] == "ExactCapacity"
    assert idle["stepAdjustments"] == [
        {"metricIntervalUpperBound": "0", "scalingAdjustment": min_workers}
    ]


def test_one_scheduled_action_per_schedule() -> None:
    mocks = run(stack_file_config("prod"))
    actions = sorted(mocks.of_type(SCHEDULE), key=lambda r: r.name)
    assert [a.name for a in actions] == ["fleet-schedule-0", "fleet-schedule-1"]
    base = {
        "serviceNamespace": "ecs",
        "scalableDimension": "ecs:service:DesiredCount",
        "resourceId": "service/tts-cluster/tts-workers",
    }
    assert [a.inputs for a in actions] == [
        {
            **base,
            "schedule": "cron(0 8 ? * MON-FRI *)",
            "scalableTargetAction": {"minCapacity": 1, "maxCapacity": 40},
        },
        {
            **base,
            "schedule": "cron(0 19 ? * MON-FRI *)",
            "scalableTargetAction": {"minCapacity": 0, "maxCapacity": 40},
        },
    ]
    assert run(stack_file_config("dev")).of_type(SCHEDULE) == []


def path_set(config: dict[str, Any], section: str, field: str, value: Any) -> dict[str, Any]:
    """What `pulumi config set --path tts-fleet:<section>.<field> <value>` does to the map."""
    changed = dict(config)
    key = f"tts-fleet:{section}"
    changed[key] = {**config.get(key, {}), field: value}
    return changed


def test_setting_max_workers_12_changes_only_the_target_max_and_the_bands() -> None:
    baseline_config = stack_file_config("dev")
    baseline = run(baseline_config)
    changed = run(path_set(baseline_config, "scaling", "maxWorkers", 12))
    before = {(r.type, r.name): r.inputs for r in baseline.resources}
    after = {(r.type, r.name): r.inputs for r in changed.resources}
    assert before.keys() == after.keys()
    differences = {
        (token, name, field)
        for (token, name), inputs in before.items()
        for field in inputs.keys() | after[(token, name)].keys()
        if inputs.get(field) != after[(token, name)].get(field)
    }
    assert differences == {
        (TARGET, "fleet-target", "maxCapacity"),
        (POLICY, "fleet-scale-out", "stepScalingPolicyConfiguration"),
    }
    assert after[(TARGET, "fleet-target")]["maxCapacity"] == 12
    new_conf = after[(POLICY, "fleet-scale-out")]["stepScalingPolicyConfiguration"]
    old_conf = before[(POLICY, "fleet-scale-out")]["stepScalingPolicyConfiguration"]
    assert {k for k in new_conf if new_conf[k] != old_conf[k]} == {"stepAdjustments"}
    assert len(new_conf["stepAdjustments"]) == 12
    assert new_conf["stepAdjustments"][-1] == {
        "metricIntervalLowerBound": str(11 * 8),
        "scalingAdjustment": 12,
    }


@pytest.mark.parametrize(
    ("scaling", "line"),
    [
        ({"idleMinutes": 0}, "tts-fleet:scaling.idleMinutes: must be >= 1 (got 0)"),
        ({"idleMinutes": 2000}, "tts-fleet:scaling.idleMinutes: must be <= 1440 (got 2000)"),
        ({"jobsPerWorker": 0}, "tts-fleet:scaling.jobsPerWorker: must be >= 1 (got 0)"),
        (
            {
                "schedules": [
                    {"cron": "0 8 ? * MON-FRI *", "minWorkers": 1, "maxWorkers": 4},
                    {"cron": "0 8 * *", "minWorkers": 0, "maxWorkers": 4},
                ]
            },
            "tts-fleet:scaling.schedules[1].cron: must have 6 fields (minutes hours "
            "day-of-month month day-of-week year), got 4 in '0 8 * *'; "
            "e.g. 'cron(0 8 ? * MON-FRI *)'",
        ),
        (
            {"schedules": [{"cron": "0 25 ? * MON-FRI *", "minWorkers": 0, "maxWorkers": 4}]},
            "tts-fleet:scaling.schedules[0].cron: hour 25 is outside 0-23 in '0 25 ? * MON-FRI *'",
        ),
        (
            {"schedules": [{"cron": "0 8 ? * MON-FRI *", "minWorkers": 3, "maxWorkers": 2}]},
            "tts-fleet:scaling.schedules[0].maxWorkers: must be >= minWorkers (2 < 3)",
        ),
        (
            {"schedules": [{"cron": "0 8 ? * MON-FRI *", "minWorkers": 0, "maxWorkers": 9}]},
            "tts-fleet:scaling.schedules[0].maxWorkers: must be <= scaling.maxWorkers (9 > 4)",
        ),
    ],
)
def test_invalid_scaling_input_is_one_line_naming_the_key(
    scaling: dict[str, Any], line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        StackConfig.from_raw({"scaling": scaling})
    assert raised.value.problems == [line]


def test_invalid_config_through_the_entry_point_raises_the_same_line() -> None:
    with pytest.raises(ConfigError, match=r"tts-fleet:scaling\.idleMinutes: must be <= 1440"):
        run(stack_config({"scaling": {"idleMinutes": 2000}}))
