"""The local scaler and worker pool with real processes and the real stand-in agent.

The queue is scripted (a list of counts), and the workers are tiny sleeper processes, so the
scaling decisions and the ECS-like start/stop rules are checked exactly and quickly; the
end-to-end tests (test_local_run.py) run the same code with real workers and moto.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.lib.local_cli import CLI, RUN_TIMEOUT
from tts_fleet.local.agent import EcsAgent
from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.local.scaler import PoolScaler, Tick
from tts_fleet.scaling.bands import Scaling
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S, ControllerParams
from tts_fleet.scaling.policy import AlarmsPolicy, ControllerPolicy

pytestmark = pytest.mark.processes

# A stand-in worker: waits to be stopped, exits 0 on SIGTERM like the real one.
SLEEPER = [
    sys.executable,
    "-c",
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(120)\n",
]


class Script:
    """Queue counts served one per tick; the last one repeats."""

    def __init__(self, outstanding: list[int]) -> None:
        self.values = outstanding
        self.index = 0

    def __call__(self) -> QueueCounts:
        value = self.values[min(self.index, len(self.values) - 1)]
        self.index += 1
        return QueueCounts(visible=value, in_flight=0, dead_letters=0)


@pytest.fixture
def agent() -> Iterator[EcsAgent]:
    server = EcsAgent()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_scaler(agent: EcsAgent, tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    pools: list[WorkerPool] = []
    events: list[EventLog] = []

    def make(
        cfg: Scaling, outstanding: list[int], cold_start_ticks: int = 0, lag_s: float = 0.0
    ) -> PoolScaler:
        log = EventLog(tmp_path / "events.jsonl")
        events.append(log)
        pool = WorkerPool(os.environ, agent, tmp_path / "logs", 2.0, log, command=SLEEPER)
        pools.append(pool)
        script = Script(outstanding)
        policy = AlarmsPolicy(cfg, lag_s=lag_s)
        return PoolScaler(policy, pool, script, lambda: 0, log, cold_start_ticks)

    yield make
    for pool in pools:
        pool.shutdown(lambda: True)
    for log in events:
        log.close()


def controller_params(**changes: Any) -> ControllerParams:
    values: dict[str, Any] = {
        "min_workers": 0,
        "max_workers": 3,
        "jobs_per_worker": 4,
        "idle_minutes": 2,
        # κ = 0: every band's worker is worth starting, so these tests pin the loop (clock,
        # pool, log), not the policy's cold-start economics
        # (tests/unit/scaling/test_controller_policy.py).
        "cold_start_work": 0.0,
        "cold_start_s": 60.0,
        "seconds_per_job": 1.0,
        "concurrency": 1,
        "host_idle_s": 200.0,
    }
    return ControllerParams(**{**values, **changes})


@pytest.fixture
def make_controller(agent: EcsAgent, tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    pools: list[WorkerPool] = []
    logs: list[EventLog] = []

    def make(
        params: ControllerParams, outstanding: list[int], cold_start_ticks: int = 0
    ) -> PoolScaler:
        log = EventLog(tmp_path / "events.jsonl")
        logs.append(log)
        pool = WorkerPool(os.environ, agent, tmp_path / "logs", 2.0, log, command=SLEEPER)
        pools.append(pool)
        script = Script(outstanding)
        policy = ControllerPolicy(params)
        return PoolScaler(policy, pool, script, lambda: 0, log, cold_start_ticks)

    yield make
    for pool in pools:
        pool.shutdown(lambda: True)
    for log in logs:
        log.close()


def protect(agent: EcsAgent, task: str, enabled: bool) -> None:
    url = f"{agent.uri(task)}/task-protection/v1/state"
    httpx.put(url, json={"ProtectionEnabled": enabled}).raise_for_status()


def run(scaler: PoolScaler, ticks: int) -> list[Tick]:
    return [scaler.step() for _ in range(ticks)]


def wait_exited(scaler: PoolScaler, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while scaler.pool.of_state("stopping") and time.monotonic() < deadline:
        scaler.pool.reap()
        time.sleep(0.05)


def test_desired_follows_the_alarm_model_and_processes_follow_desired(make_scaler) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=3, jobs_per_worker=4, idle_minutes=3)
    scaler = make_scaler(cfg, [12, 12, 8, 0, 0, 0, 0])
    samples = run(scaler, 2)
    # ceil(12 / 4) = 3 workers, started at once (no cold start).
    assert [(s.desired, s.running) for s in samples] == [(3, 3), (3, 3)]
    pids = {task.pid for task in scaler.pool.live()}
    assert len(pids) == 3 and all(pid is not None for pid in pids)
    samples += run(scaler, 5)
    # 8 -> 2; then an empty queue keeps 2 until 3 empty ticks fire the idle alarm -> 0.
    assert [s.desired for s in samples] == [3, 3, 2, 2, 2, 0, 0]
    assert [s.alarm for s in samples] == ["scale-out"] * 3 + ["ok", "ok", "idle", "idle"]
    assert samples[2].running == 2 and samples[2].stopping == 1
    wait_exited(scaler)
    assert scaler.step().running == 0
    # Each was stopped by the scaler (SIGTERM), none crashed; a sleeper still starting up
    # may die of the SIGTERM before its handler is installed, like a booting worker.
    for task in scaler.pool.tasks:
        assert task.stopping_at is not None and task.ended_at is not None
        assert task.proc is not None and task.proc.returncode in (0, -signal.SIGTERM)


def test_protected_workers_are_stopped_only_once_idle(make_scaler, agent: EcsAgent) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=2, jobs_per_worker=1, idle_minutes=1)
    scaler = make_scaler(cfg, [2, 0])
    assert scaler.step().running == 2
    protect(agent, "worker-1", True)
    protect(agent, "worker-2", True)
    sample = scaler.step()
    assert (sample.desired, sample.running, sample.stopping) == (0, 2, 0)
    protect(agent, "worker-2", False)
    sample = scaler.step()
    assert (sample.running, sample.stopping) == (1, 1)
    assert [t.id for t in scaler.pool.of_state("running")] == ["worker-1"]
    protect(agent, "worker-1", False)
    assert scaler.step().stopping >= 1
    wait_exited(scaler)
    assert scaler.step().running == 0


def test_cold_start_delays_the_worker_processes(make_scaler) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=4, jobs_per_worker=8, idle_minutes=5)
    scaler = make_scaler(cfg, [20], cold_start_ticks=2)
    samples = run(scaler, 3)
    assert [(s.desired, s.pending, s.running) for s in samples] == [(3, 3, 0), (3, 3, 0), (3, 0, 3)]


def test_a_killed_worker_is_replaced(make_scaler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=2, jobs_per_worker=1, idle_minutes=5)
    scaler = make_scaler(cfg, [2])
    scaler.step()
    victim = scaler.pool.of_state("running")[0]
    assert victim.proc is not None
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(10)
    sample = scaler.step()
    assert sample.running == 2
    assert {t.id for t in scaler.pool.of_state("running")} == {"worker-2", "worker-3"}
    assert scaler.pool.crashed == [victim]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    exited = [e for e in events if e["event"] == "worker_exited"]
    assert exited == [
        {**exited[0], "worker": victim.id, "code": -signal.SIGKILL, "expected": False}
    ]


def test_decisions_are_logged_with_what_the_scaler_saw(make_scaler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=3, jobs_per_worker=4, idle_minutes=3)
    scaler = make_scaler(cfg, [5, 0])
    run(scaler, 2)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    decisions = [d for d in map(json.loads, lines) if d["event"] == "decision"]
    assert [(d["tick"], d["outstanding"], d["desired"], d["running"]) for d in decisions] == [
        (1, 5, 2, 2),
        (2, 0, 2, 2),
    ]
    assert {w["state"] for w in decisions[0]["workers"]} == {"running"}


def test_a_metric_lag_shows_each_read_one_tick_later(make_scaler) -> None:  # type: ignore[no-untyped-def]
    """The same Autoscaler as the simulator: with AWS's minute of lag, tick n decides on the
    read of tick n - 1 (tick 1 sees no data at all: missing data is idle)."""
    cfg = Scaling(min_workers=0, max_workers=3, jobs_per_worker=4, idle_minutes=2)
    lagged = run(make_scaler(cfg, [12, 12, 0], lag_s=60.0), 5)
    assert [s.desired for s in lagged] == [0, 3, 3, 3, 0]
    assert [s.alarm for s in lagged] == ["idle", "scale-out", "scale-out", "ok", "idle"]


def test_settled_once_drained_at_the_minimum_with_nothing_in_motion(make_scaler) -> None:  # type: ignore[no-untyped-def]
    cfg = Scaling(min_workers=0, max_workers=1, jobs_per_worker=1, idle_minutes=1)
    scaler = make_scaler(cfg, [1, 0])
    assert not scaler.settled(scaler.step())  # work outstanding
    draining = scaler.step()  # idle: desired 0, the worker is told to stop
    assert draining.desired == 0
    assert not scaler.settled(draining) or draining.stopping == draining.running == 0
    wait_exited(scaler)
    assert scaler.settled(scaler.step())


# ---- controller mode: the deployed controller's loop, one 10-s sample per step ----------


def test_the_controller_samples_six_times_a_tick_and_starts_a_worker_for_a_new_job(
    make_controller,  # type: ignore[no-untyped-def]
) -> None:
    # Idle for three samples, then one job lands: the next sample (10 s later on the
    # fleet's own clock) starts a worker.
    scaler = make_controller(controller_params(), [0, 0, 0, 1])
    samples = run(scaler, 4)
    assert [s.minute for s in samples] == pytest.approx([1 / 6, 2 / 6, 3 / 6, 4 / 6])
    assert [(s.outstanding, s.desired, s.running) for s in samples] == [
        (0, 0, 0), (0, 0, 0), (0, 0, 0), (1, 1, 1)
    ]  # fmt: skip
    assert {s.alarm for s in samples} == {"controller"}
    assert samples[-1].reason  # the policy says why, and the timeline shows it
    assert (samples[-1].minute - samples[-2].minute) * 60 == pytest.approx(SAMPLE_INTERVAL_S)
    assert scaler.interval_ticks == pytest.approx(SAMPLE_INTERVAL_S / 60)


def test_the_controller_releases_to_min_workers_after_the_idle_window(
    make_controller,  # type: ignore[no-untyped-def]
) -> None:
    params = controller_params(idle_minutes=1)
    scaler = make_controller(params, [12, 0])
    first = scaler.step()
    assert (first.desired, first.running) == (3, 3)  # ceil(12 / 4), no cold start here
    # Empty from the second sample on: at most one stays warm, none once a minute (six
    # samples) has passed; the decisions say so.
    samples = run(scaler, 8)
    assert samples[0].desired <= 1
    assert samples[-1].desired == params.min_workers
    wait_exited(scaler)
    assert scaler.settled(scaler.step())


def test_controller_cold_starts_count_in_samples(make_controller) -> None:  # type: ignore[no-untyped-def]
    scaler = make_controller(controller_params(), [4], cold_start_ticks=1)
    samples = run(scaler, 7)
    # One tick of cold start = six 10-s samples pending, then running.
    assert [s.pending for s in samples] == [1] * 6 + [0]
    assert samples[-1].running == 1


def test_controller_decisions_are_logged_with_the_reason(make_controller, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scaler = make_controller(controller_params(), [5])
    run(scaler, 2)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    logged = [d for d in map(json.loads, lines) if d["event"] == "decision"]
    assert [(d["tick"], d["outstanding"], d["desired"], d["alarm"]) for d in logged] == [
        (1, 5, 2, "controller"),
        (2, 5, 2, "controller"),
    ]
    assert all(d["reason"] for d in logged) and logged[1]["minute"] == pytest.approx(2 / 6)


@pytest.mark.timeout(RUN_TIMEOUT)
def test_a_job_submitted_into_an_idle_local_controller_fleet_is_seen_within_10_s(
    start,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """The whole local fleet in controller mode (the default stack's), idle until a job is
    sent from another process: the first sample after it arrives starts a worker, one
    sample (10 s of the fleet's clock) after the last one that saw an empty queue."""
    run_ = start("--keep-running", "--tick", "0.6", "--idle-ticks", "1")
    run_.wait_for(lambda e: e["event"] == "decision" and e["tick"] >= 3)
    assert "TTS_FLEET_BUCKET=" in run_.stdout()  # printed before the first sample
    env = {**os.environ, **connection_env(run_.stdout())}
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"id": "c1", "text": "Hello there."}\n')
    sent = subprocess.run(
        [*CLI, "submit", str(source)], env=env, capture_output=True, text=True, timeout=60
    )
    assert sent.returncode == 0, sent.stderr
    seen = run_.wait_for(lambda e: e["event"] == "decision" and e["outstanding"] >= 1)
    before = [
        e for e in run_.events() if e["event"] == "decision" and e["tick"] == seen["tick"] - 1
    ]
    assert before and (before[0]["outstanding"], before[0]["desired"]) == (0, 0)
    assert (seen["minute"] - before[0]["minute"]) * 60 == pytest.approx(SAMPLE_INTERVAL_S)
    assert seen["desired"] >= 1 and seen["alarm"] == "controller"
    run_.wait_for(lambda e: e["event"] == "decision" and e["completed"] == 1)
    run_.proc.send_signal(signal.SIGTERM)
    code, _, stderr = run_.finish(timeout=60)
    assert code == 0, stderr


def connection_env(stdout: str) -> dict[str, str]:
    """The `export K=V` lines `--keep-running` prints for other terminals."""
    pairs = [line.strip().removeprefix("export ") for line in stdout.splitlines()]
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair and pair[:1].isupper())
