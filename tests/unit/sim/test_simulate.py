"""The simulator against the issue's acceptance figures, and its model piece by piece."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.bands import Band, bands
from tts_fleet.scaling.physics import PROFILES, SEED_PROFILE, Batching
from tts_fleet.sim.engine import Simulation, simulate
from tts_fleet.sim.model import PolicySetup, seed_policy, stack_policy
from tts_fleet.sim.report import CostRates
from tts_fleet.sim.traces import Trace, parse_trace
from tts_fleet.stats import percentile


def alarms(
    min_workers: int, max_workers: int, jobs: int, idle_minutes: int, host_idle_seconds: int
) -> ScalingConfig:
    """A stack's scaling in alarms mode: these tests pin the fleet the step policy sizes."""
    return ScalingConfig(
        min_workers=min_workers,
        max_workers=max_workers,
        jobs_per_worker=jobs,
        idle_minutes=idle_minutes,
        host_idle_seconds=host_idle_seconds,
        mode="alarms",
    )


RATES = CostRates(gpu_hourly_usd=1.0, floor_monthly_usd=73.0)
ALARM_S = 120.0  # minute 0's datapoint is published at 60 s + 60 s lag, evaluated then
JOB_S = SEED_PROFILE.batching.base_s


def run(spec: str, policy: PolicySetup, profile: str = "seed", seed: int = 0) -> dict:
    return simulate(parse_trace(spec, seed), PROFILES[profile], policy, RATES, seed).to_json()


def fleet20() -> PolicySetup:
    return stack_policy(alarms(0, 20, 8, 5, host_idle_seconds=300), concurrency=1)


def test_seed_policy_is_the_samples_one_step_through_the_same_policy_code() -> None:
    plan = bands(seed_policy().scaling)
    assert plan.bands == (Band(0, None, 1),)  # ExactCapacity 1 whenever outstanding ≥ 1


def test_seed_one_job_into_an_idle_stack_takes_12_to_14_minutes() -> None:
    summary = run("burst:1", seed_policy())
    assert 12 * 60 <= summary["first_result_s"] <= 14 * 60
    assert summary["cold_starts"] == 1


def test_seed_burst_10000_drains_serially_like_the_blog() -> None:
    summary = run("burst:10000", seed_policy())
    expected = 13 * 60 + 10_000 * JOB_S
    assert abs(summary["drain_s"] - expected) <= 0.05 * expected


def test_fleet_20_workers_near_the_lower_bound_and_10x_faster_than_seed() -> None:
    fleet = run("burst:10000", fleet20())
    seed = run("burst:10000", seed_policy())
    cold_start = ALARM_S + SEED_PROFILE.cold_task_s
    lower_bound = cold_start + math.ceil(10_000 / 20) * JOB_S
    assert lower_bound <= fleet["drain_s"] <= 1.15 * lower_bound
    assert seed["drain_s"] >= 10 * fleet["drain_s"]
    assert fleet["cold_starts"] == 20


def _sparse_seed(offset_s: float = 0.0) -> tuple[list[float], dict]:
    arrivals = tuple(t + offset_s for t in parse_trace("sparse:7:8").arrivals)
    result = simulate(Trace("sparse", arrivals, 8 * 3600.0), SEED_PROFILE, seed_policy(), RATES)
    return list(result.latencies), result.to_json()


def test_sparse_seed_cannot_give_every_job_a_full_cold_start() -> None:
    """sparse:7:8 with the seed. A cold start (≈13 min) is longer than the 7-minute gap, so
    the next job always arrives during one and shares it, and the one after finds the
    worker warm: a 21-minute cycle of a full cold start, a shared one and a warm job.

    (Until issue #13 the simulator's seed counted visible + in-flight messages, and a job
    taken by the worker at the idle alarm's instant launched a "phantom" host no job
    needed. The seed's alarms count visible messages only, and a job a long-polling worker
    takes at once is never visible: no phantom launches; see the test after next.)
    """
    latencies, summary = _sparse_seed()
    assert latencies[0] >= 12 * 60  # the first job: a full cold start
    assert 4 * 60 <= summary["latency_s"]["p50"] < 12 * 60  # the shared wait
    assert summary["latency_s"]["p95"] >= 12 * 60
    longest = ALARM_S + SEED_PROFILE.cold_task_s + SEED_PROFILE.host_provisioning_jitter_s / 2
    assert summary["latency_s"]["max"] <= longest + 2 * JOB_S  # never two starts in a row
    assert all(x == JOB_S or x >= 4 * 60 for x in latencies)  # warm, or waits for a host
    assert sum(1 for x in latencies if x == JOB_S) >= len(latencies) / 4
    assert summary["warm_starts"] == 0  # the sample keeps no host for reuse
    assert summary["cancelled_starts"] == 0
    assert summary["hosts_launched"] == summary["cold_starts"]


