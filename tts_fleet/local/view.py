"""What a person watches during `tts-fleet local`: a rich live panel on a terminal, plain
lines (one per change) otherwise, and the closing summary table."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tts_fleet.local.report import Summary
from tts_fleet.local.scaler import Tick

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """The last `width` values as block characters scaled to their maximum."""
    tail = list(values)[-width:]
    top = max(tail, default=0)
    if top <= 0:
        return SPARK[0] * len(tail)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in tail)


def status_line(sample: Tick, submitted: int) -> str:
    return (
        f"tick {_when(sample):>4}  outstanding {sample.outstanding:>4}  "
        f"in flight {sample.in_flight:>3}  workers {sample.running}/{sample.desired} "
        f"(pending {sample.pending}, stopping {sample.stopping})  "
        f"done {sample.completed}/{submitted}  failed {sample.failed}  {_driver(sample)}"
    )


def _when(sample: Tick) -> str:
    """The tick; in controller mode, with the sample's sixth of it (10 s samples)."""
    return f"{sample.minute:.2f}" if sample.reason else str(sample.tick)


def _driver(sample: Tick) -> str:
    """What set the count: the alarm in ALARM, or the controller and its reason."""
    return f"controller {sample.reason}" if sample.reason else f"alarm {sample.alarm}"


class LiveView:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.interactive = console.is_terminal
        self._live: Live | None = None
        self._backlog: list[int] = []
        self._last = ""

    def __enter__(self) -> LiveView:
        if self.interactive:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def update(self, sample: Tick, submitted: int) -> None:
        self._backlog.append(sample.outstanding)
        if self._live is not None:
            self._live.update(self._panel(sample, submitted), refresh=True)
            return
        line = status_line(sample, submitted)
        key = line.split("  ", 1)[1]  # unchanged state except the tick: no new line
        if key != self._last:
            self._last = key
            self.console.print(line, highlight=False, markup=False)

    def _panel(self, sample: Tick, submitted: int) -> Panel:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("tick (= 1 CloudWatch minute)", _when(sample))
        table.add_row("outstanding (visible + in flight)", f"{sample.outstanding}")
        table.add_row("in flight", str(sample.in_flight))
        table.add_row("workers desired / running", f"{sample.desired} / {sample.running}")
        table.add_row("pending (cold start) / stopping", f"{sample.pending} / {sample.stopping}")
        table.add_row("completed", f"{sample.completed} / {submitted}")
        table.add_row("failed (DLQ)", str(sample.failed))
        label, _, value = _driver(sample).partition(" ")
        table.add_row(label, value)
        spark = Text(sparkline(self._backlog), style="cyan")
        body = Group(table, Text.assemble("backlog ", spark))
        return Panel(body, title="tts-fleet local", subtitle="Ctrl-C stops cleanly", expand=False)


def summary_table(summary: Summary) -> Table:
    table = Table(title="tts-fleet local: summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, value in summary.rows():
        table.add_row(label, value)
    return table
