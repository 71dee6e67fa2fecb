"""Plain-text tables for `simulate` and `advise` (the --json forms are the data)."""

from __future__ import annotations

from tts_fleet.sim.advise import Advice, Point
from tts_fleet.sim.report import SimSettings, SimSummary


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def settings(s: SimSettings) -> str:
    return (
        f"{s.min_workers}..{s.max_workers} J{s.jobs_per_worker} "
        f"idle {s.idle_minutes}m host {s.host_idle_seconds}s c{s.concurrency}"
    )


def _money(value: float | None, digits: int) -> str:
    return "-" if value is None else f"${value:.{digits}f}"


def _rows(summary: SimSummary) -> list[tuple[str, str]]:
    lat, cost = summary.latency, summary.cost
    hours = cost.gpu_instance_hours
    return [
        ("settings", settings(summary.settings)),
        ("time to first result", duration(summary.first_result_s)),
        ("latency p50", duration(lat.p50)),
        ("latency p95", duration(lat.p95)),
        ("latency max", duration(lat.max)),
        ("drain time", duration(summary.drain_s)),
        ("cold / warm task starts", f"{summary.cold_starts} / {summary.warm_starts}"),
        ("cancelled while pending", str(summary.cancelled_starts)),
        ("jobs killed by scale-in", str(summary.killed_jobs)),
        ("GPU hosts launched", str(summary.hosts_launched)),
        ("GPU instance-hours", "-" if hours is None else f"{hours:.2f}"),
        ("GPU cost", _money(cost.gpu_usd, 2)),
        ("floor cost, same period", _money(cost.floor_usd, 2)),
        ("cost per 1,000 outputs", _money(cost.usd_per_1000_outputs, 3)),
    ]


def _pool_rows(summary: SimSummary, names: list[str]) -> list[tuple[str, str]]:
    """Each pool of any column: its GPU-hours and cost, its interruptions and fallbacks
    ("-" where this run has no such pool), and how soon each outage's demand moved on."""
    rows = []
    usage = {pool.name: pool for pool in summary.pools}
    for name in names:
        pool = usage.get(name)
        use = "-" if pool is None else f"{pool.gpu_hours:.2f} h {_money(pool.usd, 2)}"
        events = "-" if pool is None else f"{pool.interruptions} / {pool.fallbacks}"
        rows += [(f"pool {name}: GPU-h, cost", use), ("  interrupted / fell back", events)]
    for index, outage in enumerate(summary.outages):
        rows.append((f"outage {index + 1} ({outage.pool}): fallback", duration(outage.fallback_s)))
    return rows


def _deadline_rows(summary: SimSummary) -> list[tuple[str, str]]:
    """`--deadline`: the batches met and missed, and the latest finish against its deadline
    (negative: that late)."""
    result = summary.deadlines
    if result is None:
        return [("deadlines met / missed", "-"), ("worst slack to deadline", "-")]
    slack = result.worst_slack_s
    shown = "-" if slack is None else ("-" if slack < 0 else "") + duration(abs(slack))
    return [
        ("deadlines met / missed", f"{result.met} / {result.missed}"),
        ("worst slack to deadline", shown),
    ]


def simulation_table(summaries: list[SimSummary]) -> str:
    first = summaries[0]
    head = f"trace {first.trace} ({first.jobs} jobs), profile {first.profile}"
    names = list(dict.fromkeys(pool.name for s in summaries for pool in s.pools))
    outages = max(len(s.outages) for s in summaries)
    columns = [_rows(s) for s in summaries]
    if names or outages:  # a run without pools prints the table it always printed
        columns = [rows + _pool_rows(s, names) for rows, s in zip(columns, summaries, strict=True)]
    if any(s.deadlines is not None for s in summaries):  # likewise a run without --deadline
        columns = [rows + _deadline_rows(s) for rows, s in zip(columns, summaries, strict=True)]
    width = max(len(v) for col in columns for _, v in col) + 2
    lines = [head, f"{'':<26}" + "".join(f"{s.policy:>{width}}" for s in summaries)]
    for index, (label, _) in enumerate(columns[0]):
        lines.append(f"{label:<26}" + "".join(f"{col[index][1]:>{width}}" for col in columns))
    return "\n".join(lines)


def _point(p: Point) -> str:
    kappa = "" if p.cold_start_work is None else f"κ {p.cold_start_work:<4g}  "
    return (
        f"idle {p.idle_minutes:>3}m  host {p.host_idle_seconds:>5}s  {kappa}"
        f"p95 {duration(p.p95_s):>10}  GPU-h {p.gpu_hours:>8.2f}  "
        f"${p.cost_usd:>9.2f}  (${p.monthly_usd:,.2f}/month)"
        + ("" if p.deadlines_missed is None else f"  missed {p.deadlines_missed}")
    )


def advice_table(report: Advice) -> str:
    lines = [
        f"trace {report.trace} ({report.jobs} jobs), profile {report.profile}: "
        f"{len(report.points)} settings swept",
        f"configured   {_point(report.baseline)}",
        "Pareto frontier (cheapest first; each faster than the one before):",
    ]
    lines += [f"  {_point(p)}" for p in report.frontier]
    rec, bounds = report.recommendation, report.bounds
    if rec is None:
        if bounds.max_p95_s is None and bounds.max_monthly_usd is None and not bounds.deadline_s:
            lines.append("no bound given: pass --max-p95-latency or --max-monthly-usd")
        else:
            wanted = {"max_p95_s": bounds.max_p95_s, "max_monthly_usd": bounds.max_monthly_usd}
            if bounds.deadline_s is not None:
                wanted["deadline_s"] = bounds.deadline_s
            lines.append(f"no swept setting meets {wanted}")
        return "\n".join(lines)
    chosen, cheapest = rec.point, report.cheapest
    lines.append(f"recommended  {_point(chosen)}")
    lines += [
        f"  → idleMinutes {chosen.idle_minutes}, hostIdleSeconds {chosen.host_idle_seconds}"
        + ("" if chosen.cold_start_work is None else f", coldStartWork {chosen.cold_start_work:g}"),
        f"  {rec.extra_gpu_hours:+.2f} GPU-hours (${rec.extra_usd:+.2f}) against the "
        "configured setting over this trace",
        f"  {rec.extra_gpu_hours_vs_cheapest:+.2f} GPU-hours "
        f"(${rec.extra_usd_vs_cheapest:+.2f}) against the cheapest setting "
        f"(idle {cheapest.idle_minutes}m, host "
        f"{cheapest.host_idle_seconds}s, p95 "
        f"{duration(cheapest.p95_s)})",
    ]
    return "\n".join(lines)
