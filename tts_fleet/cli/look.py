"""One look for every command: the progress bar (with rate and ETA), the table style, the
--json object, how many ids a line lists, and how text from a queue or the bucket is shown."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
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

from worker.jobs import is_job_id

TABLE_BOX = box.HEAVY_HEAD  # rich's default: the local summary (tts_fleet/local/view.py) has it too
IDS_SHOWN = 20  # a line that lists ids (pending, missing, parts) lists at most this many
# Terminal escapes a producer or a server can put in a message, an id or an error: OSC (window
# titles, OSC 8 hyperlinks; ended by BEL or ST), CSI (colours, cursor moves), then any other
# C0/C1 control character left over. Removed whole, so no fragment of one reaches the terminal.
_ESCAPES = re.compile(
    r"(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC ... BEL | ST
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI
    r"|[\x00-\x1f\x7f-\x9f]"
)
_BREAKS = re.compile(r"[\t\n\r]+")  # removed too, but as a space so words stay apart


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


def shown(text: object) -> str:
    """Text from a queue, the bucket or a server as one safe line: terminal escapes and control
    characters removed (a newline would let it forge a line of its own), then rich markup
    escaped, so `[link=…]` prints as written wherever rich renders it."""
    return escape(_ESCAPES.sub("", _BREAKS.sub(" ", str(text))))


def shown_id(job_id: object) -> str:
    """A job id as is; anything that is no job id (a planted key, a forged message) as its
    repr, so it cannot pass for one."""
    return str(job_id) if is_job_id(job_id) else shown(repr(job_id))


def warn_untrusted(untrusted: dict[str, str]) -> None:
    """One line on stderr per key or id not followed (tts_fleet/client/keys.py), named by its
    repr so a planted one shows exactly what it is."""
    for key, why in sorted(untrusted.items()):
        click.secho(shown(f"warning: skipped untrusted {key!r}: {why}"), err=True, fg="yellow")
