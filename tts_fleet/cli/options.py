"""Options shared by several commands, each defined once (after pip's cmdoptions.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_flag(help: str = "Print one JSON object on stdout (stable keys).") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def stack_file_option(help: str = "Read the settings of Pulumi.<STACK>.yaml.") -> Callable[[F], F]:
    return click.option("--stack", help=help)


def project_dir_option() -> Callable[[F], F]:
    return click.option(
        "--project-dir",
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        default=Path("."),
        show_default=True,
        help="The directory holding Pulumi.yaml and the stack files.",
    )


def target_flags(func: F) -> F:
    """--stack / --queue-url / --dlq-url / --bucket / --output-prefix: where a stack's jobs go."""
    for option in reversed(
        (
            click.option(
                "--stack",
                help="Read queueUrl, dlqUrl, bucketName from this Pulumi stack's outputs "
                "(needs the Pulumi CLI, or --outputs-file).",
            ),
            click.option(
                "--outputs-file",
                type=click.Path(dir_okay=False),
                help="A saved `pulumi stack output --json` to read the outputs from instead.",
            ),
            click.option("--queue-url", help="Jobs queue URL [env TTS_FLEET_QUEUE_URL]."),
            click.option("--dlq-url", help="Dead-letter queue URL [env TTS_FLEET_DLQ_URL]."),
            click.option("--bucket", help="Output bucket [env TTS_FLEET_BUCKET]."),
            click.option(
                "--output-prefix", help="Key prefix of outputs [env TTS_FLEET_OUTPUT_PREFIX]."
            ),
            *aws_flags(),
        )
    ):
        func = option(func)
    return func


def split_chars_option(func: F) -> F:
    """--split-chars N: a longer text becomes parts `<id>.p001`… (`results --join` rejoins)."""
    from tts_fleet.client.books import MIN_SPLIT_CHARS

    return click.option(
        "--split-chars",
        type=click.IntRange(MIN_SPLIT_CHARS),
        help="Split texts longer than N characters into parts on sentence boundaries "
        "(ids <id>.p001…); `tts-fleet results --join` puts the audio back together.",
    )(func)


def aws_flags() -> tuple[Callable[[F], F], ...]:
    """--region / --profile, as the AWS CLI spells them."""
    return (
        click.option("--region", help="AWS region [env AWS_REGION, AWS_DEFAULT_REGION]."),
        click.option("--profile", help="AWS named profile [env AWS_PROFILE]."),
    )


def use_aws_settings(region: str | None, profile: str | None) -> None:
    """The flags win over the environment for every client this process makes
    (tts_fleet.client.aws reads AWS_REGION and AWS_PROFILE for each client it builds)."""
    if region:
        os.environ["AWS_REGION"] = region
    if profile:
        os.environ["AWS_PROFILE"] = profile


# Flag parameter → camelCase key of tts-fleet:scaling: the flags override the stack file.
SCALING_OVERRIDES = {
    "min_workers": "minWorkers",
    "max_workers": "maxWorkers",
    "jobs_per_worker": "jobsPerWorker",
    "idle_minutes": "idleMinutes",
    "host_idle_seconds": "hostIdleSeconds",
}


def scaling_override_flags(func: F) -> F:
    """--min-workers / --max-workers / --jobs-per-worker / --idle-minutes /
    --host-idle-seconds, each overriding its key of tts-fleet:scaling."""
    for param, key in reversed(SCALING_OVERRIDES.items()):
        flag = "--" + param.replace("_", "-")
        func = click.option(flag, param, type=int, help=f"Override scaling.{key}.")(func)
    return func


def scaling_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """`{scaling key: value}` from a command's parameters (None where a flag is not given)."""
    return {key: params.get(param) for param, key in SCALING_OVERRIDES.items()}