def test_sparse_seed_off_the_minute_waits_for_every_other_job() -> None:
    """The same trace 30 s into each minute: the fleet is stopped before the job arrives,
    so that job waits a full cold start itself, the next shares it, the third is warm (a
    21-minute cycle). No launch is wasted, and p50 is the shared wait, ≈5.5 min: still not
    the issue's ≥ 12 min. The exact-minute trace is the lucky phase, not the typical one."""
    latencies, summary = _sparse_seed(offset_s=30.0)
    assert summary["cancelled_starts"] == 0
    assert summary["hosts_launched"] == summary["cold_starts"]
    assert 4 * 60 <= summary["latency_s"]["p50"] < 12 * 60
    assert sum(1 for x in latencies if x >= 11 * 60) >= len(latencies) / 4


def test_same_inputs_and_seed_give_identical_json() -> None:
    first = json.dumps(run("poisson:20:2", fleet20(), "default", seed=7), sort_keys=True)
    again = json.dumps(run("poisson:20:2", fleet20(), "default", seed=7), sort_keys=True)
    other = json.dumps(run("poisson:20:2", fleet20(), "default", seed=8), sort_keys=True)
    assert first == again
    assert first != other


@pytest.mark.parametrize(("in_flight", "latency"), [(1, 2.0), (2, 2.5), (4, 3.5)])
def test_batching_latency_and_throughput(in_flight: int, latency: float) -> None:
    model = Batching(2.0, 0.25)
    assert model.latency(in_flight) == latency
    assert model.throughput(in_flight) == in_flight / latency


def test_concurrency_with_batching_raises_throughput_by_the_model() -> None:
    """One worker, 400 jobs: 4 slots drain in 100 rounds of the profile's latency at 4."""
    profile = PROFILES["default"]
    one = stack_policy(alarms(0, 1, 8, 5, 300), concurrency=1)
    four = stack_policy(alarms(0, 1, 8, 5, 300), concurrency=4)
    serial = simulate(parse_trace("burst:400"), profile, one, RATES).to_json()
    batched = simulate(parse_trace("burst:400"), profile, four, RATES).to_json()
    ready = serial["first_result_s"] - 2.0
    assert serial["drain_s"] == pytest.approx(ready + 400 * 2.0)
    assert batched["drain_s"] == pytest.approx(ready + 100 * profile.batching.latency(4))


def _two_jobs(host_idle_seconds: int) -> dict:
    """Job 1 at 0, job 2 at 30 min, after the 1-minute idle window stopped the task."""
    policy = stack_policy(alarms(0, 1, 1, 1, host_idle_seconds), concurrency=1)
    trace = Trace("two", (0.0, 1800.0), 1800.0)
    result = simulate(trace, SEED_PROFILE, policy, RATES)
    return {**result.to_json(), "second": result.latencies[1]}


def test_warm_host_skips_provisioning_and_pull() -> None:
    warm = _two_jobs(host_idle_seconds=3600)
    assert (warm["cold_starts"], warm["warm_starts"]) == (1, 1)
    assert warm["second"] == pytest.approx(ALARM_S + SEED_PROFILE.warm_task_s + JOB_S)


def test_cold_host_pays_provisioning_pull_load_and_warmup() -> None:
    cold = _two_jobs(host_idle_seconds=0)
    assert (cold["cold_starts"], cold["warm_starts"]) == (2, 0)
    p = SEED_PROFILE
    low = ALARM_S + p.task_placement_s + p.host_provisioning_s + p.pull_s + p.model_load_s
    low += p.warmup_s + JOB_S
    assert low <= cold["second"] <= low + p.host_provisioning_jitter_s
    # The warm host billed its idle half hour; the cold one did not.
    assert _two_jobs(3600)["gpu_instance_hours"] > cold["gpu_instance_hours"]


