"""OutputBucket: private, encrypted, TLS-only, expiring per `outputs.expireDays`.

Mocks cannot prove that S3 accepts the configuration; they pin what the program asks for.
"""

from __future__ import annotations

from components.storage import OutputBucket, OutputBucketArgs
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import policy

BPA = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
ABORT = {
    "id": "abort-incomplete-uploads",
    "status": "Enabled",
    "filter": {},
    "abortIncompleteMultipartUpload": {"daysAfterInitiation": 1},
}


def build(expire_days: int) -> RecordingMocks:
    return run_program(lambda: OutputBucket("out", OutputBucketArgs(expire_days=expire_days)))


def test_bucket_is_private_encrypted_and_tls_only() -> None:
    mocks = build(30)
    assert mocks.counts() == {
        "tts-fleet:storage:OutputBucket": 1,
        "aws:s3/bucket:Bucket": 1,
        BPA: 1,
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls": 1,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": 1,
        "aws:s3/bucketPolicy:BucketPolicy": 1,
        LIFECYCLE: 1,
    }
    block = mocks.one(BPA).inputs
    assert {k: block[k] for k in block if k != "bucket"} == {
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    ownership = mocks.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs
    assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    sse = mocks.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs
    assert sse["rules"] == [
        {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}, "bucketKeyEnabled": True}
    ]
    assert policy(mocks.one("aws:s3/bucketPolicy:BucketPolicy"))["Statement"] == [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": ["arn:aws:s3:::out-bucket", "arn:aws:s3:::out-bucket/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ]


def test_lifecycle_expires_after_expire_days() -> None:
    rules = build(12).one(LIFECYCLE).inputs["rules"]
    assert rules == [
        ABORT,
        {"id": "expire-outputs", "status": "Enabled", "filter": {}, "expiration": {"days": 12}},
    ]


def test_expire_days_zero_keeps_objects() -> None:
    assert build(0).one(LIFECYCLE).inputs["rules"] == [ABORT]
