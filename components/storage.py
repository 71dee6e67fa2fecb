"""OutputBucket: where audio, manifests and failure records land (DESIGN §3.3).

Private by construction: Block Public Access on all four settings, BucketOwnerEnforced (ACLs
off), SSE-S3 with a bucket key, a bucket policy that denies any request without TLS, and a
lifecycle rule that expires objects after `outputs.expireDays` (0 = keep forever).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict, Field

from components.iam import deny_insecure_transport

# Incomplete multipart uploads (an interrupted large upload) are billed until aborted.
ABORT_MULTIPART_DAYS = 1


class OutputBucketArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    expire_days: int = Field(ge=0)


class OutputBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: OutputBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:storage:OutputBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(f"{name}-bucket", opts=child)
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
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=self._lifecycle_rules(args.expire_days),
            opts=child,
        )
        self.bucket_name, self.bucket_arn = bucket.bucket, bucket.arn
        self.register_outputs({"bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn})

    @staticmethod
    def _lifecycle_rules(expire_days: int) -> list[dict]:
        rules: list[dict] = [
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
