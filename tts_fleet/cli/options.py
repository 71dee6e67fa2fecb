"""Options shared by several commands, each defined once (after pip's cmdoptions.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_flag(help: str = "Print one JSON object on stdout (stable keys).") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def stack_option(help: str, *, required: bool = False, short: bool = False) -> Callable[[F], F]:
    """--stack S: what it reads (a stack file, the deployed stack's outputs) is in `help`."""
    names = ("--stack", "-s") if short else ("--stack",)
    return click.option(*names, required=required, help=help)


def stack_file_option(help: str = "Read the settings of Pulumi.<STACK>.yaml.") -> Callable[[F], F]:
    return stack_option(help)


def project_dir_option(
    help: str = "The directory holding Pulumi.yaml and the stack files.",
) -> Callable[[F], F]:
    return click.option(
        "--project-dir",
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        default=Path("."),
        show_default=True,
        help=help,
    )


def target_flags(func: F) -> F:
    """--stack / --outputs-file / --queue-url / --dlq-url / --bucket / --output-prefix: where a
    stack's jobs go; --region / --profile: how to reach it."""
    from tts_fleet.client import stack as env  # the TTS_FLEET_* names are defined there only

    for option in reversed(
        (
            stack_option(
                "Read queueUrl, dlqUrl, bucketName and maxTextChars from this deployed Pulumi "
                "stack's outputs (needs the Pulumi CLI, or --outputs-file)."
            ),
            click.option(
                "--outputs-file",
                type=click.Path(dir_okay=False),
                help="A saved `pulumi stack output --json` to read the outputs from instead.",
            ),
            click.option("--queue-url", help=f"Jobs queue URL [env {env.ENV_QUEUE_URL}]."),
            click.option("--dlq-url", help=f"Dead-letter queue URL [env {env.ENV_DLQ_URL}]."),
            click.option("--bucket", help=f"Output bucket [env {env.ENV_BUCKET}]."),
            click.option(
                "--output-prefix", help=f"Key prefix of outputs [env {env.ENV_OUTPUT_PREFIX}]."
            ),
            *aws_flags(),
        )
    ):
        func = option(func)
    return func


def max_text_chars_option(func: F) -> F:
    """--max-text-chars N: the text limit of the target, for submit, wait and results alike."""
    from worker.jobs import DEFAULT_MAX_TEXT_CHARS

    return click.option(
        "--max-text-chars",
        type=click.IntRange(1),
        help="Longest text accepted [default: the stack's maxTextChars output with --stack or "
        f"--outputs-file, else {DEFAULT_MAX_TEXT_CHARS:,}]; give submit, wait and results "
        "the same.",
    )(func)


def threads_option(what: str) -> Callable[[F], F]:
    """--threads N: how many threads send or download at once (8 by default)."""
    return click.option(
        "--threads", default=8, show_default=True, type=click.IntRange(1, 64), help=what
    )


def split_chars_option(func: F) -> F:
    """--split-chars N: a longer text becomes parts `<id>.p001`… (`results --join` rejoins)."""
    from tts_fleet.client.books import MIN_SPLIT_CHARS

    return click.option(
        "--split-chars",
        type=click.IntRange(MIN_SPLIT_CHARS),
        help="Split texts longer than N characters into parts on sentence boundaries "
        "(ids <id>.p001…); `tts-fleet results --join` puts the audio back together.",
    )(func)


def region_option(
    help: str = "AWS region [env AWS_REGION, AWS_DEFAULT_REGION].",
) -> Callable[[F], F]:
    return click.option("--region", help=help)


def aws_flags() -> tuple[Callable[[F], F], ...]:
    """--region / --profile, as the AWS CLI spells them."""
    return (
        region_option(),
        click.option("--profile", help="AWS named profile [env AWS_PROFILE]."),
    )


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
