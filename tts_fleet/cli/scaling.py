"""`tts-fleet scaling`: what a stack deploys to size its fleet, in its `scaling.mode`.

- `controller` (the default): the parameters the controller function is deployed with
  (tts_fleet/config/topology.py computes them for components/controller.py too), its
  sampling, the safety-net alarm and, with `gpu.pools`, the pools in the order the
  controller fills them (priced from the cost tables) and when it sets one aside.
- `alarms`: the step-scaling bands, computed by tts_fleet/scaling/bands.py, the same code the
  StepScaling component turns into step adjustments, so what this prints is what Application
  Auto Scaling will apply.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from tts_fleet.cli.errors import BadInput, bad_config
from tts_fleet.cli.options import (
    json_flag,
    project_dir_option,
    scaling_override_flags,
    scaling_overrides,
    stack_file_option,
)
from tts_fleet.config.models import ConfigError, ScalingConfig, StackConfig
from tts_fleet.config.stack_file import stack_config, stack_region
from tts_fleet.config.topology import controller_params
from tts_fleet.cost.pools import pool_specs
from tts_fleet.cost.report import BASE_REGION, CostError
from tts_fleet.scaling.alarms import PERIOD_S
from tts_fleet.scaling.bands import SCALE_OUT_THRESHOLD, BandPlan, bands, formula
from tts_fleet.scaling.controller import SAFETY_NET_MINUTES, SAMPLE_INTERVAL_S, ControllerParams
from tts_fleet.scaling.policy import MODES
from tts_fleet.scaling.pools import (
    INTERRUPTION_WINDOW_S,
    MAX_INTERRUPTIONS_PER_WORKER_HOUR,
    MIN_INTERRUPTIONS,
    PoolSpec,
    fill_order,
)


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
            "schedules": schedules_json(self.scaling),
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


@dataclass(frozen=True)
class ControllerReport:
    """`tts-fleet scaling` in controller mode: what the function is deployed with."""

    stack: str
    scaling: ScalingConfig
    params: ControllerParams
    safety_net_workers: int  # the safety net's ExactCapacity
    pools: tuple[PoolSpec, ...] = ()  # gpu.pools, priced, in the stack's order; () without
    provisioning_timeout_s: int = 0  # gpu.provisioningTimeoutSeconds
    pool_cooldown_s: int = 0  # gpu.poolCooldownSeconds

    def to_json(self) -> dict[str, Any]:
        data = {
            "stack": self.stack,
            "mode": "controller",
            "scaling": self.scaling.model_dump(by_alias=True, mode="json"),
            "controller": {"sample_interval_s": SAMPLE_INTERVAL_S, **asdict(self.params)},
            "safety_net": {
                "minutes": SAFETY_NET_MINUTES,
                "exact_capacity": self.safety_net_workers,
            },
            "schedules": schedules_json(self.scaling),
        }
        if self.pools:  # a stack without pools prints what it always printed
            data["pools"] = [asdict(pool) for pool in fill_order(self.pools)]
            data["placement"] = {
                "provisioning_timeout_s": self.provisioning_timeout_s,
                "cooldown_s": self.pool_cooldown_s,
            }
        return data


def controller_report(name: str, cfg: StackConfig, region: str = BASE_REGION) -> ControllerReport:
    params = controller_params(cfg)
    pools = pool_specs(cfg, region) if cfg.gpu.pools else ()
    gpu = cfg.gpu
    return ControllerReport(
        name,
        cfg.scaling,
        params,
        max(1, cfg.scaling.min_workers),
        pools,
        gpu.provisioning_timeout_seconds,
        gpu.pool_cooldown_seconds,
    )


def render_controller(data: ControllerReport) -> str:
    s, p = data.scaling, data.params
    period = int(PERIOD_S)
    lines = [
        f"{data.stack}: minWorkers {s.min_workers}, maxWorkers {s.max_workers}, "
        f"jobsPerWorker {s.jobs_per_worker}, idleMinutes {s.idle_minutes}, "
        f"hostIdleSeconds {s.host_idle_seconds}",
        "",
        "mode: controller (a function sets the desired count; no step bands)",
        f"sampling: every {SAMPLE_INTERVAL_S:g} s while work is outstanding or running; invoked "
        "every minute and by `tts-fleet submit`",
        f"bounds: {p.min_workers}..{p.max_workers} workers (the scalable target's; schedules "
        "move them)",
        f"backlog: one worker per {p.jobs_per_worker} outstanding jobs expected when a new GPU "
        "would arrive (the running and starting workers' work until then taken off)",
        f"cold start: {p.cold_start_s:g} s expected; a new GPU only if at least "
        f"{p.cold_start_work:g} x that ({p.cold_start_work * p.cold_start_s:.0f} s) of work "
        "would be left for it (coldStartWork)",
        f"throughput: {p.seconds_per_job:g} s per job per worker with {p.concurrency} in "
        "flight (the default timing profile)",
        f"idle: the last worker waits 0 or {s.idle_minutes} min, whichever the recent idle gaps "
        f"made cheaper, then minWorkers {s.min_workers}",
        host_line(s.host_idle_seconds),
        f"safety net: alarm visible >= 1 with no task running or wanted for "
        f"{SAFETY_NET_MINUTES} x {period} s -> ExactCapacity {data.safety_net_workers}",
    ]
    for entry in s.schedules:
        lines.append(
            f"schedule: {entry.expression} UTC -> min {entry.min_workers}, max {entry.max_workers}"
        )
    return "\n".join(lines + pool_lines(data))


def pool_lines(data: ControllerReport) -> list[str]:
    """The pools in the order the controller fills them, and when it sets one aside."""
    if not data.pools:
        return []
    filled = ", ".join(
        f"{p.name} ({p.capacity_type}, ${p.usd_per_hour:g}/h, {p.min_workers}..{p.max_workers})"
        for p in fill_order(data.pools)
    )
    window = int(INTERRUPTION_WINDOW_S / 60)
    return [
        f"pools: {filled}: reserved first, then the cheapest available; sticky, moved back to "
        "a cheaper pool one worker at a time",
        f"pool unavailable for {data.pool_cooldown_s} s (poolCooldownSeconds): a task waiting "
        f"for capacity over {data.provisioning_timeout_s} s (provisioningTimeoutSeconds), a "
        f"placement failure, or Spot interruptions >= max({MIN_INTERRUPTIONS}, "
        f"{MAX_INTERRUPTIONS_PER_WORKER_HOUR:g} x its workers) in {window} min; it is cut to "
        "its running tasks and the demand goes to the next pool",
    ]


def schedules_json(s: ScalingConfig) -> list[dict[str, Any]]:
    return [
        {"schedule": e.expression, "minWorkers": e.min_workers, "maxWorkers": e.max_workers}
        for e in s.schedules
    ]


def resolve(
    stack: str | None, project_dir: Path, flags: dict[str, int | None], mode: str | None = None
) -> StackConfig:
    """The stack file's config (or the defaults), with the flags on top."""
    overrides = {**scaling_overrides(flags), "mode": mode}
    return stack_config(stack, project_dir, {"scaling": overrides})


@click.command()
@stack_file_option("Read tts-fleet:scaling from Pulumi.<stack>.yaml.")
@project_dir_option()
@scaling_override_flags
@click.option("--mode", type=click.Choice(MODES), help="Override scaling.mode.")
@json_flag()
def scaling(
    stack: str | None, project_dir: Path, mode: str | None, as_json: bool, **flags: int | None
) -> None:
    """Show how a stack sizes its fleet in its scaling.mode.

    Controller mode: the controller's parameters and its safety net; alarms mode: the
    step-scaling bands (outstanding jobs -> workers).

    Without --stack the defaults are used; flags override the stack file.
    """
    try:
        cfg = resolve(stack, project_dir, flags, mode)
    except ConfigError as error:
        raise bad_config(error.problems) from None
    name = stack or "defaults"
    if cfg.scaling.mode == "controller":
        try:
            shown = controller_report(name, cfg, stack_region(stack, project_dir) or BASE_REGION)
        except CostError as error:
            raise BadInput(str(error)) from None
        click.echo(json.dumps(shown.to_json(), indent=2) if as_json else render_controller(shown))
        return
    data = report(name, cfg.scaling)
    click.echo(json.dumps(data.to_json(), indent=2) if as_json else render(data))
