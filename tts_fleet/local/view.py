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


def status_line(sample: Tick, submitted: int, idle: str = "") -> str:
    return (
        f"tick {_when(sample):>4}  outstanding {shown_outstanding(sample, submitted):>4}  "
        f"in flight {sample.in_flight:>3}  workers {sample.running}/{sample.desired} "
        f"(pending {sample.pending}, stopping {sample.stopping})  "
        f"done {_done(sample, submitted)}  failed {sample.failed}  {_driver(sample)}"
        + (f"  pools {pools_text(sample)}" if sample.pools else "")
        + (f"  {idle}" if idle else "")
    )


def pools_text(sample: Tick) -> str:
    """Each capacity pool's group: running/desired, pending, whether its capacity is out (the
    --capacity-outage) and whether the controller has moved its demand on (and why)."""
    return ", ".join(_pool_text(pool) for pool in sample.pools)


def _pool_text(pool: dict[str, object]) -> str:
    text = f"{pool['pool']} {pool['running']}/{pool['desired']}"
    if pool["pending"]:
        text += f" (pending {pool['pending']})"
    if pool["refusing"]:
        text += " outage"
    if not pool["available"]:
        text += f" skipped: {pool['cause']}"
    return text


def shown_outstanding(sample: Tick, submitted: int) -> int:
    """SQS's approximate counts race the receives (40 jobs can read as 41 outstanding): never
    show more than the run's own jobs can be. A fleet fed only from elsewhere
    (--keep-running, nothing submitted here) shows the count as SQS gives it."""
    if submitted <= 0:
        return sample.outstanding
    return min(sample.outstanding, max(0, submitted - sample.completed - sample.failed))


def _done(sample: Tick, submitted: int) -> str:
    return f"{sample.completed}/{submitted}" if submitted > 0 else str(sample.completed)


def idle_countdown(quiet_ticks: int, idle_minutes: int, sample: Tick) -> str:
    """How long the queue has been empty, against the idle alarm's window that sends the fleet
    to zero. The controller learns its own window (and may keep a worker for the arrival
    rate), so there the count stands alone beside its reason."""
    if quiet_ticks <= 0 or (sample.desired == 0 and sample.running == 0):
        return ""
    if sample.reason:
        return f"idle {quiet_ticks} ticks"
    return f"idle {quiet_ticks} of {idle_minutes} ticks"


def _when(sample: Tick) -> str:
    """The tick; in controller mode, with the sample's sixth of it (10 s samples)."""
    return f"{sample.minute:.2f}" if sample.reason else str(sample.tick)


def _driver(sample: Tick) -> str:
    """What set the count: the alarm in ALARM, or the controller and its reason."""
    return f"controller {sample.reason}" if sample.reason else f"alarm {sample.alarm}"


class LiveView:
    def __init__(self, console: Console, idle_minutes: int = 0) -> None:
        self.console = console
        self.interactive = console.is_terminal
        self.idle_minutes = idle_minutes
        self._live: Live | None = None
        self._backlog: list[int] = []
        self._last = ""
        self._quiet = 0  # ticks in a row with nothing outstanding
        self._last_tick = -1

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

    def draining(self, jobs: int) -> None:
        """Said at once on Ctrl-C/SIGTERM/SIGHUP, so the drain is not a frozen screen."""
        self.note(f"stopping: draining {jobs} job(s) in flight… (Ctrl-C again: stop at once)")

    def update(self, sample: Tick, submitted: int) -> None:
        self._backlog.append(shown_outstanding(sample, submitted))
        minute = int(sample.minute) if sample.reason else sample.tick
        if minute != self._last_tick:  # controller mode samples six times a tick
            self._last_tick = minute
            self._quiet = self._quiet + 1 if sample.outstanding == 0 else 0
        idle = idle_countdown(self._quiet, self.idle_minutes, sample)
        if self._live is not None:
            self._live.update(self._panel(sample, submitted, idle), refresh=True)
            return
        line = status_line(sample, submitted, idle)
        key = line.split("  ", 1)[1]  # unchanged state except the tick: no new line
        if key != self._last:
            self._last = key
            self.console.print(line, highlight=False, markup=False)

    def _panel(self, sample: Tick, submitted: int, idle: str) -> Panel:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("tick (= 1 CloudWatch minute)", _when(sample))
        table.add_row(
            "outstanding (visible + in flight)", str(shown_outstanding(sample, submitted))
        )
        table.add_row("in flight", str(sample.in_flight))
        table.add_row("workers running / desired", f"{sample.running} / {sample.desired}")
        table.add_row("pending (cold start) / stopping", f"{sample.pending} / {sample.stopping}")
        table.add_row("completed", _done(sample, submitted))
        table.add_row(
            "failed (DLQ)", Text(str(sample.failed), style="red" if sample.failed else "")
        )
        label, _, value = _driver(sample).partition(" ")
        table.add_row(label, value)
        for pool in sample.pools:
            name, _, value = _pool_text(pool).partition(" ")
            table.add_row(f"pool {name} running / desired", value)
        if idle:
            table.add_row("idle window", idle.removeprefix("idle "))
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
