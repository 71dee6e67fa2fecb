"""The SOURCE argument of submit, wait and results: checked before anything is read; and
submit's --lexicon, which rewrites what SOURCE holds."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tts_fleet.cli.errors import BadInput
from tts_fleet.client.lexicon import Lexicon, LexiconError, load_lexicon


def require_source(source: str | None) -> None:
    """A missing input file is one clear line, not an 'invalid job' among others."""
    if source and source != "-" and not Path(source).exists():
        raise BadInput(f"no such file or directory: {source}")


def not_a_terminal(source: str | None) -> None:
    """Reading jobs from an interactive terminal would just hang: say what to give instead."""
    if source in (None, "-") and sys.stdin.isatty():
        raise click.UsageError(
            "give a JSONL file, a directory of .txt files or an EPUB, or pipe jobs in"
        )


lexicon_option = click.option(
    "--lexicon",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TSV of term<TAB>replacement applied to every text before it is sent (whole words; "
    "case-sensitive when the term has an upper-case letter; longest term first).",
)


def read_lexicon(path: Path | None) -> Lexicon | None:
    """The --lexicon file; every bad line on its own `invalid:` line, then exit 2."""
    if path is None:
        return None
    try:
        return load_lexicon(path)
    except LexiconError as error:
        for problem in error.problems[:-1]:
            click.secho(f"invalid: {problem}", err=True, fg="red")
        raise BadInput(f"--lexicon: {error.problems[-1]}") from None
