"""The `tts-fleet` command: a click group; each area registers its commands from its module."""

from __future__ import annotations

import importlib

import click

# One module per area, each exposing `register(group)`; imported eagerly so a
# broken area fails loudly at start-up instead of hiding a command.
COMMAND_MODULES = (
    "tts_fleet.cli.scaling",
    "tts_fleet.cli.jobs",
    "tts_fleet.cli.simulation",
    "tts_fleet.cli.local",
    "tts_fleet.cli.deploy",
    "tts_fleet.cli.speech",
    "tts_fleet.cli.preflight",
)


# `--help` lists commands in the order a user meets them, not alphabetically.
WORKFLOW_ORDER = (
    "local",
    "submit",
    "status",
    "wait",
    "results",
    "dlq",
    "simulate",
    "advise",
    "cost",
    "scaling",
    "preflight",
    "deploy",
    "speech-server",
)


class WorkflowGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        known = [name for name in WORKFLOW_ORDER if name in self.commands]
        return known + sorted(set(self.commands) - set(known))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence: click cuts it at 45 characters otherwise."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=WorkflowGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
@click.version_option(package_name="tts-fleet")
def cli() -> None:
    """Queue-driven GPU text-to-speech on AWS: submit jobs, watch the fleet, fetch audio,
    simulate and cost a scaling policy, and run the whole pipeline locally."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(cli)


def main() -> None:
    cli()
