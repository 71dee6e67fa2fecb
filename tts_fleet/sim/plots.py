"""PNG charts for `simulate --plot` and `advise --plot` (matplotlib, Agg, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tts_fleet.sim.advise import Advice
from tts_fleet.sim.report import SimResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt

    return plt


# The local timeline's colours (tts_fleet/local/report.py), so the two pictures read alike.
DESIRED = {"color": "black", "linestyle": "--"}
RUNNING = {"color": "tab:orange"}
OUTSTANDING = {"color": "tab:red"}
COMPLETED = {"color": "tab:green"}
LONG_TRACE_MINUTES = 180  # past three hours the axis reads in hours


def timeline(results: list[SimResult], path: Path) -> None:
    """Outstanding jobs, desired and running tasks, cumulative completions; one panel each,
    the legend outside the data."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(7.5 * len(results), 4.4), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        s = result.summary
        minutes = [x.t / 60.0 for x in result.samples]
        hours = bool(minutes) and minutes[-1] > LONG_TRACE_MINUTES
        times = [m / 60.0 for m in minutes] if hours else minutes
        ax.step(times, [x.outstanding for x in result.samples], where="post",
                label="outstanding jobs", **OUTSTANDING)  # fmt: skip
        ax.step(times, [x.completed for x in result.samples], where="post",
                label="completed (cumulative)", **COMPLETED)  # fmt: skip
        ax.set_xlabel("hours" if hours else "minutes")
        ax.set_ylabel("jobs")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        tasks = ax.twinx()
        tasks.step(times, [x.desired for x in result.samples], where="post",
                   label="desired tasks", **DESIRED)  # fmt: skip
        tasks.step(times, [x.running for x in result.samples], where="post",
                   label="running tasks", **RUNNING)  # fmt: skip
        tasks.set_ylabel("tasks")
        tasks.set_ylim(bottom=0, top=max(1, s.settings.max_workers) * 1.1)
        ax.set_title(
            f"{s.policy} policy, {s.profile} profile — {s.trace}\n"
            f"drain {_minutes(s.drain_s)} min, p95 {_minutes(s.latency.p95)} min, "
            f"{s.cost.gpu_instance_hours or 0.0:.1f} GPU-h",
            fontsize=9,
        )
        lines = ax.get_legend_handles_labels()
        more = tasks.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper center",
                  bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def frontier(report: Advice, path: Path) -> None:
    """Every swept setting, the Pareto frontier, the baseline and the recommendation."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = report.points
    ax.scatter([p.cost_usd for p in points], [p.p95_s for p in points], s=12,
               color="lightgray", label="swept settings")  # fmt: skip
    front = report.frontier
    ax.plot([p.cost_usd for p in front], [p.p95_s for p in front], "o-",
            color="tab:blue", label="Pareto frontier")  # fmt: skip
    for p in front:
        ax.annotate(f"{p.idle_minutes}m/{p.host_idle_seconds}s",
                    (p.cost_usd, p.p95_s), fontsize=7)  # fmt: skip
    base = report.baseline
    ax.scatter([base.cost_usd], [base.p95_s], marker="s", color="tab:orange",
               label="configured", zorder=3)  # fmt: skip
    if report.recommendation is not None:
        rec = report.recommendation.point
        ax.scatter([rec.cost_usd], [rec.p95_s], marker="*", s=160, color="tab:green",
                   label="recommended", zorder=4)  # fmt: skip
    ax.set_xlabel("cost over the trace, USD (GPU + floor)")
    ax.set_ylabel("p95 latency, s")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_title(f"{report.trace}: idleMinutes / hostIdleSeconds", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
