"""`tts-fleet simulate`, `advise` and `cost`: a policy on a trace, the idle windows, the bill.

Scaling comes from Pulumi.<stack>.yaml (or the config defaults) with flags on top, validated by
the same models as a deployment, and the simulator drives the stack's mode through the one
`Policy` of tts_fleet/scaling/policy.py, the code the deployed controller runs and the model
of the alarms the Pulumi program deploys, so the simulation and the deployment cannot disagree.
The timing profile is `--timing`; `--profile` is the AWS profile, as in every command.

Capacity pools (issue #22) come from the stack's `gpu.pools` or from `--pool` flags, priced from
the cost tables (tts_fleet/cost/pools.py); `--interruptions` and `--capacity-outage` say what
the cloud does to them (tts_fleet/sim/capacity.py), and `--compare` takes the pool peers
`on-demand-only` and `spot-only` beside the policies.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import click

from tts_fleet.cli import look
from tts_fleet.cli.errors import BadInput, bad_config
from tts_fleet.cli.options import (
    aws_flags,
    json_flag,
    project_dir_option,
    scaling_override_flags,
    scaling_overrides,
    stack_file_option,
)
from tts_fleet.config.models import ConfigError, PoolConfig, StackConfig
from tts_fleet.config.stack_file import StackFile, stack_config, stack_region, with_overrides
from tts_fleet.cost.pools import pool_specs
from tts_fleet.cost.report import BASE_REGION, CostError, cost_report, rates_for
from tts_fleet.cost.text import cost_table
from tts_fleet.exit_codes import ExitCode
from tts_fleet.scaling.physics import PROFILES, Batching, Profile
from tts_fleet.scaling.pools import PlacementParams
from tts_fleet.sim import text as sim_text
from tts_fleet.sim.capacity import (
    Capacity,
    CapacityError,
    parse_interruptions,
    parse_outage,
    parse_pool,
)
from tts_fleet.sim.engine import simulate
from tts_fleet.sim.model import MODES, PolicySetup, peer_policy, stack_policy
from tts_fleet.sim.traces import Trace, TraceError, cloudwatch_arrivals, parse_trace

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$")
# The pool peers `--compare` takes: the stack's fleet on one pool of one capacity type.
POOL_PEERS = {"on-demand-only": "on-demand", "spot-only": "spot"}


def load_config(stack: str | None, project_dir: Path, flags: dict[str, Any]) -> StackConfig:
    """The stack file (or defaults) with the scaling and concurrency flags on top, and the
    `--pool` flags (if any) as its gpu.pools."""
    worker = {"concurrency": flags.get("concurrency")}
    overrides: dict[str, dict[str, Any]] = {"scaling": scaling_overrides(flags), "worker": worker}
    if not flags.get("pools"):
        return stack_config(stack, project_dir, overrides)
    overrides["gpu"] = {"pools": [parse_pool(text) for text in flags["pools"]]}
    raw = StackFile.of_stack(stack, project_dir).raw if stack is not None else {}
    gpu = raw.get("gpu")
    if isinstance(gpu, dict):
        # The flags' pools replace the stack's capacity: its one-pool keys go with it.
        single = ("capacityType", "allowedInstanceTypes")
        raw = {**raw, "gpu": {k: v for k, v in gpu.items() if k not in single}}
    return StackConfig.from_raw(with_overrides(raw, overrides))


def fleet_setup(
    cfg: StackConfig, profile: Profile, concurrency_set: bool, region: str = BASE_REGION
) -> PolicySetup:
    """`fleet`: what the stack deploys — scaling.mode (`controller` or `alarms`) with its
    scaling and κ, and its gpu.pools priced in `region`; concurrency from a flag or stack,
    else the profile's."""
    concurrency = cfg.worker.concurrency if concurrency_set else profile.concurrency
    setup = stack_policy(cfg.scaling, concurrency)
    if not cfg.gpu.pools:  # one service, as before pools
        return setup
    if cfg.scaling.mode != "controller":
        raise CapacityError(
            f"gpu.pools need scaling.mode controller (the stack's is {cfg.scaling.mode}): "
            "only the controller places workers across pools"
        )
    placement = PlacementParams(
        provisioning_timeout_s=float(cfg.gpu.provisioning_timeout_seconds),
        cooldown_s=float(cfg.gpu.pool_cooldown_seconds),
    )
    return replace(setup, pools=pool_specs(cfg, region), placement=placement)


