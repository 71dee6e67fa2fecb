"""The outcome of a local run: summary statistics from the manifests, and the timeline PNG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tts_fleet.local.scaler import Tick
from worker.jobs import Manifest


@dataclass(frozen=True)
class Quality:
    """The workers' output checks over the run (manifests' and quality failures' `qa`), and
    what became of the pieces the speech server was told to fault (--faults)."""

    mode: str
    pieces: int
    rerendered: int  # attempts beyond a piece's first
    failed_jobs: int  # jobs whose piece failed every attempt
    injected: dict[str, int] | None = None  # faulted attempts by kind; None: no --faults
    caught: int = 0
    delivered_bad: int = 0  # faulted pieces stored as passed

    def rows(self) -> list[tuple[str, str]]:
        rows = [
            (
                f"output checks ({self.mode})",
                f"{self.pieces} pieces, {self.rerendered} re-rendered, "
                f"{self.failed_jobs} job(s) failed on quality",
            )
        ]
        if self.injected is not None:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.injected.items())) or "none"
            total = sum(self.injected.values())
            rows.append(
                (
                    "faults injected (--faults)",
                    f"{total} ({kinds}); caught {self.caught}, "
                    f"delivered as done {self.delivered_bad}",
                )
            )
        return rows


@dataclass(frozen=True)
class Summary:
    submitted: int
    completed: int
    failed: int
    invalid_lines: int
    unfinished: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    audio_s: float
    worker_s: float
    wall_s: float
    peak_workers: int
    ticks: int
    interrupted: bool
    out_dir: str
    timeline: str | None
    quality: Quality | None = None

    @property
    def ok(self) -> bool:
        """Every job has audio: nothing failed, nothing left over, no input line skipped."""
        return self.unfinished == 0 and self.failed == 0 and self.invalid_lines == 0

    def rows(self) -> list[tuple[str, str]]:
        rows = [
            ("jobs", f"{self.completed} done of {self.submitted} submitted"),
            ("failed (in the DLQ)", str(self.failed)),
        ]
        if self.interrupted:
            rows.append(("stopped", "interrupted (Ctrl-C or SIGTERM); workers drained"))
        if self.invalid_lines:
            rows.append(("invalid input lines (skipped)", str(self.invalid_lines)))
        if self.unfinished:
            where = f"{self.out_dir}/unfinished.jsonl"
            rows.append(("unfinished", f"{self.unfinished}, saved to {where} (use --input)"))
        rows += [
            (
                "latency p50 / p95",
                f"{_seconds(self.latency_p50_s)} / {_seconds(self.latency_p95_s)}",
            ),
            ("audio produced", f"{self.audio_s:.1f} s"),
            ("worker-seconds used", f"{self.worker_s:.1f} s (peak {_workers(self.peak_workers)})"),
            ("wall time", f"{self.wall_s:.1f} s over {self.ticks} ticks"),
            ("outputs (audio + manifests)", self.out_dir),
            ("logs (workers, speech server)", f"{self.out_dir}/logs"),
        ]
        if self.timeline:
            rows.append(("timeline", self.timeline))
        if self.quality is not None:
            rows += self.quality.rows()
        return rows

    def to_json(self) -> dict[str, Any]:
        data = {**asdict(self), "ok": self.ok}
        if self.quality is None:
            del data["quality"]  # runs without checks keep their documented keys
        return data


def _workers(count: int) -> str:
    return f"{count} worker" if count == 1 else f"{count} workers"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def latency(manifest: Manifest) -> float:
    """Queue wait + synthesis, as the worker measured them."""
    return manifest.queue_wait_s + manifest.synth_s


def read_manifests(paths: Sequence[Path]) -> list[Manifest]:
    """The worker's manifests among `paths`; one it did not write that way raises."""
    return [Manifest.model_validate_json(p.read_bytes()) for p in paths if p.suffix == ".json"]


def audio_seconds(manifests: Sequence[Manifest]) -> float:
    return sum(m.duration_s or 0.0 for m in manifests)


# Controller mode: at most this many decision labels, so a long run stays readable.
MAX_DECISION_LABELS = 12


def write_timeline(samples: Sequence[Tick], path: Path, title: str) -> Path:
    """Backlog, in flight and completed over time above desired and running workers; in
    controller mode, each change of the controller's reason is labelled where it happened."""
    import matplotlib

    matplotlib.use("Agg")  # no display here, and none needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 5.8), dpi=110)
    _jobs_panel(top, samples)
    top.set_title(title, fontsize="medium")
    _workers_panel(bottom, samples)
    for axes in (top, bottom):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes.grid(alpha=0.25)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def _clock(samples: Sequence[Tick]) -> list[float]:
    """The x axis: the scaler's own clock in minutes (ticks), whatever its sampling."""
    return [s.minute or float(s.tick) for s in samples]


