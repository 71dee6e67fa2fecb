"""`tts-fleet deploy preview|up|destroy|refresh|outputs --stack S`: the CI driver's CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from tts_fleet.cli.options import json_flag, project_dir_option, stack_option
from tts_fleet.deploy.driver import (
    ACTIONS,
    Action,
    DeployError,
    PreflightRun,
    Report,
    Request,
    StackFactory,
    open_stack,
    preflight_note,
    run,
)
from tts_fleet.deploy.settings import SettingError, parse_settings
from tts_fleet.exit_codes import ExitCode

HELP = {
    "preview": "Check GPU quota and capacity (the preflight; a warning if it cannot run), then "
    "show what `up` would change: create/update/delete/same counts.",
    "up": "Apply the stack, then print its outputs (a prod* stack needs --yes).",
    "destroy": "Delete every resource of the stack (needs --yes).",
    "refresh": "Reconcile the stack's state with what exists in the cloud.",
    "outputs": "Print the stack's outputs.",
}


@dataclass
class DeployHooks:
    """Put one in the click context object (`obj=`) to swap the stack factory and the
    preview's GPU preflight in tests."""

    factory: StackFactory = open_stack
    preflight: PreflightRun | None = preflight_note


@click.group("deploy")
def deploy() -> None:
    """Preview and apply a stack with the Pulumi Automation API (what CI runs).

    Needs the Pulumi CLI on PATH and a backend login (PULUMI_ACCESS_TOKEN, or
    PULUMI_BACKEND_URL + PULUMI_CONFIG_PASSPHRASE). --set values are written to
    Pulumi.<stack>.yaml, as `pulumi config set --path` does."""


def _command(action: Action) -> click.Command:
    def callback(**options: Any) -> None:
        _execute(click.get_current_context(), action, options)

    decorators: list[Callable[[Callable[..., None]], Callable[..., None]]] = [
        stack_option("Stack name, e.g. dev or prod.", required=True, short=True),
        project_dir_option("Directory holding Pulumi.yaml and Pulumi.<stack>.yaml."),
        json_flag("Print one JSON object."),
    ]
    if action != "outputs":
        decorators.append(
            click.option(
                "--set",
                "sets",
                multiple=True,
                metavar="KEY=VALUE",
                help="Stack config with path semantics, e.g. scaling.maxWorkers=12 "
                "(namespace tts-fleet unless given). Repeatable.",
            )
        )
    if action in ("up", "destroy"):
        decorators.append(click.option("--yes", "-y", is_flag=True, help="Run without asking."))
    if action == "preview":
        decorators.append(
            click.option(
                "--expect-no-changes", is_flag=True, help="Exit 1 when anything would change."
            )
        )
    for decorate in reversed(decorators):
        callback = decorate(callback)
    return click.command(action, help=HELP[action])(callback)


for _action in ACTIONS:
    deploy.add_command(_command(_action))


def _execute(ctx: click.Context, action: Action, options: dict[str, Any]) -> None:
    hooks = ctx.find_object(DeployHooks) or DeployHooks()
    as_json: bool = options["as_json"]
    try:
        request = Request(
            action=action,
            stack=options["stack"],
            project_dir=options["project_dir"],
            settings=parse_settings(options.get("sets", ())),
            yes=options.get("yes", False),
            expect_no_changes=options.get("expect_no_changes", False),
        )
        report = run(request, hooks.factory, _stream, hooks.preflight)
    except SettingError as error:
        report = _failed(action, options["stack"], DeployError(ExitCode.BAD_INPUT, str(error)))
    except DeployError as error:
        report = _failed(action, options["stack"], error)
    _print(report, as_json)
    ctx.exit(report.code)


def _failed(action: str, stack: str, error: DeployError) -> Report:
    data = {"action": action, "stack": stack, "ok": False, "error": error.message}
    return Report(data=data, code=error.code, error=error.message)


def _print(report: Report, as_json: bool) -> None:
    """Results on stdout (text or one JSON object); errors on stderr, one line each."""
    if as_json:
        click.echo(json.dumps(report.data, default=str))
    else:
        for line in report.lines:
            click.echo(line)
    for line in report.error.splitlines():  # one `Error:` line per problem
        click.secho(f"Error: {line}", err=True, fg="red")


def _stream(line: str) -> None:
    # Pulumi's progress goes to stderr so stdout stays the summary (or pure JSON) for CI.
    click.echo(line, err=True)