def pool_peer(cfg: StackConfig, fleet: PolicySetup, name: str, region: str) -> PolicySetup:
    """The stack's fleet on one pool of the peer's capacity type: the stack's first pool of
    that type (its name, so --interruptions and --capacity-outage reach it), or one named
    after the type, with the stack's bounds."""
    capacity_type = POOL_PEERS[name]
    pool = next(
        (p for p in cfg.gpu.pools if p.capacity_type == capacity_type),
        PoolConfig.model_validate({"name": capacity_type, "capacityType": capacity_type}),
    )
    only = pool.model_copy(update={"min_workers": None, "max_workers": None})
    peer_cfg = cfg.model_copy(update={"gpu": cfg.gpu.model_copy(update={"pools": (only,)})})
    placement = fleet.placement or PlacementParams(
        provisioning_timeout_s=float(cfg.gpu.provisioning_timeout_seconds),
        cooldown_s=float(cfg.gpu.pool_cooldown_seconds),
    )
    return replace(
        fleet,
        name=name,
        mode="controller",
        pools=pool_specs(peer_cfg, region),
        placement=placement,
    )


def policy_setups(
    names: list[str], fleet: PolicySetup, cfg: StackConfig, region: str = BASE_REGION
) -> dict[str, PolicySetup]:
    """Each named policy on the stack's fleet size: `fleet` is what the stack deploys,
    `alarms`/`controller` the stack's scaling in that mode, the peers their own models, the
    pool peers the fleet on one On-Demand or one Spot pool."""
    setups = {}
    for name in names:
        if name == "fleet":
            setups[name] = fleet
        elif name in POOL_PEERS:
            setups[name] = pool_peer(cfg, fleet, name, region)
        elif name == "controller":
            setups[name] = replace(fleet, name=name, mode=name)
        elif name == "alarms":  # one service: the alarms place nothing across pools
            setups[name] = replace(fleet, name=name, mode=name, pools=(), placement=None)
        else:
            setups[name] = peer_policy(name, fleet)
    return setups


def parse_policies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = (*MODES, "fleet", *POOL_PEERS)
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise click.BadParameter(
            f"{text!r}: policies are a comma-separated list of {', '.join(known)}"
        )
    return list(dict.fromkeys(names))


def with_batching(profile: Profile, job_s: float | None, alpha: float | None) -> Profile:
    if job_s is not None and job_s <= 0:
        raise ConfigError([f"--job-seconds: must be > 0 (got {job_s:g})"])
    if alpha is not None and alpha < 0:
        raise ConfigError([f"--batch-alpha: must be >= 0 (got {alpha:g})"])
    # Keeps the profile's law (the default's exponent) unless --batch-alpha names the linear one.
    batching = replace(profile.batching, base_s=job_s or profile.batching.base_s)
    if alpha is not None:
        batching = Batching(batching.base_s, alpha)
    return replace(profile, batching=batching)


def parse_duration(text: str) -> float:
    """`60s`, `2m`, `1.5h` or plain seconds."""
    match = _DURATION.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration like 60s, 2m or 1h")
    scale = {"m": 60, "min": 60, "h": 3600}.get(match.group(2) or "s", 1)
    return float(match.group(1)) * scale


def load_trace(
    spec: str,
    seed: int,
    stack: str | None,
    days: float,
    queue: str | None,
    region: str | None = None,
    profile: str | None = None,
) -> Trace:
    if spec != "cloudwatch":
        return parse_trace(spec, seed)
    if queue is None and stack is None:
        raise TraceError("--trace cloudwatch needs --stack S (its queueUrl output) or --queue-name")
    if queue is None:
        from tts_fleet.client.stack import StackError, stack_outputs
        from tts_fleet.config.outputs import QUEUE_URL

        try:
            outputs = stack_outputs(stack or "")
        except StackError as error:
            raise TraceError(str(error)) from None
        queue = str(outputs.get(QUEUE_URL, "")).rsplit("/", 1)[-1]
        if not queue:
            raise TraceError(f"stack {stack} has no {QUEUE_URL} output; deploy it first")
    from tts_fleet.client.aws import AwsSettings, NoRegion, client_for

    try:
        cloudwatch = client_for("cloudwatch", AwsSettings(region, profile))
    except NoRegion as error:
        raise TraceError(str(error)) from None
    return cloudwatch_arrivals(cloudwatch, queue, days)


