"""One look for every command: the progress bar (with rate and ETA), the table style, the
--json object and how many ids a line lists."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

TABLE_BOX = box.HEAVY_HEAD  # rich's default: the local summary (tts_fleet/local/view.py) has it too
IDS_SHOWN = 20  # a line that lists ids (pending, missing, parts) lists at most this many


class _RateColumn(TransferSpeedColumn):
    """Items per second (rich's own speed column speaks bytes)."""

    def render(self, task: Any) -> Any:
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")


@contextmanager
def progress_bar(total: int, label: str, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A rich bar on stderr when it is a terminal (count, %, rate, elapsed, ETA); a no-op in
    pipes, CI and --json, so machine-read output stays clean."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _: None
        return
    columns = (
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(f"[bold]{label}", *columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.advance(task, done)


def table(title: str, *, show_header: bool = True) -> Table:
    """Every table the command prints has this frame."""
    return Table(title=title, show_header=show_header, box=TABLE_BOX, title_justify="left")


def emit_json(data: dict[str, Any]) -> None:
    """The --json output: one object on stdout, keys sorted (docs/cli.md#--json-output)."""
    click.echo(json.dumps(data, ensure_ascii=False, sort_keys=True))
