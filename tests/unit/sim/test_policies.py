"""The simulator's policies side by side (issue #13): the controller mode, the alarms'
cooldown, and the peers' models (KEDA, SageMaker async, the aws-sample)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from tts_fleet.cli.main import cli
from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.alarms import ACTIVITY_S, Autoscaler
from tts_fleet.scaling.bands import Scaling
from tts_fleet.scaling.physics import SEED_PROFILE
from tts_fleet.sim.engine import Simulation, simulate
from tts_fleet.sim.model import peer_policy, stack_policy
from tts_fleet.sim.report import CostRates
from tts_fleet.sim.scalers import INVOKE_LATENCY_S, KedaScaler, View
from tts_fleet.sim.traces import Trace, parse_trace

RATES = CostRates(gpu_hourly_usd=1.0, floor_monthly_usd=0.0)
JOB_S = SEED_PROFILE.batching.base_s


def base(mode: str = "controller"):
    """A stack at maxWorkers 20 in `mode`; a peer on that stack's fleet size."""
    if mode not in ("alarms", "controller"):
        return peer_policy(mode, base())
    return stack_policy(ScalingConfig(max_workers=20, host_idle_seconds=300, mode=mode), 1)


def run(spec: str, mode: str):
    policy = base(mode)
    return simulate(parse_trace(spec), SEED_PROFILE, policy, RATES).summary


def test_controller_sees_a_job_into_an_idle_stack_within_10_s() -> None:
    """`tts-fleet submit` invokes the controller: the launch starts about 1 s after the job."""
    trace = Trace("one", (1234.5,), 1234.5)
    sim = Simulation(trace, SEED_PROFILE, base())
    _, _, fleet, _ = sim.run()
    first_launch = min(h.launched for h in fleet.hosts)
    placement = SEED_PROFILE.task_placement_s
    assert first_launch - placement - 1234.5 <= 10.0
    assert first_launch - placement - 1234.5 == pytest.approx(INVOKE_LATENCY_S)


def test_controller_burst_10000_drains_within_3_percent_of_the_bound() -> None:
    summary = run("burst:10000", "controller")
    bound = SEED_PROFILE.cold_task_s + math.ceil(10_000 / 20) * JOB_S
    assert summary.drain_s is not None and summary.drain_s <= 1.03 * bound
    assert summary.cold_starts == 20 and summary.cancelled_starts == 0


def test_controller_beats_the_alarms_on_steady_load() -> None:
    """poisson:60:2: the alarms call up every GPU for the first cold start's backlog and
    flap; the controller sizes for the backlog a new GPU would find."""
    alarms, controller = run("poisson:60:2", "alarms"), run("poisson:60:2", "controller")
    assert controller.cost.gpu_instance_hours is not None
    assert controller.cost.gpu_instance_hours <= 12.0
    assert controller.cost.gpu_instance_hours < 0.5 * (alarms.cost.gpu_instance_hours or 0)
    assert (controller.latency.p95 or 0) <= (alarms.latency.p95 or 0)


def test_poisson_20_8_meets_the_issue_figures() -> None:
    summary = run("poisson:20:8", "controller")
    assert (summary.cost.gpu_instance_hours or 99) <= 11.0
    assert (summary.latency.p95 or 99) <= 12.0


def test_keda_kills_busy_pods_and_their_jobs_run_again() -> None:
    """No task protection: a scale-down stops busy pods; every job still completes."""
    summary = run("diurnal:20:1", "keda")
    assert summary.killed_jobs > 0
    assert summary.latency.max is not None and not math.isnan(summary.latency.max)


def test_protected_policies_kill_nothing() -> None:
    for mode in ("controller", "alarms", "sagemaker"):
        assert run("diurnal:20:1", mode).killed_jobs == 0


def test_keda_hpa_scale_up_is_rate_limited_and_scale_down_stabilised() -> None:
    keda = KedaScaler(base("keda"))
    keda.observe(0.0, 10_000, 0)
    counts = [keda.decide(View(t, 10_000, 0, 0, 0, 0)) for t in (30.0, 45.0, 60.0, 75.0)]
    assert counts == [5, 10, 20, 20]  # 0 → 1 (activation) → 5 → 10 → 20 (max(2×, +4))
    keda.observe(80.0, 0, 0)
    assert keda.decide(View(90.0, 0, 0, 20, 0, 20)) == 20  # within the 300-s window
    late = [keda.decide(View(t, 0, 0, 20, 0, 20)) for t in range(105, 421, 15)]
    assert late[-1] == 0  # KEDA's cooldownPeriod (300 s after the last active poll)


def test_alarms_cooldown_holds_a_scale_in_for_one_evaluation() -> None:
    """The step policy's 60-s cooldown runs from the end of the activity (a few seconds
    after the alarm), so the next minute's lower step is held until the one after."""
    cfg = Scaling(0, 20, 8, 5)
    cool, free = Autoscaler(cfg, lag_s=0, cooldown_s=60), Autoscaler(cfg, lag_s=0)
    for scaler in (cool, free):
        scaler.observe(0.0, 160)
        scaler.observe(60.0, 16)
    assert cool.decide(60.0).desired == free.decide(60.0).desired == 20
    for scaler in (cool, free):
        scaler.observe(120.0, 16)
    assert free.decide(120.0).desired == 2
    assert cool.decide(120.0).desired == 20  # 120 < 60 + ACTIVITY_S + 60
    assert 60.0 + ACTIVITY_S + 60 > 120.0
    assert cool.decide(180.0).desired == 2


def test_simulate_compare_lists_the_named_policies() -> None:
    result = CliRunner().invoke(cli, [
        "simulate", "--trace", "burst:200", "--timing", "seed", "--max-workers", "20",
        "--concurrency", "1", "--compare", "keda,controller,aws-sample", "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"keda", "controller", "aws-sample"}
    assert data["keda"]["settings"]["host_idle_seconds"] == 0  # the node goes with the pod
    assert data["controller"]["policy"] == "controller"


def test_simulate_default_policy_is_what_the_default_stack_deploys() -> None:
    """scaling.mode defaults to controller: the default policy is the controller."""
    result = CliRunner().invoke(cli, ["simulate", "--trace", "burst:10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["policy"] == "fleet"
    tail = CliRunner().invoke(cli, ["simulate", "--trace", "burst:10", "--compare", "alarms,fleet",
                                    "--json"])  # fmt: skip
    both = json.loads(tail.output)
    assert both["fleet"]["first_result_s"] < both["alarms"]["first_result_s"]


def test_simulate_rejects_an_unknown_policy_name() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--trace", "burst:1", "--compare", "seed,hpa"])
    assert result.exit_code == 2
    assert "hpa" in result.output
