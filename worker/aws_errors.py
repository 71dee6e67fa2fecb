"""What an SQS or S3 call raised, as the worker tells errors apart."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

# Everything a boto3 call may raise for a reason outside this process: an answer with an
# error code (ClientError), or none at all (BotoCoreError: reset, timeout, refused).
AWS_ERRORS = (ClientError, BotoCoreError)


def error_code(error: Exception) -> str:
    """The service's error code ("" when there was no answer): botocore errors without an
    answer have no `response`, or a None one."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))
