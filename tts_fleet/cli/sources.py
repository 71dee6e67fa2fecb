"""The SOURCE argument of submit, wait and results: checked before anything is read."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tts_fleet.cli.errors import BadInput


def require_source(source: str | None) -> None:
    """A missing input file is one clear line, not an 'invalid job' among others."""
    if source and source != "-" and not Path(source).exists():
        raise BadInput(f"no such file or directory: {source}")


def not_a_terminal(source: str | None) -> None:
    """Reading jobs from an interactive terminal would just hang: say what to give instead."""
    if source in (None, "-") and sys.stdin.isatty():
        raise click.UsageError("give a JSONL file or a directory of .txt files, or pipe jobs in")
