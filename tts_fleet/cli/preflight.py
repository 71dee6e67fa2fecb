"""`tts-fleet preflight --stack S`: can this account run the stack's GPU fleet?"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.cli.errors import BadInput, Failed
from tts_fleet.cli.options import json_flag, project_dir_option, stack_file_option
from tts_fleet.deploy.preflight import PreflightError, render, run_preflight, stack_region
from tts_fleet.exit_codes import ExitCode
from tts_fleet.spec.config import ConfigError, load_stack_file, stack_file

# Error codes that mean "these credentials do not work", not "this check failed".
CREDENTIAL_ERRORS = {
    "ExpiredToken",
    "ExpiredTokenException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "AuthFailure",
    "SignatureDoesNotMatch",
}


@dataclass
class PreflightHooks:
    """Put one in the click context object (`obj=`) to swap the boto3 session in tests."""

    session: Callable[..., Any] = boto3.Session


def register(group: click.Group) -> None:
    group.add_command(preflight)


@click.command("preflight")
@stack_file_option("The stack to check: reads Pulumi.<STACK>.yaml (required).")
@click.option("--region", help="AWS region [default: the stack file's aws:region].")
@project_dir_option()
@json_flag()
@click.pass_context
def preflight(
    ctx: click.Context, stack: str | None, region: str | None, project_dir: str, as_json: bool
) -> None:
    """Check GPU capacity before a deploy: the instance types that match tts-fleet:gpu in the
    region, where they are offered, the account's vCPU quota, the largest worker count it
    allows, and the cheapest eligible type's price.

    Exit 0: the quota covers scaling.maxWorkers; 1: a warning (quota below maxWorkers, no
    usable type, a quota not readable); 2: no credentials, no region or a bad stack file."""
    if not stack:
        raise BadInput("preflight needs --stack (e.g. --stack prod)")
    path = stack_file(stack, project_dir)
    if not path.exists():
        raise BadInput(f"no stack file {path}")
    try:
        cfg = load_stack_file(path)
    except ConfigError as error:
        raise BadInput(str(error)) from error
    hooks = ctx.obj if isinstance(ctx.obj, PreflightHooks) else PreflightHooks()
    session = hooks.session(region_name=region or stack_region(Path(path)))
    if session.get_credentials() is None:
        raise BadInput("no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or log in")
    if not session.region_name:
        raise BadInput("no AWS region: pass --region or set aws:region in the stack file")
    result = _run(cfg, stack, session)
    click.echo(json.dumps(result.as_json(), indent=2) if as_json else render(result))
    ctx.exit(ExitCode.FAILED if result.warnings else ExitCode.OK)


def _run(cfg: Any, stack: str, session: Any) -> Any:
    try:
        ec2 = session.client("ec2")
        quotas = session.client("service-quotas")
        return run_preflight(cfg, stack, session.region_name, ec2, quotas)
    except PreflightError as error:
        if any(code in str(error) for code in CREDENTIAL_ERRORS):
            raise BadInput(f"AWS credentials rejected: {error}") from error
        raise Failed(str(error)) from error
    except (BotoCoreError, ClientError) as error:
        # No credentials found only when a call is made, or no endpoint: one line, exit 2.
        raise BadInput(f"AWS: {error}") from error
