"""The plain-text table of `tts-fleet cost` (the --json form is the data)."""

from __future__ import annotations

from tts_fleet.cost.report import CostReport


def cost_table(report: CostReport) -> str:
    modes = report.modes
    names = list(modes)
    items: list[str] = []
    for mode in names:
        items += [x.item for x in modes[mode].floor if x.item not in items]
    shared = [i for i in items if all(i in {x.item for x in modes[m].floor} for m in names)]
    items = [i for i in items if i not in shared] + shared  # network lines first
    lines = [
        f"stack {report.stack} ({report.region}, configured mode "
        f"{report.configured_mode}); list prices as of {report.prices_as_of}, verify",
        f"{'idle floor, USD/month':<38}" + "".join(f"{m:>12}" for m in names),
    ]
    for item in items:
        cells = []
        for mode in names:
            match = [x for x in modes[mode].floor if x.item == item]
            cells.append(f"{match[0].monthly_usd:.2f}" if match else "-")
        lines.append(f"  {item:<36}" + "".join(f"{c:>12}" for c in cells))
    lines.append(
        f"{'floor total':<38}" + "".join(f"{modes[m].floor_monthly_usd:>12.2f}" for m in names)
    )
    run = modes[names[0]].running
    lines += [
        "",
        f"running: {run.instance_type} ({run.capacity_type}) "
        f"${run.gpu_hourly_usd:.4f}/h + Managed Instances fee "
        f"${run.management_fee_hourly_usd:.4f}/h (estimate) "
        f"= ${run.per_gpu_hour_usd:.4f} per GPU-hour",
        "network data per cold start: "
        + ", ".join(f"{m} ${modes[m].running.network_data_per_cold_start_usd:.4f}" for m in names),
    ]
    missing = report.prices_fallback_to_us_east_1
    if missing:
        lines.append(f"no {report.region} price for {', '.join(missing)}: us-east-1 used")
    return "\n".join(lines)
