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


def timeline(results: list[SimResult], path: Path) -> None:
    """Outstanding jobs, desired and running tasks, cumulative completions; one panel each."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.2), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        s = result.summary
        minutes = [x.t / 60.0 for x in result.samples]
        ax.step(minutes, [x.outstanding for x in result.samples], where="post",
                label="outstanding jobs", color="tab:red")  # fmt: skip
        ax.step(minutes, [x.completed for x in result.samples], where="post",
                label="completed (cumulative)", color="tab:green")  # fmt: skip
        ax.set_xlabel("minutes")
        ax.set_ylabel("jobs")
        tasks = ax.twinx()
        tasks.step(minutes, [x.desired for x in result.samples], where="post",
                   label="desired tasks", color="tab:blue", linestyle="--")  # fmt: skip
        tasks.step(minutes, [x.running for x in result.samples], where="post",
                   label="running tasks", color="tab:purple")  # fmt: skip
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
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
