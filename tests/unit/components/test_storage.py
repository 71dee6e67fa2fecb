"""OutputBucket: private, encrypted, TLS-only, expiring per `outputs.expireDays`; retained or
deleted on destroy per `outputs.onDestroy`; a reader policy for outputs/ and failures/.

Mocks cannot prove that S3 accepts the configuration; they pin what the program asks for.
"""

from __future__ import annotations

import pulumi

from components.storage import OutputBucket, OutputBucketArgs
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import PREBUILT, policy, run_platform

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


# ---- outputs.onDestroy ------------------------------------------------------------------


def build_recording_options(args: OutputBucketArgs) -> tuple[RecordingMocks, dict[str, bool]]:
    """The bucket's children and whether each is `retain_on_delete` (a resource option, so
    not in the mock's inputs: recorded by a transformation on the component)."""
    retained: dict[str, bool] = {}

    def record(t: pulumi.ResourceTransformationArgs) -> None:
        if t.type_.startswith("aws:"):
            retained[t.type_] = bool(t.opts.retain_on_delete)
        return None

    mocks = run_program(
        lambda: OutputBucket("out", args, pulumi.ResourceOptions(transformations=[record]))
    )
    return mocks, retained


BUCKET_PARTS = [
    "aws:s3/bucket:Bucket",
    BPA,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketPolicy:BucketPolicy",
    LIFECYCLE,
]


def test_retain_leaves_the_bucket_and_its_settings_and_keeps_its_objects() -> None:
    mocks, retained = build_recording_options(OutputBucketArgs(expire_days=30))
    assert OutputBucketArgs(expire_days=30).on_destroy == "retain"  # the default
    assert retained == dict.fromkeys(BUCKET_PARTS, True)
    assert mocks.one("aws:s3/bucket:Bucket").inputs["forceDestroy"] is False


def test_delete_empties_and_deletes_the_bucket() -> None:
    mocks, retained = build_recording_options(OutputBucketArgs(expire_days=30, on_destroy="delete"))
    assert retained == dict.fromkeys(BUCKET_PARTS, False)
    assert mocks.one("aws:s3/bucket:Bucket").inputs["forceDestroy"] is True


def test_the_stack_config_reaches_the_output_bucket() -> None:
    for mode, force in (("retain", False), ("delete", True)):
        mocks = run_platform({"worker": {"image": PREBUILT}, "outputs": {"onDestroy": mode}})
        [bucket] = [b for b in mocks.of_type("aws:s3/bucket:Bucket")]
        assert (bucket.name, bucket.inputs["forceDestroy"]) == ("tts-outputs-bucket", force)


def test_the_build_source_bucket_is_always_deleted() -> None:
    mocks = run_platform({"outputs": {"onDestroy": "retain"}})
    force = {b.name: b.inputs["forceDestroy"] for b in mocks.of_type("aws:s3/bucket:Bucket")}
    assert force == {"tts-outputs-bucket": False, "tts-image-source-bucket": True}


# ---- the reader policy ------------------------------------------------------------------


def test_the_reader_policy_reads_outputs_failures_book_records_and_batches_only() -> None:
    mocks = run_program(
        lambda: OutputBucket("out", OutputBucketArgs(expire_days=1, reader_policy=True))
    )
    reader = mocks.one("aws:iam/policy:Policy")
    assert reader.name == "out-reader"
    assert policy(reader)["Statement"] == [
        {
            "Sid": "ReadOutputs",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": [
                "arn:aws:s3:::out-bucket/outputs/*",
                "arn:aws:s3:::out-bucket/failures/*",
                "arn:aws:s3:::out-bucket/books/*",
            ],
        },
        {
            "Sid": "ReadBatches",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": [
                "arn:aws:s3:::out-bucket/batches/*",
                "arn:aws:s3:::out-bucket/controller/batches.json",
            ],
        },
        {
            "Sid": "ReadVoices",  # tts-fleet voices list / preview (issue 25)
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::out-bucket/voices/*",
        },
        {
            "Sid": "ListOutputs",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::out-bucket",
        },
    ]


def test_no_reader_policy_unless_asked() -> None:
    assert build(30).of_type("aws:iam/policy:Policy") == []


def test_named_writers_leaves_the_policy_to_bucket_writers() -> None:
    # Its writers' roles need the bucket's ARN first (tests/components/test_bucket_writers.py).
    mocks = run_program(
        lambda: OutputBucket("out", OutputBucketArgs(expire_days=1, policy="named-writers"))
    )
    assert mocks.of_type("aws:s3/bucketPolicy:BucketPolicy") == []
    assert build(1).one("aws:s3/bucketPolicy:BucketPolicy").name == "out-policy"
