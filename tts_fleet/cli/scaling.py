"""`tts-fleet scaling`: the step-scaling bands a stack deploys, from its stack file.

Everything is computed by tts_fleet/scaling/bands.py, the same code the QueueAutoscaling component
turns into step adjustments, so what this prints is what Application Auto Scaling will apply.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from tts_fleet.cli.options import scaling_override_flags, scaling_overrides
from tts_fleet.config.models import ConfigError, ScalingConfig, StackConfig
from tts_fleet.config.stack_file import stack_config
from tts_fleet.scaling.bands import SCALE_OUT_THRESHOLD, BandPlan, bands, formula


def register(group: click.Group) -> None:
    group.add_command(scaling)


@dataclass(frozen=True)
class BandRow:
    """One step as outstanding range → workers, with the formula's range for comparison."""

    lower_bound: int
    upper_bound: int | None
    outstanding_min: int
    outstanding_max: int | None
    workers: int
    formula_min: int
    formula_max: int
    overprovision: float


@dataclass(frozen=True)
class WorstCase:
    outstanding: int
    formula: int
    workers: int


@dataclass(frozen=True)
class BandReport:
    """`tts-fleet scaling`: the bands a stack deploys; `to_json()` is the --json document."""

    stack: str
    scaling: ScalingConfig
    bands: tuple[BandRow, ...]
    worst_overprovision: float
    worst_at: WorstCase

    def to_json(self) -> dict[str, Any]:
        # Key order is the document's (printed without sort_keys).
        return {
            "stack": self.stack,
            "scaling": self.scaling.model_dump(by_alias=True, mode="json"),
            "bands": [asdict(row) for row in self.bands],
            "worst_overprovision": self.worst_overprovision,
            "worst_at": asdict(self.worst_at),
            "schedules": [
                {"schedule": e.expression, "minWorkers": e.min_workers, "maxWorkers": e.max_workers}
                for e in self.scaling.schedules
            ],
        }


def band_rows(cfg: ScalingConfig, plan: BandPlan) -> tuple[BandRow, ...]:
    rows = []
    for band in plan.bands:
        low = band.lower + SCALE_OUT_THRESHOLD
        high = None if band.upper is None else band.upper + SCALE_OUT_THRESHOLD - 1
        formula_low = formula(low, cfg)
        rows.append(
            BandRow(
                lower_bound=band.lower,
                upper_bound=band.upper,
                outstanding_min=low,
                outstanding_max=high,
                workers=band.capacity,
                formula_min=formula_low,
                formula_max=cfg.max_workers if high is None else formula(high, cfg),
                overprovision=band.capacity / formula_low,
            )
        )
    return tuple(rows)


def report(name: str, cfg: ScalingConfig) -> BandReport:
    plan = bands(cfg)
    rows = band_rows(cfg, plan)
    worst = max(rows, key=lambda row: row.overprovision)
    return BandReport(
        stack=name,
        scaling=cfg,
        bands=rows,
        worst_overprovision=plan.worst_overprovision,
        worst_at=WorstCase(worst.outstanding_min, worst.formula_min, worst.workers),
    )


def render(data: BandReport) -> str:
    s = data.scaling
    lines = [
        f"{data.stack}: minWorkers {s.min_workers}, maxWorkers {s.max_workers}, "
        f"jobsPerWorker {s.jobs_per_worker}, idleMinutes {s.idle_minutes}, "
        f"hostIdleSeconds {s.host_idle_seconds}",
        "",
        "scale-out: alarm visible + notVisible >= 1 (1 x 60 s, Maximum) -> StepScaling, "
        f"ExactCapacity, {len(data.bands)} step(s)",
        f"{'step':>4}  {'bounds (metric - 1)':<20} {'outstanding':<14} {'workers':>7}  "
        f"{'formula':<9} {'over':>6}",
    ]
    lines += [_row_line(index, row) for index, row in enumerate(data.bands, start=1)]
    lines += ["", worst_line(data), idle_line(s), host_line(s.host_idle_seconds)]
    for entry in s.schedules:
        lines.append(
            f"schedule: {entry.expression} UTC -> min {entry.min_workers}, max {entry.max_workers}"
        )
    return "\n".join(lines)


def _row_line(index: int, row: BandRow) -> str:
    upper = "inf" if row.upper_bound is None else row.upper_bound
    high = row.outstanding_max
    span = f"{row.outstanding_min}+" if high is None else f"{row.outstanding_min}-{high}"
    formulas = f"{row.formula_min}-{row.formula_max}"
    if row.formula_min == row.formula_max:
        formulas = str(row.formula_min)
    bounds = f"[{row.lower_bound}, {upper})"
    return (
        f"{index:>4}  {bounds:<20} {span:<14} "
        f"{row.workers:>7}  {formulas:<9} {row.overprovision:>5.2f}x"
    )


def worst_line(data: BandReport) -> str:
    at = data.worst_at
    if data.worst_overprovision == 1.0:
        return "worst-case over-provisioning: 1.000x (exact: one step per worker count)"
    return (
        f"worst-case over-provisioning: {data.worst_overprovision:.3f}x "
        f"(at {at.outstanding} outstanding: formula {at.formula}, bands {at.workers})"
    )


def idle_line(s: ScalingConfig) -> str:
    return (
        f"idle: outstanding <= 0 for {s.idle_minutes} x 60 s (missing data = idle) -> "
        f"ExactCapacity {s.min_workers}"
    )


def host_line(seconds: int) -> str:
    if seconds < 0:
        return "hosts: scaleInAfter -1: the idle-host scale-in optimisation is off"
    return f"hosts: an idle GPU host is kept {seconds} s for reuse (scaleInAfter)"


def resolve(stack: str | None, project_dir: Path, flags: dict[str, int | None]) -> StackConfig:
    """The stack file's config (or the defaults), with the flags on top."""
    return stack_config(stack, project_dir, {"scaling": scaling_overrides(flags)})


@click.command()
@click.option("--stack", help="Read tts-fleet:scaling from Pulumi.<stack>.yaml.")
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where the stack files are.",
)
@scaling_override_flags
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def scaling(stack: str | None, project_dir: Path, as_json: bool, **flags: int | None) -> None:
    """Show the step-scaling bands (outstanding jobs -> workers) a stack deploys.

    Without --stack the defaults are used; flags override the stack file.
    """
    try:
        cfg = resolve(stack, project_dir, flags)
    except ConfigError as error:
        for problem in error.problems:
            click.secho(f"Error: {problem}", err=True, fg="red")
        sys.exit(2)
    data = report(stack or "defaults", cfg.scaling)
    click.echo(json.dumps(data.to_json(), indent=2) if as_json else render(data))