def _common(func: Any) -> Any:
    options = [
        click.option("--trace", "spec", required=True,
                     help="burst:N | bursts:N:EVERY_H:HOURS | poisson:RATE_PER_MIN:HOURS | "
                     "sparse:GAP_MIN:HOURS | "
                     "diurnal:PEAK_PER_MIN:DAYS | FILE.csv | cloudwatch"),
        click.option("--timing", "timing", type=click.Choice(sorted([*PROFILES, MEASURED])),
                     default="default", show_default=True,
                     help="Timing profile (tts_fleet/scaling/physics.py); measured: the "
                     "default's with the cold start --stack's workers measured over --days "
                     "(tts-fleet coldstart)."),
        *aws_flags(),
        stack_file_option("Take config from Pulumi.<stack>.yaml (and, with --trace "
                          "cloudwatch, the queue from its outputs)."),
        project_dir_option(),
        scaling_override_flags,
        click.option("--concurrency", type=int, help="Worker slots (default: the stack's "
                     "worker.concurrency with --stack, else the profile's)."),
        click.option("--job-seconds", type=float,
                     help="Per-job latency with one in flight (default: the profile's)."),
        click.option("--batch-alpha", type=float, help="Batching: latency(c) = job-seconds × "
                     "(1 + alpha·(c − 1)); 0 = perfect batching, 1 = none."),
        click.option("--days", type=float, default=14.0, show_default=True,
                     help="Look-back for --trace cloudwatch."),
        click.option("--queue-name", help="Queue for --trace cloudwatch (instead of --stack)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Random seed (random traces, host provisioning jitter)."),
        json_flag(),
        click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write a PNG chart here."),
        click.option("--deadline", "deadline_minutes", type=float, metavar="MINUTES",
                     help="Give every burst of the trace (a trace without bursts: each "
                     "hour's arrivals) this deadline; the controller plans for it, the "
                     "report counts the deadlines met (docs/simulate.md)."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


# `--timing measured`: the profile is built from the stack's ColdStartSeconds figures.
MEASURED = "measured"


def timing_profile(o: dict[str, Any]) -> Profile:
    """The --timing profile; `measured` reads --stack's CloudWatch figures (BadInput if none)."""
    if o["timing"] != MEASURED:
        return PROFILES[o["timing"]]
    if not o["stack"]:
        raise BadInput("--timing measured needs --stack S (whose workers' cold starts to use)")
    import time

    from botocore.exceptions import BotoCoreError, ClientError

    from tts_fleet.client.aws import AwsSettings, NoRegion, client_for
    from tts_fleet.client.coldstart import ColdStartError, measured_profile, read_figures

    try:
        cloudwatch = client_for("cloudwatch", AwsSettings(o["region"], o["profile"]))
        _, figures = read_figures(o["stack"], o["days"], cloudwatch=cloudwatch, now=time.time())
        return measured_profile(figures)
    except (ColdStartError, NoRegion, BotoCoreError, ClientError) as error:
        raise BadInput(f"--timing measured: {error}") from None


def _prepare(o: dict[str, Any]) -> tuple[Trace, Profile, StackConfig, Any]:
    try:
        cfg = load_config(o["stack"], o["project_dir"], o)
        profile = with_batching(timing_profile(o), o["job_seconds"], o["batch_alpha"])
        rates = rates_for(cfg, _region(o))
        trace = load_trace(
            o["spec"], o["seed"], o["stack"], o["days"], o["queue_name"], o["region"], o["profile"]
        )
    except ConfigError as error:
        raise bad_config(error.problems) from None
    except (TraceError, CostError, CapacityError) as error:
        raise BadInput(str(error)) from None
    if not trace.arrivals:
        raise BadInput(f"trace {trace.name} has no jobs")
    return trace, profile, cfg, rates


def deadline_seconds(o: dict[str, Any]) -> float | None:
    """`--deadline MINUTES` in seconds (None without it)."""
    minutes = o["deadline_minutes"]
    if minutes is None:
        return None
    if not minutes > 0 or minutes == float("inf"):
        raise BadInput(f"--deadline: must be a positive number of minutes (got {minutes:g})")
    return float(minutes) * 60.0


def _region(o: dict[str, Any]) -> str:
    return stack_region(o["stack"], o["project_dir"]) or BASE_REGION


def _fleet(o: dict[str, Any], cfg: StackConfig, profile: Profile) -> PolicySetup:
    concurrency_set = o["concurrency"] is not None or o["stack"] is not None
    try:
        return fleet_setup(cfg, profile, concurrency_set, _region(o))
    except (CostError, CapacityError) as error:
        raise BadInput(str(error)) from None


def _capacity(o: dict[str, Any], fleet: PolicySetup) -> Capacity:
    """--interruptions and --capacity-outage, each naming one of the fleet's pools."""
    try:
        capacity = Capacity(
            tuple(parse_interruptions(text) for text in o["interruptions"]),
            tuple(parse_outage(text) for text in o["outages"]),
        )
        capacity.check({pool.name for pool in fleet.pools})
    except CapacityError as error:
        raise BadInput(str(error)) from None
    return capacity


@click.command("simulate")
@_common
@click.option(
    "--pool",
    "pools",
    multiple=True,
    metavar="NAME:TYPE[:MAX]",
    help="A capacity pool (TYPE spot or on-demand), repeatable, in order of "
    "preference: replaces the stack's gpu.pools. Priced from the cost tables.",
)
@click.option(
    "--interruptions",
    "interruptions",
    multiple=True,
    metavar="POOL:PER_HOUR",
    help="Spot interruptions per host-hour in POOL (0.05: 5 %/hour), repeatable.",
)
@click.option(
    "--capacity-outage",
    "outages",
    multiple=True,
    metavar="POOL:START_H:HOURS[:silent]",
    help="No new host in POOL from hour START_H for HOURS (tasks wait in "
    "PROVISIONING; silent: without placement-failure events), repeatable.",
)
@click.option("--policy", "policy_name", type=click.Choice([*MODES, "fleet"]), default="fleet",
              show_default=True, help="fleet: what the stack deploys (scaling.mode: "
              "controller or alarms); seed: the AWS sample (0..1, idle 5 "
              "min); aws-sample, keda, sagemaker: the peers' models "
              "(docs/scaling.md).")  # fmt: skip
@click.option("--compare", "compare", is_flag=False, flag_value="seed,fleet", default=None,
              metavar="A,B,...",
              help="Run these policies side by side (alone: seed,fleet); with pools also "
              "on-demand-only and spot-only.")  # fmt: skip
def simulate_cmd(policy_name: str, compare: str | None, **o: Any) -> None:
    """Simulate a scaling policy on a workload trace: latency, drain time, GPU hours, cost.

    Scaling flags and --stack apply to every policy's fleet size; the seed policy is fixed.
    """
    names = parse_policies(compare) if compare else [policy_name]
    deadline = deadline_seconds(o)
    trace, profile, cfg, rates = _prepare(o)
    fleet = _fleet(o, cfg, profile)
    capacity = _capacity(o, fleet)
    try:
        setups = policy_setups(names, fleet, cfg, _region(o))
        results = [
            simulate(trace, profile, setups[n], rates, o["seed"], capacity, deadline) for n in names
        ]
    except CostError as error:  # a pool peer's type has no price
        raise BadInput(str(error)) from None
    if o["plot"]:
        from tts_fleet.sim.plots import timeline

        timeline(results, o["plot"])
    if o["as_json"]:
        data = {n: r.to_json() for n, r in zip(names, results, strict=True)}
        click.echo(json.dumps(data if compare else results[0].to_json(), indent=2, sort_keys=True))
    else:
        click.echo(sim_text.simulation_table([r.summary for r in results]))
    if o["plot"]:
        click.echo(f"plot: {o['plot']}", err=o["as_json"])


@click.command("advise")
@_common
@click.option("--max-p95-latency", "max_p95", help="Latency bound, e.g. 60s, 2m.")
@click.option("--max-monthly-usd", type=float, help="Budget: cost were the trace a month.")
def advise_cmd(max_p95: str | None, max_monthly_usd: float | None, **o: Any) -> None:
    """Sweep idleMinutes × hostIdleSeconds (and κ, scaling.coldStartWork, in controller
    mode) on a trace; print the cost/p95 Pareto frontier. With --deadline: the cheapest
    setting that meets every deadline."""
    from tts_fleet.sim.advise import advise, run_count

    bound = parse_duration(max_p95) if max_p95 else None
    deadline = deadline_seconds(o)
    trace, profile, cfg, rates = _prepare(o)
    fleet = _fleet(o, cfg, profile)
    run = partial(advise, trace, profile, fleet, rates, max_p95_s=bound,
                  max_monthly_usd=max_monthly_usd, seed=o["seed"],
                  deadline_s=deadline)  # fmt: skip
    # Each run costs ~0.35 s per 100,000 jobs: a week of traffic is a ~20 s sweep, so show it
    # on a terminal (scripts reading --json get clean streams).
    with look.progress_bar(run_count(fleet), "simulating", not o["as_json"]) as advance:
        report = run(progress=lambda: advance(1))
    if o["plot"]:
        from tts_fleet.sim.plots import frontier

        frontier(report, o["plot"])
    if o["as_json"]:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(sim_text.advice_table(report))
    bounded = bound is not None or max_monthly_usd is not None or deadline is not None
    if bounded and report.recommendation is None:
        # The table already says no swept setting meets them: the exit code alone follows.
        raise click.exceptions.Exit(ExitCode.FAILED)


@click.command("cost")
@stack_file_option("Read Pulumi.<stack>.yaml (default: the config defaults).")
@project_dir_option()
@click.option("--outputs-per-day", type=float, default=1000.0, show_default=True,
              help="For the S3 storage of outputs (retained expireDays).")  # fmt: skip
@json_flag()
def cost_cmd(stack: str | None, project_dir: Path, outputs_per_day: float, as_json: bool) -> None:
    """The idle floor per month for each network mode, and the cost per GPU hour."""
    try:
        cfg = load_config(stack, project_dir, {})
        region = stack_region(stack, project_dir) or BASE_REGION
        report = cost_report(cfg, region, outputs_per_day, stack=stack or "defaults")
    except ConfigError as error:
        raise bad_config(error.problems) from None
    except CostError as error:
        raise BadInput(str(error)) from None
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(cost_table(report))
