"""Finding the stack's queue, DLQ and bucket: flags, then env vars, then `pulumi stack output`.

The Pulumi CLI is only asked when a flag and its env var are both missing, so the same
commands work against the local emulator (AWS_ENDPOINT_URL, which boto3 honours by itself)
with no Pulumi at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tts_fleet.client.aws import Target
from tts_fleet.config import outputs

ENV_QUEUE_URL = "TTS_FLEET_QUEUE_URL"
ENV_DLQ_URL = "TTS_FLEET_DLQ_URL"
ENV_BUCKET = "TTS_FLEET_BUCKET"
ENV_OUTPUT_PREFIX = "TTS_FLEET_OUTPUT_PREFIX"
ENV_EVENTS_QUEUE_URL = "TTS_FLEET_EVENTS_QUEUE_URL"
# Stack output names exported by the Pulumi program (__main__.py), from their one definition.
OUTPUT_QUEUE_URL = outputs.QUEUE_URL
OUTPUT_DLQ_URL = outputs.DLQ_URL
OUTPUT_BUCKET = outputs.BUCKET_NAME
OUTPUT_CLUSTER = outputs.CLUSTER_NAME
OUTPUT_SERVICE = outputs.SERVICE_NAME
EVENTS_OUTPUT = outputs.EVENTS_QUEUE_URL  # null unless the stack has notifications on
OUTPUT_CONTROLLER = outputs.CONTROLLER_FUNCTION_ARN  # absent with scaling.controller: alarms
READ_OUTPUTS = (OUTPUT_QUEUE_URL, OUTPUT_DLQ_URL, OUTPUT_BUCKET, OUTPUT_CLUSTER, OUTPUT_SERVICE)
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
) -> Target:
    """Each value from its flag, else its env var, else the stack's outputs (read once: from
    `outputs_file`, a saved `pulumi stack output --json`, or else from the Pulumi CLI)."""
    queue_url = queue_url or os.environ.get(ENV_QUEUE_URL) or None
    dlq_url = dlq_url or os.environ.get(ENV_DLQ_URL) or None
    bucket = bucket or os.environ.get(ENV_BUCKET) or None
    prefix = prefix if prefix is not None else os.environ.get(ENV_OUTPUT_PREFIX, "")
    outputs: dict[str, Any] = {}
    if outputs_file:
        outputs = read_outputs_file(outputs_file)
    elif stack and not (queue_url and dlq_url and bucket):
        outputs = stack_outputs(stack)
        given = {OUTPUT_QUEUE_URL: queue_url, OUTPUT_BUCKET: bucket}
        missing = [name for name, value in given.items() if not value and not outputs.get(name)]
        if missing:
            raise StackError(
                f"stack {stack} has no output {', '.join(missing)}; deploy it first, "
                "or pass --queue-url and --bucket"
            )
    return Target(
        queue_url=queue_url or outputs.get(OUTPUT_QUEUE_URL),
        dlq_url=dlq_url or outputs.get(OUTPUT_DLQ_URL),
        bucket=bucket or outputs.get(OUTPUT_BUCKET),
        prefix=prefix,
        cluster=outputs.get(OUTPUT_CLUSTER),
        service=outputs.get(OUTPUT_SERVICE),
        events_queue_url=os.environ.get(ENV_EVENTS_QUEUE_URL) or outputs.get(EVENTS_OUTPUT),
        controller_arn=outputs.get(OUTPUT_CONTROLLER),
        stack=stack,
    )


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
