"""Finding the stack's queue, DLQ and bucket: flags, then env vars, then the deployed stack's
outputs (`pulumi stack output`, or a saved copy of them).

The Pulumi CLI is only asked when `--stack` is given (no flag or env var names the text limit
the stack's workers apply), so the same commands work against the local emulator
(AWS_ENDPOINT_URL, which boto3 honours by itself) with no Pulumi at all. The `TTS_FLEET_*`
names are defined here and nowhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tts_fleet.client.aws import AwsSettings, Target
from tts_fleet.config import outputs as names
from worker.jobs import DEFAULT_MAX_TEXT_CHARS

ENV_QUEUE_URL = "TTS_FLEET_QUEUE_URL"
ENV_DLQ_URL = "TTS_FLEET_DLQ_URL"
ENV_BUCKET = "TTS_FLEET_BUCKET"
ENV_OUTPUT_PREFIX = "TTS_FLEET_OUTPUT_PREFIX"
ENV_EVENTS_QUEUE_URL = "TTS_FLEET_EVENTS_QUEUE_URL"
# The stack outputs this module reads (their names are defined in tts_fleet/config/outputs.py).
READ_OUTPUTS = (
    names.QUEUE_URL,
    names.DLQ_URL,
    names.BUCKET_NAME,
    names.CLUSTER_NAME,
    names.SERVICE_NAME,
    names.EVENTS_QUEUE_URL,  # null unless the stack has notifications on
    names.CONTROLLER_FUNCTION_ARN,  # absent with scaling.mode: alarms
    names.MAX_TEXT_CHARS,  # absent from a stack deployed before it was exported
    names.DEADLINE_MINUTES,  # likewise
)
PULUMI_TIMEOUT_S = 60


class StackError(Exception):
    """The stack's resources cannot be found; `str(error)` is one line saying what to pass.
    `missing_tool` is true when the Pulumi CLI itself is absent (not a bad stack name)."""

    def __init__(self, message: str, *, missing_tool: bool = False) -> None:
        super().__init__(message)
        self.missing_tool = missing_tool


def resolve_target(
    stack: str | None,
    queue_url: str | None,
    dlq_url: str | None,
    bucket: str | None,
    *,
    prefix: str | None = None,
    outputs_file: str | None = None,
    max_text_chars: int | None = None,
    aws: AwsSettings | None = None,
) -> Target:
    """Each value from its flag, else its env var, else the stack's outputs (read once: from
    `outputs_file`, a saved `pulumi stack output --json`, or else from the Pulumi CLI). The
    text limit is `max_text_chars` if given, else the stack's, else the worker's default."""
    queue_url = queue_url or os.environ.get(ENV_QUEUE_URL) or None
    dlq_url = dlq_url or os.environ.get(ENV_DLQ_URL) or None
    bucket = bucket or os.environ.get(ENV_BUCKET) or None
    prefix = prefix if prefix is not None else os.environ.get(ENV_OUTPUT_PREFIX, "")
    outputs: dict[str, Any] = {}
    if outputs_file:
        outputs = read_outputs_file(outputs_file)
    elif stack:
        outputs = stack_outputs(stack)
        given = {names.QUEUE_URL: queue_url, names.BUCKET_NAME: bucket}
        missing = [name for name, value in given.items() if not value and not outputs.get(name)]
        if missing:
            raise StackError(
                f"stack {stack} has no output {', '.join(missing)}; deploy it first, "
                "or pass --queue-url and --bucket"
            )
    return Target(
        queue_url=queue_url or outputs.get(names.QUEUE_URL),
        dlq_url=dlq_url or outputs.get(names.DLQ_URL),
        bucket=bucket or outputs.get(names.BUCKET_NAME),
        prefix=prefix,
        cluster=outputs.get(names.CLUSTER_NAME),
        service=outputs.get(names.SERVICE_NAME),
        events_queue_url=os.environ.get(ENV_EVENTS_QUEUE_URL)
        or outputs.get(names.EVENTS_QUEUE_URL),
        controller_arn=outputs.get(names.CONTROLLER_FUNCTION_ARN),
        max_text_chars=max_text_chars or text_limit(outputs),
        deadline_minutes=deadline_default(outputs),
        aws=aws or AwsSettings(),
    )


def text_limit(outputs: dict[str, Any]) -> int:
    """The stack's maxTextChars output; the worker's default when the stack has none."""
    value = outputs.get(names.MAX_TEXT_CHARS)
    if value is None:
        return DEFAULT_MAX_TEXT_CHARS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StackError(
            f"the stack output {names.MAX_TEXT_CHARS} is not a positive integer: {value!r}"
        )
    return value


def deadline_default(outputs: dict[str, Any]) -> int:
    """The stack's deadlineMinutes output; 0 (no deadline) when the stack has none."""
    value = outputs.get(names.DEADLINE_MINUTES)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StackError(
            f"the stack output {names.DEADLINE_MINUTES} is not a whole number >= 0: {value!r}"
        )
    return value


def read_outputs_file(path: str) -> dict[str, Any]:
    """A saved `pulumi stack output --json` (CI and laptops without the Pulumi CLI)."""
    try:
        outputs = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise StackError(f"cannot read --outputs-file {path}: {error.strerror}") from None
    except ValueError:
        raise StackError(
            f"--outputs-file {path} is not JSON; save it with `pulumi stack output --json`"
        ) from None
    if not isinstance(outputs, dict):
        raise StackError(f"--outputs-file {path} holds no output map")
    return outputs


def stack_outputs(stack: str) -> dict[str, Any]:
    """`pulumi stack output --json --stack S`, or one clear line saying what to pass instead."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise StackError(
            f"--stack {stack} needs the pulumi CLI, which is not on PATH; pass --queue-url and "
            f"--bucket (or set {ENV_QUEUE_URL} and {ENV_BUCKET}) instead",
            missing_tool=True,
        )
    try:
        done = subprocess.run(
            [pulumi, "stack", "output", "--json", "--stack", stack],
            capture_output=True,
            text=True,
            timeout=PULUMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StackError(f"pulumi stack output --stack {stack} failed: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise StackError(
            f"cannot read the outputs of stack {stack} ({last}); check the stack name, "
            "or pass --queue-url and --bucket"
        )
    try:
        outputs = json.loads(done.stdout or "{}")
    except json.JSONDecodeError:
        raise StackError(f"pulumi printed no JSON for stack {stack}") from None
    if not isinstance(outputs, dict):
        raise StackError(f"pulumi printed no output map for stack {stack}")
    return outputs
