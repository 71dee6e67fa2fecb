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
    lines += ["", *pool_lines(report)]
    lines.append(
        "network data per cold start: "
        + ", ".join(f"{m} ${modes[m].running.network_data_per_cold_start_usd:.4f}" for m in names)
    )
    missing = report.prices_fallback_to_us_east_1
    if missing:
        lines.append(f"no {report.region} price for {', '.join(missing)}: us-east-1 used")
    return "\n".join(lines)


def pool_lines(report: CostReport) -> list[str]:
    """Each pool's worker-hour: the type Managed Instances would launch (instance + fee), and
    the dearest type the pool admits when that one is short."""
    lines = [
        f"running, per worker-hour (instance + Managed Instances fee; Spot as of "
        f"{report.spot_prices_as_of}):"
    ]
    for p in report.pools:
        dearer = (
            f"; up to ${p.dearest_usd_per_hour:.4f} ({p.dearest_type})"
            if p.dearest_type != p.instance_type
            else ""
        )
        lines.append(
            f"  {p.pool} ({p.capacity_type}, {p.min_workers}-{p.max_workers} workers): "
            f"{p.instance_type} ${p.hourly_usd:.4f} + ${p.management_fee_usd:.4f} "
            f"= ${p.usd_per_hour:.4f}{dearer}"
        )
    return lines
