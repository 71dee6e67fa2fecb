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
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tts-fleet")
def cli() -> None:
    """Queue-driven GPU text-to-speech on AWS: submit jobs, watch the fleet, fetch audio,
    simulate and cost a scaling policy, and run the whole pipeline locally."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(cli)


def main() -> None:
    cli()
