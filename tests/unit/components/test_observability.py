"""Observability under recording mocks, and its pure helpers table-driven.

What a mock cannot prove: that SNS, KMS, CloudWatch and Budgets accept these requests (the
key and topic policies, the dashboard body's schema, the budget's tag filter); that is
`pulumi preview`/`up` against AWS. These tests pin what the engine would send.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from components.controller import dashboard_widget
from components.observability import (
    Observability,
    ObservabilityArgs,
    budget_filter_value,
    dashboard_body,
    dashboard_name,
    dashboard_url,
)
from components.stack_config import load_stack_config
from tests.lib.pulumi_harness import ACCOUNT, REGION, RecordingMocks, run_program, stack_config
from tests.lib.stack_support import PREBUILT, run_platform

COMPONENT = "tts-fleet:observability:Observability"
KEY = "aws:kms/key:Key"
TOPIC = "aws:sns/topic:Topic"
TOPIC_POLICY = "aws:sns/topicPolicy:TopicPolicy"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
DASHBOARD = "aws:cloudwatch/dashboard:Dashboard"
BUDGET = "aws:budgets/budget:Budget"
TOPIC_ARN = f"arn:aws:sns:{REGION}:{ACCOUNT}:obs-alerts"


def run(config: dict[str, Any], stack: str = "dev") -> tuple[RecordingMocks, dict[str, str]]:
    outputs: dict[str, str] = {}

    def program() -> None:
        cfg = load_stack_config()
        component = Observability(
            "obs",
            ObservabilityArgs(
                stack=stack,
                region=REGION,
                queue_name=pulumi.Output.from_input("tts-jobs"),
                dlq_name="tts-dlq",
                cluster_name="tts-cluster",
                service_name="tts-workers",
                alerts=cfg.alerts,
            ),
        )
        component.dashboard_url.apply(lambda url: outputs.setdefault("dashboard_url", url))
        component.alerts_topic_arn.apply(lambda arn: outputs.setdefault("topic", arn))

    return run_program(program, config, stack), outputs


def alarm(mocks: RecordingMocks, name: str) -> dict[str, Any]:
    (found,) = [r for r in mocks.of_type(ALARM) if r.name == name]
    return found.inputs


def test_default_resources_and_outputs() -> None:
    mocks, outputs = run({})
    assert mocks.counts() == {
        COMPONENT: 1, KEY: 1, TOPIC: 1, TOPIC_POLICY: 1, ALARM: 2, DASHBOARD: 1
    }  # fmt: skip
    assert outputs == {
        "dashboard_url": "https://us-east-1.console.aws.amazon.com/cloudwatch/home"
        "?region=us-east-1#dashboards:name=tts-fleet-dev-us-east-1",
        "topic": TOPIC_ARN,
    }


def test_topic_is_encrypted_with_a_key_alarms_and_budgets_may_use() -> None:
    mocks, _ = run({})
    key = mocks.one(KEY).inputs
    assert key["enableKeyRotation"] is True
    statements = {s["Sid"]: s for s in json.loads(key["policy"])["Statement"]}
    publish = statements["AlarmsAndBudgetsPublish"]
    assert publish["Principal"] == {
        "Service": ["cloudwatch.amazonaws.com", "budgets.amazonaws.com"]
    }
    assert publish["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert publish["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    assert statements["AccountAdministers"]["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    assert mocks.one(TOPIC).inputs == {
        "kmsMasterKeyId": f"arn:aws:kms:{REGION}:{ACCOUNT}:obs-alerts-key"
    }
    policy = mocks.one(TOPIC_POLICY).inputs
    assert policy["arn"] == TOPIC_ARN
    topic_statements = {s["Sid"]: s for s in json.loads(policy["policy"])["Statement"]}
    assert topic_statements["AlarmsAndBudgetsPublish"]["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT}
    }
    deny = topic_statements["DenyInsecureTransport"]
    assert (deny["Effect"], deny["Resource"]) == ("Deny", TOPIC_ARN)


def test_email_subscription_only_when_configured() -> None:
    mocks, _ = run(stack_config({"alerts": {"email": "oncall@example.com"}}))
    assert mocks.one(SUBSCRIPTION).inputs == {
        "topic": TOPIC_ARN,
        "protocol": "email",
        "endpoint": "oncall@example.com",
    }
    assert run({})[0].of_type(SUBSCRIPTION) == []


def test_dlq_alarm_fires_on_any_visible_message() -> None:
    mocks, _ = run({})
    assert alarm(mocks, "obs-dlq-messages") == {
        "alarmDescription": "A job reached the dead-letter queue: `tts-fleet dlq list` shows why",
        "namespace": "AWS/SQS",
        "metricName": "ApproximateNumberOfMessagesVisible",
        "dimensions": {"QueueName": "tts-dlq"},
        "statistic": "Maximum",
        "period": 60,
        "evaluationPeriods": 1,
        "threshold": 1,
        "comparisonOperator": "GreaterThanOrEqualToThreshold",
        "treatMissingData": "notBreaching",
        "alarmActions": [TOPIC_ARN],
        "okActions": [TOPIC_ARN],
    }


@pytest.mark.parametrize(("config", "seconds"), [({}, 3600), ({"maxQueueAgeMinutes": 15}, 900)])
def test_oldest_message_alarm_threshold_follows_config(config: dict, seconds: int) -> None:
    mocks, _ = run(stack_config({"alerts": config}) if config else {})
    age = alarm(mocks, "obs-oldest-job")
    assert age["metricName"] == "ApproximateAgeOfOldestMessage"
    assert age["dimensions"] == {"QueueName": "tts-jobs"}
    assert age["threshold"] == seconds
    assert age["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert age["alarmActions"] == [TOPIC_ARN]


def test_budget_filters_on_the_stack_cost_tag_and_notifies_at_80_and_100_percent() -> None:
    mocks, _ = run(stack_config({"alerts": {"monthlyBudgetUsd": 750}}), stack="prod")
    budget = mocks.one(BUDGET).inputs
    assert budget["budgetType"] == "COST"
    assert budget["timeUnit"] == "MONTHLY"
    assert (budget["limitAmount"], budget["limitUnit"]) == ("750.00", "USD")
    assert budget["costFilters"] == [
        {"name": "TagKeyValue", "values": ["user:tts-fleet:stack$prod"]}
    ]
    assert [
        (n["threshold"], n["thresholdType"], n["notificationType"], n["comparisonOperator"])
        for n in budget["notifications"]
    ] == [
        (80, "PERCENTAGE", "ACTUAL", "GREATER_THAN"),
        (100, "PERCENTAGE", "ACTUAL", "GREATER_THAN"),
    ]
    assert all(n["subscriberSnsTopicArns"] == [TOPIC_ARN] for n in budget["notifications"])
    assert run({})[0].of_type(BUDGET) == []


def test_dashboard_resource_carries_the_helper_body() -> None:
    mocks, _ = run({})
    board = mocks.one(DASHBOARD).inputs
    assert board["dashboardName"] == "tts-fleet-dev-us-east-1"
    expected = dashboard_body(REGION, "tts-jobs", "tts-dlq", "tts-cluster", "tts-workers", "dev")
    assert board["dashboardBody"] == expected


def test_two_stacks_dashboards_read_only_their_own_worker_series() -> None:
    bodies = {stack: run({}, stack)[0].one(DASHBOARD).inputs for stack in ("dev", "prod")}
    assert [b["dashboardName"] for b in bodies.values()] == [
        "tts-fleet-dev-us-east-1",
        "tts-fleet-prod-us-east-1",
    ]
    for stack, board in bodies.items():
        own = [r for r in metric_rows(board["dashboardBody"]) if r[0] == "TtsFleet"]
        assert len(own) == 10
        assert {tuple(r[2:4]) for r in own} == {("Stack", stack)}


def metric_rows(body: str) -> list[list]:
    return [row for w in json.loads(body)["widgets"] for row in w["properties"]["metrics"]]


def test_dashboard_body_is_valid_json_naming_the_queues_and_the_service() -> None:
    body = dashboard_body("eu-west-1", "jobs-q", "dlq-q", "gpu-cluster", "workers", "prod")
    document = json.loads(body)
    assert len(document["widgets"]) == 9
    assert {w["properties"]["region"] for w in document["widgets"]} == {"eu-west-1"}
    rows = metric_rows(body)
    assert [
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        "QueueName",
        "jobs-q",
        {"id": "visible"},
    ] in rows
    assert [
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        "QueueName",
        "dlq-q",
        {"label": "DLQ"},
    ] in rows
    assert [
        {"expression": "visible + notVisible", "label": "Outstanding", "id": "outstanding"}
    ] in rows
    ecs = [r[:6] for r in rows if r[0] == "ECS/ContainerInsights"]
    assert [
        "ECS/ContainerInsights",
        "DesiredTaskCount",
        "ClusterName",
        "gpu-cluster",
        "ServiceName",
        "workers",
    ] in ecs
    assert [
        "ECS/ContainerInsights",
        "RunningTaskCount",
        "ClusterName",
        "gpu-cluster",
        "ServiceName",
        "workers",
    ] in ecs
    # The worker's EMF metrics carry one dimension, Stack: namespace, name, Stack, the stack's
    # name, options.
    own = {r[1] for r in rows if r[0] == "TtsFleet"}
    assert own == {
        "JobsCompleted",
        "JobsFailed",
        "SynthSeconds",
        "AudioSeconds",
        "QueueWaitSeconds",
        "PiecesChecked",
        "PiecesRejected",
        "JobsFailedOnQuality",
    }
    # The cold start's series carry the instance type, unknown at deploy: one search of this
    # stack's phases (tts-fleet coldstart reads the same metric, worker/coldstart.py writes it).
    assert [
        {
            "expression": "SEARCH('{TtsFleet,Stack,Phase,InstanceType}"
            ' MetricName="ColdStartSeconds" Stack="prod" NOT Phase="total"\', \'p50\', 60)',
            "label": "",
            "id": "coldStart",
        }
    ] in rows
    # The measured throughput, per instance type (worker/throughput.py writes it).
    assert [
        {
            "expression": "SEARCH('{TtsFleet,Stack,InstanceType}"
            ' MetricName="AudioSecondsPerSecond" Stack="prod"\', \'Average\', 60)',
            "label": "",
            "id": "throughput",
        }
    ] in rows
    assert all(
        len(r) == 5 and r[2:4] == ["Stack", "prod"] and isinstance(r[4], dict)
        for r in rows
        if r[0] == "TtsFleet"
    )


def test_dashboard_widgets_tile_without_overlap() -> None:
    widgets = json.loads(dashboard_body("us-east-1", "q", "d", "c", "s", "dev"))["widgets"]
    cells = {(w["x"], w["y"]) for w in widgets}
    assert len(cells) == len(widgets)
    assert all(w["x"] + w["width"] <= 24 for w in widgets)


@pytest.mark.parametrize(
    ("stack", "name"),
    [
        ("dev", "tts-fleet-dev-eu-west-1"),
        ("org.prod", "tts-fleet-org-prod-eu-west-1"),
        ("a_b", "tts-fleet-a_b-eu-west-1"),
    ],
)
def test_dashboard_name_is_a_valid_cloudwatch_name(stack: str, name: str) -> None:
    assert dashboard_name(stack, "eu-west-1") == name
    assert dashboard_url("eu-west-1", name) == (
        "https://eu-west-1.console.aws.amazon.com/cloudwatch/home"
        f"?region=eu-west-1#dashboards:name={name}"
    )


def test_budget_filter_value_uses_the_user_tag_format() -> None:
    assert budget_filter_value("dev") == "user:tts-fleet:stack$dev"


def test_in_controller_mode_the_dashboard_graphs_its_decisions_for_this_stack_only() -> None:
    from tts_fleet.controller.metrics import METRIC_NAMES, NAMESPACE, STACK_DIMENSION

    def controller_lines(body: str) -> list[list]:
        widgets = json.loads(body)["widgets"]
        return [
            line for w in widgets for line in w["properties"]["metrics"]
            if line[:1] == [NAMESPACE] and str(line[1]).startswith("Controller")
        ]  # fmt: skip

    widget = dashboard_widget("dev")
    on = controller_lines(dashboard_body("us-east-1", "q", "d", "c", "s", "dev", widget))
    assert sorted(line[1] for line in on) == sorted(METRIC_NAMES)
    assert all(line[2:4] == [STACK_DIMENSION, "dev"] for line in on)
    assert controller_lines(dashboard_body("us-east-1", "q", "d", "c", "s", "dev")) == []


# ---- the scaling controller's alarm --------------------------------------------------------


def _lambda_sum(metric: str, function: str) -> dict[str, Any]:
    return {
        "id": metric.lower(),
        "returnData": False,
        "metric": {
            "namespace": "AWS/Lambda",
            "metricName": metric,
            "dimensions": {"FunctionName": function},
            "period": 300,
            "stat": "Sum",
        },
    }


def test_controller_mode_alarms_when_the_function_fails_or_cannot_run() -> None:
    mocks = run_platform({"worker": {"image": PREBUILT}}, stack="dev")
    function = "tts-fleet-dev-controller"
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT}:tts-observability-alerts"
    assert alarm(mocks, "tts-observability-controller-failing") == {
        "alarmDescription": "The scaling controller failed or could not run: the worker count"
        " is stuck where it was. Its log group says why.",
        "metricQueries": [
            _lambda_sum("Errors", function),
            _lambda_sum("Throttles", function),
            _lambda_sum("Invocations", function),
            {
                "id": "failures",
                # Every error; throttles only in a window where it never ran (a submit's wake
                # while it runs is throttled by design: reserved concurrency 1).
                "expression": "FILL(errors, 0) + IF(FILL(invocations, 0) == 0,"
                " FILL(throttles, 0), 0)",
                "label": "Failed or unable to run",
                "returnData": True,
            },
        ],
        "evaluationPeriods": 1,
        "threshold": 1,
        "comparisonOperator": "GreaterThanOrEqualToThreshold",
        "treatMissingData": "notBreaching",
        "alarmActions": [topic],
        "okActions": [topic],
    }


def test_alarms_mode_has_no_controller_and_no_controller_alarm() -> None:
    mocks = run_platform({"worker": {"image": PREBUILT}, "scaling": {"mode": "alarms"}})
    assert [a.name for a in mocks.of_type(ALARM) if "controller" in a.name] == []