def test_busy_tasks_are_never_stopped_and_idle_surplus_is() -> None:
    """80 five-minute jobs on 10 workers: as the backlog falls the bands ask for fewer
    workers, but every worker is busy until the queue is empty, so none is stopped early
    (a stopped task would lose its slot and stretch the drain)."""
    profile = PROFILES["seed"]
    policy = stack_policy(alarms(0, 10, 8, 5, 300), concurrency=1)
    slow = type(profile)(**{**profile.__dict__, "batching": Batching(300.0, 1.0)})
    sim = Simulation(parse_trace("burst:80"), slow, policy)
    finish, samples, fleet, _ = sim.run()
    assert fleet.cold_starts == 10 and fleet.warm_starts == 0
    first_ready = min(finish) - 300.0
    assert max(finish) <= first_ready + 8 * 300.0 + profile.host_provisioning_jitter_s
    assert any(s.desired < s.running for s in samples)  # scale-in was asked while busy
    for s in samples:  # every task above the desired count is a busy one
        assert s.running - s.desired <= max(0, s.outstanding)
    assert samples[-1].running == 0


def test_percentile_is_nearest_rank() -> None:
    values = [float(x) for x in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile([3.0], 0.95) == 3.0


def test_min_workers_is_an_always_on_fleet_billed_for_the_whole_trace() -> None:
    policy = stack_policy(alarms(1, 4, 8, 5, host_idle_seconds=300), concurrency=1)
    summary = run("sparse:30:4", policy)
    assert summary["latency_s"]["max"] == JOB_S  # no job waits for a cold start
    assert summary["cold_starts"] == 0
    assert summary["gpu_instance_hours"] == pytest.approx(4.0, abs=1 / 60)


def test_a_launch_cancelled_while_provisioning_is_no_start_and_its_host_is_not_kept() -> None:
    """The seed's one step on this project's alarms (outstanding = visible + in flight, which
    sees a job the worker holds), the first 28 minutes of sparse:7:8 (times in min:s):

    - 21:00 the idle alarm fires as job 3 arrives; the worker takes it, stops at 21:02;
    - 23:00 minute 21's datapoint (job 3) is published: scale-out launches host 1 (23:10);
    - 28:00 job 4 arrives and the idle alarm (minutes 22–26 empty) cancels the pending task;
    - host 1 registers at 23:10 + provisioning with no task; the sample keeps no idle host
      (scaleInAfter 0), so it is gone then: billed for provisioning only, never pulled;
    - 30:00 minute 28's datapoint scales out again: job 4 pays a full cold start on host 2.

    The cancelled task never ran: it is neither a cold start nor a warm one.
    """
    trace = Trace("sparse-28m", tuple(420.0 * k for k in range(5)), 1680.0)
    one_step = stack_policy(alarms(0, 1, 1, 5, host_idle_seconds=0), concurrency=1)
    sim = Simulation(trace, SEED_PROFILE, one_step)
    finish, _, fleet, _ = sim.run()
    assert (fleet.cold_starts, fleet.warm_starts, fleet.cancelled_starts) == (2, 0, 1)
    assert len(fleet.hosts) == 3
    phantom = fleet.hosts[1]
    assert phantom.gone is not None and phantom.image_at is None
    assert phantom.gone - phantom.launched <= (
        SEED_PROFILE.host_provisioning_s + SEED_PROFILE.host_provisioning_jitter_s
    )
    assert finish[3] - trace.arrivals[3] == JOB_S  # served at the alarm's instant
    assert finish[4] - trace.arrivals[4] >= 12 * 60  # a full cold start of its own


SUMMARY_KEYS = {
    "cancelled_starts", "cold_starts", "drain_s", "first_result_s", "floor_usd",
    "gpu_instance_hours", "gpu_usd", "hosts_launched", "jobs", "latency_s", "period_s", "policy",
    "profile", "rates", "settings", "total_usd", "trace", "usd_per_1000_outputs", "warm_starts",
    "killed_jobs",
}  # fmt: skip


def test_the_summary_is_typed_and_frozen_and_its_json_keeps_the_document_keys() -> None:
    result = simulate(parse_trace("burst:50"), SEED_PROFILE, fleet20(), RATES)
    summary = result.summary
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.jobs = 0  # type: ignore[misc]
    data = result.to_json()
    assert set(data) == SUMMARY_KEYS
    assert data["latency_s"] == {"p50": summary.latency.p50, "p95": summary.latency.p95,
                                 "max": summary.latency.max}  # fmt: skip
    assert data["settings"] == {
        "min_workers": 0, "max_workers": 20, "jobs_per_worker": 8, "idle_minutes": 5,
        "host_idle_seconds": 300, "concurrency": 1,
    }  # fmt: skip
    assert data["rates"] == {"gpu_hourly_usd": 1.0, "floor_monthly_usd": 73.0}
    assert (data["gpu_usd"], data["drain_s"]) == (summary.cost.gpu_usd, summary.drain_s)
    assert summary.cold_starts == data["cold_starts"] == 7  # ceil(50 / 8) workers
