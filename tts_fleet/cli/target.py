"""The target of the job commands (submit, status, wait, results, dlq): the flags resolved to
a `Target` once, the values a command cannot do without, and AWS errors as one line each."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click
from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

from tts_fleet.cli.errors import BadInput, Failed, MissingTool
from tts_fleet.cli.options import max_text_chars_option, target_flags
from tts_fleet.client import stack as env
from tts_fleet.client.aws import AwsSettings, NoRegion, Target, client_for
from tts_fleet.client.stack import StackError, resolve_target
from tts_fleet.client.status import find_dlq_url

F = TypeVar("F", bound=Callable[..., Any])


def target_options(*, text_limit: bool = False) -> Callable[[F], F]:
    """The target flags (and, with `text_limit`, --max-text-chars), resolved to one Target
    passed to the command as `target`."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(
            stack: str | None,
            outputs_file: str | None,
            queue_url: str | None,
            dlq_url: str | None,
            bucket: str | None,
            output_prefix: str | None,
            region: str | None,
            profile: str | None,
            max_text_chars: int | None = None,
            **kwargs: Any,
        ) -> Any:
            try:
                target = resolve_target(
                    stack,
                    queue_url,
                    dlq_url,
                    bucket,
                    prefix=output_prefix,
                    outputs_file=outputs_file,
                    max_text_chars=max_text_chars,
                    aws=AwsSettings(region, profile),
                )
            except StackError as error:
                raise (MissingTool if error.missing_tool else BadInput)(str(error)) from None
            try:
                return func(target=target, **kwargs)
            except NoRegion as error:
                raise BadInput(str(error)) from None
            except ProfileNotFound as error:
                raise BadInput(
                    f"{error}; list profiles with `aws configure list-profiles`"
                ) from None
            except (ClientError, BotoCoreError) as error:
                raise Failed(f"AWS: {error}") from None

        decorated = target_flags(wrapper)
        return cast(F, max_text_chars_option(decorated) if text_limit else decorated)

    return decorate


# What a missing value is called, its flag and its env var, for the one-line error.
_NEEDED = {
    "queue_url": ("--queue-url", env.ENV_QUEUE_URL),
    "bucket": ("--bucket", env.ENV_BUCKET),
}


def need(target: Target, what: str) -> str:
    """The target's queue URL or bucket, or a usage error naming the flag and env var."""
    value = getattr(target, what)
    if not isinstance(value, str) or not value:
        flag, name = _NEEDED[what]
        raise click.UsageError(
            f"no {what.replace('_', ' ')}: pass {flag}, set {name}, or --stack S"
        )
    return value


def dlq_url_of(target: Target) -> str:
    """The DLQ: given, or the one the queue's RedrivePolicy names."""
    if target.dlq_url:
        return target.dlq_url
    if not target.queue_url:
        raise click.UsageError(f"no DLQ: pass --dlq-url, set {env.ENV_DLQ_URL}, or --stack S")
    found = find_dlq_url(client_for("sqs", target.aws), target.queue_url)
    if not found:
        raise click.UsageError(
            f"no DLQ: pass --dlq-url or set {env.ENV_DLQ_URL} (the queue has no RedrivePolicy)"
        )
    return found
