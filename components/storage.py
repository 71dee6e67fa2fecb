"""OutputBucket: where audio, manifests and failure records land (DESIGN §3.3).

Private by construction: Block Public Access on all four settings, BucketOwnerEnforced (ACLs
off), SSE-S3 with a bucket key, and a lifecycle rule that expires objects after
`outputs.expireDays` (0 = keep forever), and a bucket policy that denies any request without
TLS. With `policy: named-writers` (the stack's outputs bucket) that policy also names who may
write: BucketWriters (below) attaches it once the writers' roles exist, since their policies
need this bucket's ARN and it needs theirs.

`outputs.onDestroy` decides what `pulumi destroy` does with it. `delete`: `force_destroy`, so
the provider empties the bucket (every object) and deletes it; S3 refuses to delete a bucket
that holds anything. `retain`: the bucket and its settings are `retain_on_delete`, so destroy
removes them from the stack but leaves them in AWS, still private, encrypted and expiring.

With `reader_policy`, a managed policy that reads what the worker writes (`outputs/`,
`failures/`) and the book records producers write (`books/`): what `tts-fleet wait` and
`results` need besides the producer policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs, StrInput
from components.iam import deny_insecure_transport
from tts_fleet.controller.settings import STATE_KEY
from tts_fleet.scaling.batches import BATCHES_PREFIX, FORECASTS_KEY
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX, VOICES_PREFIX
from worker.settings import CACHE_PREFIX

# Incomplete multipart uploads (an interrupted large upload) are billed until aborted.
ABORT_MULTIPART_DAYS = 1


class OutputBucketArgs(ComponentArgs):
    expire_days: int = Field(ge=0)
    on_destroy: Literal["retain", "delete"] = "retain"
    reader_policy: bool = False
    # `named-writers`: the policy comes later, from BucketWriters, with the writers' ARNs.
    policy: Literal["tls-only", "named-writers"] = "tls-only"


class OutputBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    bucket_id: pulumi.Output[str]
    public_access_block: aws.s3.BucketPublicAccessBlock
    retain: bool
    policy_name: str
    reader_policy_arn: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: OutputBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:storage:OutputBucket", name, None, opts)
        retain = args.on_destroy == "retain"
        # Retained, the bucket keeps its settings too: without them a left-behind bucket would
        # lose Block Public Access, TLS-only and, worst, its expiry rule (it would grow forever).
        child = pulumi.ResourceOptions(parent=self, retain_on_delete=retain)
        bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=not retain, opts=child)
        block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse",
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"},
                    "bucket_key_enabled": True,
                }
            ],
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=self._lifecycle_rules(args.expire_days),
            opts=child,
        )
        self.bucket_name, self.bucket_arn = bucket.bucket, bucket.arn
        # What attach_policy needs, here or from BucketWriters.
        self.bucket_id, self.public_access_block, self.retain = bucket.id, block, retain
        self.policy_name = f"{name}-policy"
        if args.policy == "tls-only":
            attach_policy(self, bucket.arn.apply(tls_only_policy), owner=self)
        self.reader_policy_arn = None
        if args.reader_policy:
            reader = aws.iam.Policy(
                f"{name}-reader",
                description="Read this tts-fleet stack's outputs and failure records",
                policy=pulumi.Output.json_dumps(reader_policy(bucket.arn)),
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.reader_policy_arn = reader.arn
        self.register_outputs({"bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn})

    @staticmethod
    def _lifecycle_rules(
        expire_days: int,
    ) -> list[aws.s3.BucketLifecycleConfigurationRuleArgsDict]:
        rules: list[aws.s3.BucketLifecycleConfigurationRuleArgsDict] = [
            {
                "id": "abort-incomplete-uploads",
                "status": "Enabled",
                "filter": {},
                "abort_incomplete_multipart_upload": {
                    "days_after_initiation": ABORT_MULTIPART_DAYS
                },
            }
        ]
        if expire_days > 0:
            rules.append(
                {
                    "id": "expire-outputs",
                    "status": "Enabled",
                    "filter": {},
                    "expiration": {"days": expire_days},
                }
            )
        return rules


# `tts-fleet submit BOOK.epub` writes books/<book>.json and its cover there (the producer
# policy's WriteBookRecords), `results --book` reads them (the reader policy). The prefix of
# tts_fleet/client/book_record.py, which components may not import: tests/integration/repo/
# test_contracts.py pins the two equal.
BOOKS_PREFIX = "books/"
READ_PREFIXES = (OUTPUTS_PREFIX, FAILURES_PREFIX, BOOKS_PREFIX)


def book_writer_statement(bucket_arn: pulumi.Input[str]) -> dict:
    """PutObject on books/ only: a producer's book records and covers."""
    return {
        "Sid": "WriteBookRecords",
        "Effect": "Allow",
        "Action": "s3:PutObject",
        "Resource": pulumi.Output.from_input(bucket_arn).apply(_under(BOOKS_PREFIX)),
    }


def reader_policy(bucket_arn: pulumi.Input[str]) -> dict:
    """GetObject (and so HEAD) on outputs/, failures/ and books/, and ListBucket: what `wait`
    and `results` call (ListObjectsV2 on those prefixes, GetObject, download); GetObject on the
    batch records and the controller's forecasts, which `status` and `wait` show."""
    arn = pulumi.Output.from_input(bucket_arn)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadOutputs",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": [arn.apply(_under(prefix)) for prefix in READ_PREFIXES],
            },
            {
                # Deadline batches (issue #23): what `status` and `wait` show of them.
                "Sid": "ReadBatches",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": [arn.apply(_under(BATCHES_PREFIX)), arn.apply(_key(FORECASTS_KEY))],
            },
            {
                # `tts-fleet voices list` and `preview` read the voice library.
                "Sid": "ReadVoices",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": arn.apply(_under(VOICES_PREFIX)),
            },
            {
                # As the task role's SeeOwnOutputs: no s3:prefix condition, so a GET of a key
                # not yet written answers 404 (not 403); the bucket holds only these prefixes.
                "Sid": "ListOutputs",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": arn,
            },
        ],
    }


