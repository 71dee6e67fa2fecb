"""`tts-fleet preflight --stack S`: can this account run the stack's GPU fleet?"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import click

from tts_fleet.cli.errors import BadInput, Failed, bad_config
from tts_fleet.cli.options import json_flag, project_dir_option, region_option, stack_file_option
from tts_fleet.config.models import ConfigError
from tts_fleet.config.stack_file import StackFile, stack_file_path
from tts_fleet.deploy.preflight import (
    PreflightError,
    PreflightUnavailable,
    check_stack,
    render,
)
from tts_fleet.exit_codes import ExitCode


@dataclass
class PreflightHooks:
    """Put one in the click context object (`obj=`) to swap the boto3 session in tests."""

    session: Callable[..., Any] = boto3.Session


@click.command("preflight")
@stack_file_option("The stack to check: reads Pulumi.<STACK>.yaml (required).")
@region_option("AWS region [default: the stack file's aws:region].")
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
    path = stack_file_path(stack, project_dir)
    if not path.exists():
        raise BadInput(f"no stack file {path}")
    try:
        stack_file = StackFile.load(path)
        cfg = stack_file.config()
    except ConfigError as error:
        raise bad_config(error.problems) from error
    hooks = ctx.obj if isinstance(ctx.obj, PreflightHooks) else PreflightHooks()
    try:
        result = check_stack(cfg, stack, hooks.session, region or stack_file.region)
    except PreflightUnavailable as error:
        raise BadInput(str(error)) from error
    except PreflightError as error:
        raise Failed(str(error)) from error
    click.echo(json.dumps(result.as_json(), indent=2) if as_json else render(result))
    ctx.exit(ExitCode.FAILED if result.warnings else ExitCode.OK)