def _jobs_panel(axes: Any, samples: Sequence[Tick]) -> None:
    ticks = _clock(samples)
    outstanding = [s.outstanding for s in samples]
    axes.fill_between(ticks, outstanding, step="post", alpha=0.3, label="outstanding")
    axes.step(ticks, [s.in_flight for s in samples], where="post", label="in flight")
    axes.step(ticks, [s.completed for s in samples], where="post", label="completed")
    axes.set_ylabel("jobs")


def _workers_panel(axes: Any, samples: Sequence[Tick]) -> None:
    ticks = _clock(samples)
    desired = [s.desired for s in samples]
    running = [s.running for s in samples]
    axes.step(ticks, desired, where="post", linestyle="--", color="black", label="desired")
    axes.step(ticks, running, where="post", color="tab:orange", label="running")
    zeros = [0] * len(ticks)
    axes.fill_between(ticks, zeros, [s.pending for s in samples], step="post",
                      color="tab:purple", alpha=0.25, label="cold start")  # fmt: skip
    axes.fill_between(ticks, zeros, [s.stopping for s in samples], step="post",
                      color="tab:red", alpha=0.25, hatch="//", label="draining")  # fmt: skip
    kept = [r > d for r, d in zip(running, desired, strict=True)]
    axes.fill_between(ticks, desired, running, where=kept, step="post", color="tab:orange",
                      alpha=0.2, label="busy, protected")  # fmt: skip
    for index, tick in enumerate(idle_firings(samples)):  # every firing, labelled once
        axes.axvline(tick, color="grey", linestyle=":", label="idle alarm" if index == 0 else None)
    _pool_lines(axes, samples, ticks)
    _decision_labels(axes, samples, ticks)
    axes.set_ylabel("workers")
    axes.set_xlabel("tick (one tick = one CloudWatch minute)")


def idle_firings(samples: Sequence[Tick]) -> list[int]:
    """The ticks where the idle alarm went into ALARM (each firing, not only the first; the
    state the run starts in is no firing)."""
    return [
        s.tick for i, s in enumerate(samples)
        if s.alarm == "idle" and i > 0 and samples[i - 1].alarm != "idle"
    ]  # fmt: skip


def decision_changes(samples: Sequence[Tick]) -> list[int]:
    """Indexes of the samples whose controller reason differs from the one before."""
    changes = [i for i, s in enumerate(samples) if s.reason and (
        i == 0 or s.reason != samples[i - 1].reason)]  # fmt: skip
    return changes[:MAX_DECISION_LABELS]


def _decision_labels(axes: Any, samples: Sequence[Tick], clock: Sequence[float]) -> None:
    changes = decision_changes(samples)
    if not changes:
        return
    xs, ys = [clock[i] for i in changes], [samples[i].desired for i in changes]
    axes.scatter(xs, ys, marker="o", s=18, color="black", zorder=3, label="controller decision")
    for x, y, i in zip(xs, ys, changes, strict=True):
        axes.annotate(samples[i].reason, (x, y), xytext=(3, 6), textcoords="offset points",
                      fontsize="x-small", rotation=30)  # fmt: skip


def pool_names(samples: Sequence[Tick]) -> list[str]:
    """The capacity pools of a run, in the stack's order (none without pools)."""
    return [str(pool["pool"]) for pool in samples[0].pools] if samples else []


def pool_changes(samples: Sequence[Tick]) -> list[tuple[int, str, str]]:
    """(sample index, pool, label) where a pool's availability changed: its demand moved on
    ("spot skipped: provisioning-timeout") or its cooldown ended ("spot back")."""
    found = []
    for index, sample in enumerate(samples):
        for pool in sample.pools:
            if pool["change"] == "unavailable":
                found.append((index, str(pool["pool"]), f"{pool['pool']} skipped: {pool['cause']}"))
            elif pool["change"] == "available":
                found.append((index, str(pool["pool"]), f"{pool['pool']} back"))
    return found


def _pool_lines(axes: Any, samples: Sequence[Tick], clock: Sequence[float]) -> None:
    """With capacity pools: each pool's running workers, its outage shaded, and where the
    controller moved its demand on or back."""
    for number, name in enumerate(pool_names(samples)):
        color = f"C{number + 4}"  # clear of the panel's own colours
        rows = [next(p for p in s.pools if p["pool"] == name) for s in samples]
        running = [int(str(row["running"])) for row in rows]
        axes.step(clock, running, where="post", color=color, linewidth=1,
                  label=f"running in {name}")  # fmt: skip
        refusing = [bool(row["refusing"]) for row in rows]
        if not any(refusing):
            continue
        axes.fill_between(
            clock, 0, 1, where=refusing, step="post", color=color, alpha=0.1,
            transform=axes.get_xaxis_transform(), label=f"{name}: no capacity",
        )  # fmt: skip
    for index, _, label in pool_changes(samples):
        axes.axvline(clock[index], color="tab:red", linestyle="-.", linewidth=0.8)
        axes.annotate(label, (clock[index], 0), xytext=(3, 3), textcoords="offset points",
                      fontsize="x-small", rotation=90, color="tab:red")  # fmt: skip