def _key(key: str) -> Callable[[str], str]:
    """One key of a bucket, from its ARN."""
    return lambda bucket_arn: f"{bucket_arn}/{key}"


def _under(prefix: str) -> Callable[[str], str]:
    """The keys under `prefix` of a bucket, from its ARN."""
    return lambda arn: f"{arn}/{prefix}*"


# ---- the bucket policy: TLS only, and named writers ----------------------------------------
#
# IAM allows; the bucket policy also denies. Without the writers named, any principal of the
# account whose own policy allows `s3:PutObject` on `*` (admins, CI, other apps) could plant
# `outputs/` keys, forge `failures/` records or the controller's state. So `s3:PutObject` and
# `s3:DeleteObject` are denied on `outputs/*`, and `s3:PutObject` on `failures/*`, unless
# `aws:PrincipalArn` is the worker task role; both on `controller/*` unless it is the
# controller role (controller mode only). The principals in `outputs.breakGlassPrincipalArns`
# are exempt from all three. Deleting a failure record stays with IAM: `tts-fleet dlq
# redrive` deletes those of the jobs it moves back, with the operator's own credentials, so
# that `wait` sees them pending again; a deletion can only make a failed job look pending.
# `aws:PrincipalArn` of an assumed-role session is its role's ARN, so every task and every
# invocation matches. S3 lifecycle expiry is not a request, so the deny does not stop it.

WRITE_ACTIONS = ["s3:PutObject", "s3:DeleteObject"]
CONTROLLER_PREFIX = STATE_KEY.split("/")[0] + "/"


def tls_only_policy(bucket_arn: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [deny_insecure_transport([bucket_arn, f"{bucket_arn}/*"], "s3:*")],
    }


def _deny_others(sid: str, actions: list[str], resource: str, writers: list[str]) -> dict:
    return {
        "Sid": sid,
        "Effect": "Deny",
        "Principal": "*",
        "Action": actions,
        "Resource": resource,
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": writers}},
    }


def bucket_policy(
    bucket_arn: str,
    task_role_arn: str,
    controller_role_arn: str | None,
    break_glass: tuple[str, ...] = (),
    cache_writer: bool = False,
) -> dict:
    """TLS only; the worker alone writes its prefixes, the controller alone its state."""
    worker = [task_role_arn, *break_glass]
    document = tls_only_policy(bucket_arn)
    document["Statement"] += [
        _deny_others(
            "OnlyTheWorkerWritesOutputs", WRITE_ACTIONS, f"{bucket_arn}/{OUTPUTS_PREFIX}*", worker
        ),
        _deny_others(
            "OnlyTheWorkerWritesFailureRecords",
            ["s3:PutObject"],
            f"{bucket_arn}/{FAILURES_PREFIX}*",
            worker,
        ),
    ]
    if cache_writer:
        # `worker.weights: s3`: vLLM loads the compile caches as code, so only the task
        # role that saves them may write there.
        document["Statement"].append(
            _deny_others(
                "OnlyTheWorkerWritesCompileCaches",
                WRITE_ACTIONS,
                f"{bucket_arn}/{CACHE_PREFIX}*",
                worker,
            )
        )
    if controller_role_arn is not None:
        document["Statement"].append(
            _deny_others(
                "OnlyTheControllerWritesItsState",
                WRITE_ACTIONS,
                f"{bucket_arn}/{CONTROLLER_PREFIX}*",
                [controller_role_arn, *break_glass],
            )
        )
    return document


def attach_policy(
    bucket: OutputBucket, document: pulumi.Output[dict], owner: pulumi.ComponentResource
) -> aws.s3.BucketPolicy:
    """The bucket's one policy, under `owner`. Under another component it keeps its name and,
    by an alias, its place under the bucket: `pulumi up` then updates it in place, where a new
    policy created and the old one deleted would leave the bucket with none."""
    return aws.s3.BucketPolicy(
        bucket.policy_name,
        bucket=bucket.bucket_id,
        policy=pulumi.Output.json_dumps(document),
        opts=pulumi.ResourceOptions(
            parent=owner,
            aliases=[] if owner is bucket else [pulumi.Alias(parent=bucket)],
            # S3 rejects a policy change while BPA is being applied concurrently.
            depends_on=[bucket.public_access_block],
            retain_on_delete=bucket.retain,
        ),
    )


class BucketWritersArgs(ComponentArgs):
    bucket: OutputBucket  # built with policy="named-writers"
    task_role_arn: StrInput
    controller_role_arn: StrInput | None = None  # None: scaling.mode is alarms
    break_glass_principal_arns: tuple[str, ...] = ()
    cache_writer: bool = False  # `worker.weights: s3`: the task role alone writes cache/


class BucketWriters(pulumi.ComponentResource):
    """The outputs bucket's policy, built by Platform after the task and controller roles."""

    def __init__(
        self, name: str, args: BucketWritersArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:storage:BucketWriters", name, None, opts)
        glass = args.break_glass_principal_arns
        document = pulumi.Output.all(
            args.bucket.bucket_arn, args.task_role_arn, args.controller_role_arn
        ).apply(lambda arns: bucket_policy(arns[0], arns[1], arns[2], glass, args.cache_writer))
        attach_policy(args.bucket, document, owner=self)
        self.register_outputs({})
