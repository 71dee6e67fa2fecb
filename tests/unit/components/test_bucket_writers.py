"""BucketWriters: the output bucket's policy denies requests without TLS and names its writers.

Mocks cannot prove how S3 evaluates the policy; they pin the statements the program asks for.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pytest

from components.platform import Platform, PlatformArgs
from components.storage import OutputBucket, bucket_policy
from tests.lib.pulumi_harness import run_program, stack_config
from tests.lib.stack_support import PREBUILT, WORKER_DIR, policy, run_platform
from tts_fleet.config.models import StackConfig

BUCKET = "arn:aws:s3:::b"
TASK = "arn:aws:iam::123456789012:role/task"
CONTROLLER = "arn:aws:iam::123456789012:role/controller"
GLASS = "arn:aws:iam::123456789012:role/break-glass"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
TLS = {
    "Sid": "DenyInsecureTransport",
    "Effect": "Deny",
    "Principal": "*",
    "Action": "s3:*",
    "Resource": [BUCKET, f"{BUCKET}/*"],
    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
}


PUT_DELETE = ["s3:PutObject", "s3:DeleteObject"]


def deny(sid: str, actions: list[str], resource: str, writers: list[str]) -> dict[str, Any]:
    return {
        "Sid": sid,
        "Effect": "Deny",
        "Principal": "*",
        "Action": actions,
        "Resource": resource,
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": writers}},
    }


def outputs(*writers: str, bucket: str = BUCKET) -> dict[str, Any]:
    return deny("OnlyTheWorkerWritesOutputs", PUT_DELETE, f"{bucket}/outputs/*", list(writers))


def failures(*writers: str, bucket: str = BUCKET) -> dict[str, Any]:
    # Put only: `dlq redrive` deletes the failure records of the jobs it moves back.
    return deny(
        "OnlyTheWorkerWritesFailureRecords", ["s3:PutObject"], f"{bucket}/failures/*", list(writers)
    )


def state(*writers: str, bucket: str = BUCKET) -> dict[str, Any]:
    return deny(
        "OnlyTheControllerWritesItsState", PUT_DELETE, f"{bucket}/controller/*", list(writers)
    )


@pytest.mark.parametrize(
    ("controller", "glass", "statements"),
    [
        # Alarms mode: no controller, so no state to guard.
        (None, (), [TLS, outputs(TASK), failures(TASK)]),
        (CONTROLLER, (), [TLS, outputs(TASK), failures(TASK), state(CONTROLLER)]),
        (
            CONTROLLER,
            (GLASS,),
            [TLS, outputs(TASK, GLASS), failures(TASK, GLASS), state(CONTROLLER, GLASS)],
        ),
        (None, (GLASS,), [TLS, outputs(TASK, GLASS), failures(TASK, GLASS)]),
    ],
)
def test_the_policy_denies_every_writer_but_the_named_ones(
    controller: str | None, glass: tuple[str, ...], statements: list[dict[str, Any]]
) -> None:
    assert bucket_policy(BUCKET, TASK, controller, glass) == {
        "Version": "2012-10-17",
        "Statement": statements,
    }


def _graph_policy(raw: dict[str, Any]) -> dict[str, Any]:
    mocks = run_platform({"worker": {"image": PREBUILT}, **raw})
    [recorded] = [p for p in mocks.of_type(BUCKET_POLICY) if p.name == "tts-outputs-policy"]
    assert recorded.inputs["bucket"] == "tts-outputs-bucket-id"
    return policy(recorded)


def test_the_stack_names_its_task_role_controller_role_and_break_glass_roles() -> None:
    document = _graph_policy({"outputs": {"breakGlassPrincipalArns": [GLASS]}})
    bucket = "arn:aws:s3:::tts-outputs-bucket"
    # The recording mocks' ARN of a role: arn:aws:iam:<region>:<account>:<resource name>.
    task = "arn:aws:iam:us-east-1:123456789012:tts-worker-task-role"
    controller = "arn:aws:iam:us-east-1:123456789012:tts-controller-role"
    assert document["Statement"][1:] == [
        outputs(task, GLASS, bucket=bucket),
        failures(task, GLASS, bucket=bucket),
        state(controller, GLASS, bucket=bucket),
    ]
    assert document["Statement"][0]["Sid"] == "DenyInsecureTransport"


def test_alarms_mode_names_the_task_role_only() -> None:
    document = _graph_policy({"scaling": {"mode": "alarms"}})
    assert [s["Sid"] for s in document["Statement"]] == [
        "DenyInsecureTransport",
        "OnlyTheWorkerWritesOutputs",
        "OnlyTheWorkerWritesFailureRecords",
    ]


def placement(on_destroy: str) -> tuple[Any, list[Any], list[Any]]:
    """(retain_on_delete, alias parents, depends_on) of the outputs bucket's policy: resource
    options, so recorded by a stack transformation rather than from the mock's inputs."""
    seen: list[tuple[Any, list[Any], list[Any]]] = []

    def record(t: pulumi.ResourceTransformationArgs) -> None:
        if t.type_ == BUCKET_POLICY and t.name == "tts-outputs-policy":
            aliases = [a for a in t.opts.aliases or [] if isinstance(a, pulumi.Alias)]
            after = t.opts.depends_on
            seen.append(
                (
                    t.opts.retain_on_delete,
                    [a.parent for a in aliases],
                    list(after) if isinstance(after, list) else [after],
                )
            )

    raw = {"worker": {"image": PREBUILT}, "outputs": {"onDestroy": on_destroy}}
    config = StackConfig.from_raw(raw)

    def program() -> None:
        pulumi.runtime.register_stack_transformation(record)
        Platform("tts", PlatformArgs(config=config, stack="dev", worker_dir=str(WORKER_DIR)))

    run_program(program, stack_config(raw))
    [found] = seen
    return found


@pytest.mark.parametrize(("on_destroy", "retained"), [("retain", True), ("delete", False)])
def test_the_policy_keeps_its_place_in_state_and_follows_on_destroy(
    on_destroy: str, retained: bool
) -> None:
    retain, parents, after = placement(on_destroy)
    assert retain is retained
    # Aliased to its old parent, OutputBucket, so `pulumi up` updates it in place.
    assert len(parents) == 1 and isinstance(parents[0], OutputBucket)
    # S3 rejects a policy change while Block Public Access is being applied.
    assert len(after) == 1 and isinstance(after[0], aws.s3.BucketPublicAccessBlock)
