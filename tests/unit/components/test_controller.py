"""ScalingController and the controller mode of the stack, under recording mocks.

Both modes of `scaling.mode` are built from the same config; the difference between
their graphs is pinned exactly, as are the IAM documents, the function's settings, the
schedule and the safety-net alarm. Mocks cannot prove AWS accepts the requests
(tests/unit/components/test_aws_requests.py checks their form against botocore's models).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from typing import Any

import pulumi

from components import controller as component
from tests.lib.aws_requests import record_platform
from tests.lib.pulumi_harness import ACCOUNT, REGION, RecordingMocks
from tests.lib.stack_support import PREBUILT, run_platform
from tts_fleet.config import topology
from tts_fleet.config.models import StackConfig
from tts_fleet.controller.settings import HANDLER, STATE_KEY, Settings
from tts_fleet.scaling.controller import ControllerParams

FUNCTION = "aws:lambda/function:Function"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
SCALING_POLICY = "aws:appautoscaling/policy:Policy"
NAME = "tts-fleet-dev-controller"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:tts-queue-jobs"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{NAME}"
BUCKET_ARN = "arn:aws:s3:::tts-outputs-bucket"
# `submit BOOK.epub` writes its book record (issue 25): PutObject on books/ only.
WRITE_BOOKS = {
    "Sid": "WriteBookRecords",
    "Effect": "Allow",
    "Action": "s3:PutObject",
    "Resource": f"{BUCKET_ARN}/books/*",
}


def build(mode: str, **scaling: Any) -> RecordingMocks:
    return run_platform({"worker": {"image": PREBUILT}, "scaling": {"mode": mode, **scaling}})


def named(mocks: RecordingMocks, type_token: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in mocks.of_type(type_token) if r.name == name]
    return found.inputs


def test_controller_mode_adds_the_function_and_keeps_only_the_safety_net() -> None:
    lam, alarms = Counter(build("controller").counts()), Counter(build("alarms").counts())
    assert lam - alarms == Counter(
        {
            "tts-fleet:controller:ScalingController": 1,
            "tts-fleet:autoscaling:SafetyNet": 1,
            FUNCTION: 1,
            "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig": 1,
            "aws:scheduler/schedule:Schedule": 1,
            "aws:cloudwatch/logGroup:LogGroup": 1,
            ROLE: 2,  # the function's and the scheduler's
            ROLE_POLICY: 2,
        }
    )
    # The two step policies and their alarms become one safety-net policy and alarm, and the
    # alarm on the function failing (Observability's) takes the other alarm's place in count.
    assert alarms - lam == Counter({"tts-fleet:autoscaling:StepScaling": 1, SCALING_POLICY: 1})
    assert sorted(a.name for a in build("controller").of_type(ALARM)) == [
        "tts-autoscaling-safety-net",
        "tts-observability-controller-failing",
        "tts-observability-dlq-messages",
        "tts-observability-oldest-job",
    ]


def test_the_scheduler_trust_names_the_arn_aws_gives_the_schedule() -> None:
    # API-shaped mocks: the schedule's ARN as the provider returns it, not as the code builds it.
    mocks = record_platform({"worker": {"image": PREBUILT}})
    [role] = [r for r in mocks.of_type(ROLE) if r.name == "tts-controller-scheduler-role"]
    [schedule] = [r for r in mocks.of_type("aws:scheduler/schedule:Schedule")]
    condition = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]
    given = mocks.outputs[schedule.name]["arn"]
    group = given.split(":schedule/")[0] + ":schedule-group/" + given.split("/")[1]
    assert condition["ArnEquals"]["aws:SourceArn"] == [group, given]


def test_alarms_mode_has_no_function_and_no_invoke_grant() -> None:
    mocks = build("alarms")
    assert mocks.of_type(FUNCTION) == []
    producer = json.loads(named(mocks, "aws:iam/policy:Policy", "tts-queue-producer")["policy"])
    assert producer["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
            "Resource": QUEUE_ARN,
        },
        WRITE_BOOKS,
    ]


def test_the_producer_policy_may_invoke_the_controller_only() -> None:
    inputs = named(build("controller"), "aws:iam/policy:Policy", "tts-queue-producer")
    producer = json.loads(inputs["policy"])
    assert producer == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
                "Resource": QUEUE_ARN,
            },
            {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": FUNCTION_ARN},
            WRITE_BOOKS,
        ],
    }


def test_the_function_role_is_scoped_to_this_queue_service_and_state_object() -> None:
    mocks = build("controller")
    trust = json.loads(named(mocks, ROLE, "tts-controller-role")["assumeRolePolicy"])
    assert trust == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "lambda.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    document = json.loads(named(mocks, ROLE_POLICY, "tts-controller-policy")["policy"])
    log_group = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:/aws/lambda/{NAME}"
    assert document == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadQueue",
                "Effect": "Allow",
                "Action": "sqs:GetQueueAttributes",
                "Resource": QUEUE_ARN,
            },
            {
                "Sid": "SizeService",
                "Effect": "Allow",
                "Action": ["ecs:DescribeServices", "ecs:UpdateService"],
                "Resource": f"arn:aws:ecs:{REGION}:{ACCOUNT}:service/"
                "tts-capacity-cluster/tts-worker-service",
            },
            {
                "Sid": "ReadTargetBounds",
                "Effect": "Allow",
                "Action": "application-autoscaling:DescribeScalableTargets",
                "Resource": "*",
            },
            {
                "Sid": "KeepState",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": f"{BUCKET_ARN}/{STATE_KEY}",
            },
            {
                "Sid": "FindState",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": BUCKET_ARN,
                "Condition": {"StringEquals": {"s3:prefix": STATE_KEY}},
            },
            {
                "Sid": "WriteLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"{log_group}:*",
            },
        ],
    }


def test_the_scheduler_invokes_this_function_every_minute_for_this_schedule_only() -> None:
    mocks = build("controller")
    trust = json.loads(named(mocks, ROLE, "tts-controller-scheduler-role")["assumeRolePolicy"])
    schedule_arn = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/{NAME}"
    group_arn = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/default"
    assert trust["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": ACCOUNT},
                # What Scheduler sends: the group's ARN (the schedule's own in old accounts).
                "ArnEquals": {"aws:SourceArn": [group_arn, schedule_arn]},
            },
        }
    ]
    grant = json.loads(named(mocks, ROLE_POLICY, "tts-controller-scheduler-policy")["policy"])
    function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:{NAME}"  # the mock's ARN format
    assert grant["Statement"] == [
        {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": function_arn}
    ]
    schedule = mocks.one("aws:scheduler/schedule:Schedule").inputs
    # Named like the function, so the trust above names it before it exists.
    assert (schedule["name"], schedule["groupName"]) == (NAME, "default")
    assert schedule["scheduleExpression"] == "rate(1 minute)"
    assert schedule["flexibleTimeWindow"] == {"mode": "OFF"}
    assert schedule["target"]["arn"] == function_arn
    assert schedule["target"]["retryPolicy"] == {
        "maximumRetryAttempts": 0,
        "maximumEventAgeInSeconds": 60,
    }
    invoke_config = mocks.one("aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig")
    assert invoke_config.inputs == {
        "functionName": NAME,
        "maximumEventAgeInSeconds": 60,
        "maximumRetryAttempts": 0,
    }


def test_the_function_runs_one_at_a_time_with_its_settings_from_the_config() -> None:
    mocks = build("controller", maxWorkers=9, coldStartWork=1.5)
    function = mocks.one(FUNCTION).inputs
    assert {k: function[k] for k in ("name", "runtime", "handler", "timeout")} == {
        "name": NAME,
        "runtime": "python3.12",
        "handler": HANDLER,
        "timeout": 60,
    }
    assert function["reservedConcurrentExecutions"] == 1
    settings = Settings.from_env(function["environment"]["variables"])
    cfg = StackConfig.from_raw({"scaling": {"maxWorkers": 9, "coldStartWork": 1.5}})
    assert settings == Settings(
        queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/tts-queue-jobs",
        cluster="tts-capacity-cluster",
        service="tts-worker-service",
        bucket="tts-outputs-bucket",
        stack="dev",
        params=topology.controller_params(cfg),
    )
    assert (settings.params.max_workers, settings.params.cold_start_work) == (9, 1.5)
    logs = named(mocks, "aws:cloudwatch/logGroup:LogGroup", "tts-controller-logs")
    assert logs == {"name": f"/aws/lambda/{NAME}", "retentionInDays": 30}


def test_the_safety_net_starts_one_worker_when_work_waits_with_none_running_or_wanted() -> None:
    mocks = build("controller")
    (step,) = mocks.of_type(SCALING_POLICY)
    assert step.inputs["stepScalingPolicyConfiguration"]["adjustmentType"] == "ExactCapacity"
    assert step.inputs["stepScalingPolicyConfiguration"]["stepAdjustments"] == [
        {"metricIntervalLowerBound": "0", "scalingAdjustment": 1}
    ]
    alarms = [a for a in mocks.of_type(ALARM) if a.name == "tts-autoscaling-safety-net"]
    (alarm,) = [a.inputs for a in alarms]
    assert (alarm["evaluationPeriods"], alarm["datapointsToAlarm"]) == (3, 3)
    assert (alarm["threshold"], alarm["comparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["treatMissingData"] == "notBreaching"
    assert alarm["alarmActions"] == [f"arn:aws:appautoscaling:{REGION}:{ACCOUNT}:{step.name}"]
    queries = {q["id"]: q for q in alarm["metricQueries"]}
    assert queries["stranded"]["expression"] == (
        "IF(visible >= 1 AND FILL(running, 0) == 0 AND FILL(desired, 0) == 0, 1, 0)"
    )
    assert queries["visible"]["metric"]["dimensions"] == {"QueueName": "tts-queue-jobs"}
    service = {"ClusterName": "tts-capacity-cluster", "ServiceName": "tts-worker-service"}
    for query_id, metric in (("running", "RunningTaskCount"), ("desired", "DesiredTaskCount")):
        assert queries[query_id]["metric"]["namespace"] == "ECS/ContainerInsights"
        assert queries[query_id]["metric"]["metricName"] == metric
        assert queries[query_id]["metric"]["dimensions"] == service


def test_the_safety_net_starts_min_workers_when_that_is_more() -> None:
    (step,) = build("controller", minWorkers=2, maxWorkers=5).of_type(SCALING_POLICY)
    steps = step.inputs["stepScalingPolicyConfiguration"]["stepAdjustments"]
    assert steps == [{"metricIntervalLowerBound": "0", "scalingAdjustment": 2}]


def test_function_names_are_valid_for_any_stack_name() -> None:
    assert component.function_name("tts-fleet", "dev") == NAME
    assert (
        component.function_name("tts-fleet", "org.team/prod")
        == "tts-fleet-org-team-prod-controller"
    )
    assert len(component.function_name("tts-fleet", "x" * 100)) == 64


def archive_bytes(archive: pulumi.AssetArchive) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for path, asset in archive.assets.items():
            zipped.write(asset.path, path)
    return buffer.getvalue()


def test_the_code_is_scaling_and_controller_only() -> None:
    names = sorted(component.code_archive().assets)
    assert "tts_fleet/__init__.py" in names
    assert "tts_fleet/controller/handler.py" in names
    assert "tts_fleet/scaling/controller.py" in names
    assert {name.split("/")[1] for name in names if name.count("/") == 2} == {
        "scaling",
        "controller",
    }
    assert not [name for name in names if "__pycache__" in name or not name.endswith(".py")]


def test_params_survive_the_environment() -> None:
    params = ControllerParams(
        min_workers=1,
        max_workers=3,
        jobs_per_worker=2,
        idle_minutes=7,
        cold_start_work=0.25,
        cold_start_s=600.0,
        seconds_per_job=1.5,
        concurrency=2,
        host_idle_s=120.0,
    )
    settings = Settings("q", "c", "s", "b", "dev", params)
    assert Settings.from_env(settings.to_env()) == settings


def test_the_dashboard_widget_graphs_the_metrics_the_handler_emits() -> None:
    from tts_fleet.controller.metrics import METRIC_NAMES, NAMESPACE

    title, lines, stat = component.dashboard_widget("dev")
    assert title and stat == "Maximum"
    assert [line[:2] for line in lines] == [[NAMESPACE, name] for name in METRIC_NAMES]
    assert all(line[2:4] == ["Stack", "dev"] for line in lines)
