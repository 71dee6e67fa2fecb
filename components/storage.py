"""OutputBucket: where audio, manifests and failure records land (DESIGN §3.3).

Private by construction: Block Public Access on all four settings, BucketOwnerEnforced (ACLs
off), SSE-S3 with a bucket key, a bucket policy that denies any request without TLS, and a
lifecycle rule that expires objects after `outputs.expireDays` (0 = keep forever).

`outputs.onDestroy` decides what `pulumi destroy` does with it. `delete`: `force_destroy`, so
the provider empties the bucket (every object) and deletes it; S3 refuses to delete a bucket
that holds anything. `retain`: the bucket and its settings are `retain_on_delete`, so destroy
removes them from the stack but leaves them in AWS, still private, encrypted and expiring.

With `reader_policy`, a managed policy that reads what the worker writes (`outputs/`,
`failures/`): what `tts-fleet wait` and `results` need besides the producer policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs
from components.iam import deny_insecure_transport
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX

# Incomplete multipart uploads (an interrupted large upload) are billed until aborted.
ABORT_MULTIPART_DAYS = 1


class OutputBucketArgs(ComponentArgs):
    expire_days: int = Field(ge=0)
    on_destroy: Literal["retain", "delete"] = "retain"
    reader_policy: bool = False


class OutputBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
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
        aws.s3.BucketPolicy(
            f"{name}-policy",
            bucket=bucket.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        deny_insecure_transport(
                            [bucket.arn, bucket.arn.apply(lambda a: f"{a}/*")], "s3:*"
                        )
                    ],
                }
            ),
            # S3 rejects a policy change while BPA is being applied concurrently.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block], retain_on_delete=retain),
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=self._lifecycle_rules(args.expire_days),
            opts=child,
        )
        self.bucket_name, self.bucket_arn = bucket.bucket, bucket.arn
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


READ_PREFIXES = (OUTPUTS_PREFIX, FAILURES_PREFIX)


def reader_policy(bucket_arn: pulumi.Input[str]) -> dict:
    """GetObject (and so HEAD) on outputs/ and failures/, and ListBucket: what `wait` and
    `results` call (ListObjectsV2 on those prefixes, GetObject, download)."""
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
                # As the task role's SeeOwnOutputs: no s3:prefix condition, so a GET of a key
                # not yet written answers 404 (not 403); the bucket holds only these prefixes.
                "Sid": "ListOutputs",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": arn,
            },
        ],
    }


def _under(prefix: str) -> Callable[[str], str]:
    """The keys under `prefix` of a bucket, from its ARN."""
    return lambda arn: f"{arn}/{prefix}*"
