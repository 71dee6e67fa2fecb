"""What an SQS or S3 call raised, as the worker tells errors apart."""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
)

# Everything a boto3 call may raise for a reason outside this process: an answer with an
# error code (ClientError), or none at all (BotoCoreError: reset, timeout, refused).
AWS_ERRORS = (ClientError, BotoCoreError)


def error_code(error: Exception) -> str:
    """The service's error code ("" when there was no answer): botocore errors without an
    answer have no `response`, or a None one."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


# Error codes that mean "not now" (botocore's standard-mode retry list, and S3's SlowDown).
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
    }
)
TRANSIENT_STATUS = frozenset({408, 429})


def aws_error_is_transient(error: Exception) -> bool:
    """5xx, throttling and network faults are transient; any other answer is definite."""
    if isinstance(error, ClientError):
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return error_code(error) in TRANSIENT_CODES or status >= 500 or status in TRANSIENT_STATUS
    # Endpoint unreachable, connection reset or closed, timeouts, and the task role's
    # credentials endpoint not answering. No region, no credentials at all or a bad
    # parameter are other BotoCoreErrors: definite.
    return isinstance(error, ConnectionError | HTTPClientError | CredentialRetrievalError)
