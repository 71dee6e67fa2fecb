"""Plain-text tables for `simulate`, `advise` and `cost` (the --json forms are the data)."""

from __future__ import annotations

from typing import Any


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def settings(s: dict[str, Any]) -> str:
    return (
        f"{s['min_workers']}..{s['max_workers']} J{s['jobs_per_worker']} "
        f"idle {s['idle_minutes']}m host {s['host_idle_seconds']}s c{s['concurrency']}"
    )


def _rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    lat = summary["latency_s"]
    return [
        ("settings", settings(summary["settings"])),
        ("time to first result", duration(summary["first_result_s"])),
        ("latency p50", duration(lat["p50"])),
        ("latency p95", duration(lat["p95"])),
        ("latency max", duration(lat["max"])),
        ("drain time", duration(summary["drain_s"])),
        ("cold / warm task starts", f"{summary['cold_starts']} / {summary['warm_starts']}"),
        ("cancelled while pending", str(summary["cancelled_starts"])),
        ("GPU hosts launched", str(summary["hosts_launched"])),
        ("GPU instance-hours", f"{summary['gpu_instance_hours']:.2f}"),
        ("GPU cost", f"${summary['gpu_usd']:.2f}"),
        ("floor cost, same period", f"${summary['floor_usd']:.2f}"),
        ("cost per 1,000 outputs", f"${summary['usd_per_1000_outputs']:.3f}"),
    ]


def simulation_table(summaries: list[dict[str, Any]]) -> str:
    first = summaries[0]
    head = f"trace {first['trace']} ({first['jobs']} jobs), profile {first['profile']}"
    columns = [_rows(s) for s in summaries]
    width = max(len(v) for col in columns for _, v in col) + 2
    lines = [head, f"{'':<26}" + "".join(f"{s['policy']:>{width}}" for s in summaries)]
    for index, (label, _) in enumerate(columns[0]):
        lines.append(f"{label:<26}" + "".join(f"{col[index][1]:>{width}}" for col in columns))
    return "\n".join(lines)


def _point(p: dict[str, Any]) -> str:
    return (
        f"idle {p['idle_minutes']:>3}m  host {p['host_idle_seconds']:>5}s  "
        f"p95 {duration(p['p95_s']):>10}  GPU-h {p['gpu_hours']:>8.2f}  "
        f"${p['cost_usd']:>9.2f}  (${p['monthly_usd']:,.2f}/month)"
    )


def advice_table(report: dict[str, Any]) -> str:
    lines = [
        f"trace {report['trace']} ({report['jobs']} jobs), profile {report['profile']}: "
        f"{len(report['points'])} settings swept",
        f"configured   {_point(report['baseline'])}",
        "Pareto frontier (cheapest first; each faster than the one before):",
    ]
    lines += [f"  {_point(p)}" for p in report["frontier"]]
    rec = report["recommendation"]
    bounds = report["bounds"]
    if rec is None:
        if bounds["max_p95_s"] is None and bounds["max_monthly_usd"] is None:
            lines.append("no bound given: pass --max-p95-latency or --max-monthly-usd")
        else:
            lines.append(f"no swept setting meets {bounds}")
        return "\n".join(lines)
    lines.append(f"recommended  {_point(rec)}")
    lines += [
        f"  → idleMinutes {rec['idle_minutes']}, hostIdleSeconds {rec['host_idle_seconds']}",
        f"  {rec['extra_gpu_hours']:+.2f} GPU-hours (${rec['extra_usd']:+.2f}) against the "
        "configured setting over this trace",
        f"  {rec['extra_gpu_hours_vs_cheapest']:+.2f} GPU-hours "
        f"(${rec['extra_usd_vs_cheapest']:+.2f}) against the cheapest setting "
        f"(idle {report['cheapest']['idle_minutes']}m, host "
        f"{report['cheapest']['host_idle_seconds']}s, p95 "
        f"{duration(report['cheapest']['p95_s'])})",
    ]
    return "\n".join(lines)


def cost_table(report: dict[str, Any]) -> str:
    modes = report["modes"]
    names = list(modes)
    items: list[str] = []
    for mode in names:
        items += [x["item"] for x in modes[mode]["floor"] if x["item"] not in items]
    shared = [i for i in items if all(i in {x["item"] for x in modes[m]["floor"]} for m in names)]
    items = [i for i in items if i not in shared] + shared  # network lines first
    lines = [
        f"stack {report['stack']} ({report['region']}, configured mode "
        f"{report['configured_mode']}); list prices as of {report['prices_as_of']}, verify",
        f"{'idle floor, USD/month':<38}" + "".join(f"{m:>12}" for m in names),
    ]
    for item in items:
        cells = []
        for mode in names:
            match = [x for x in modes[mode]["floor"] if x["item"] == item]
            cells.append(f"{match[0]['monthly_usd']:.2f}" if match else "-")
        lines.append(f"  {item:<36}" + "".join(f"{c:>12}" for c in cells))
    lines.append(
        f"{'floor total':<38}" + "".join(f"{modes[m]['floor_monthly_usd']:>12.2f}" for m in names)
    )
    run = modes[names[0]]["running"]
    lines += [
        "",
        f"running: {run['instance_type']} ({run['capacity_type']}) "
        f"${run['gpu_hourly_usd']:.4f}/h + Managed Instances fee "
        f"${run['management_fee_hourly_usd']:.4f}/h (estimate) "
        f"= ${run['per_gpu_hour_usd']:.4f} per GPU-hour",
        "network data per cold start: "
        + ", ".join(
            f"{m} ${modes[m]['running']['network_data_per_cold_start_usd']:.4f}" for m in names
        ),
    ]
    missing = report["prices_fallback_to_us_east_1"]
    if missing:
        lines.append(f"no {report['region']} price for {', '.join(missing)}: us-east-1 used")
    return "\n".join(lines)
