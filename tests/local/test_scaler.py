"""The local scaler and worker pool with real processes and the real stand-in agent.

The queue is scripted (a list of counts), and the workers are tiny sleeper processes, so the
scaling decisions and the ECS-like start/stop rules are checked exactly and quickly; the
end-to-end tests (test_local_run.py) run the same code with real workers and moto.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tts_fleet.local.agent import EcsAgent
from tts_fleet.local.emulator import QueueCounts
from tts_fleet.local.events import EventLog
from tts_fleet.local.pool import WorkerPool
from tts_fleet.local.scaler import Scaler, Tick
from tts_fleet.spec.policy import Scaling

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
    ) -> Scaler:
        log = EventLog(tmp_path / "events.jsonl")
        events.append(log)
        pool = WorkerPool(os.environ, agent, tmp_path / "logs", 2.0, log, command=SLEEPER)
        pools.append(pool)
        script = Script(outstanding)
        return Scaler(cfg, pool, script, lambda: 0, log, cold_start_ticks, metric_lag_s=lag_s)

    yield make
    for pool in pools:
        pool.shutdown(lambda: True)
    for log in events:
        log.close()


def protect(agent: EcsAgent, task: str, enabled: bool) -> None:
    url = f"{agent.uri(task)}/task-protection/v1/state"
    httpx.put(url, json={"ProtectionEnabled": enabled}).raise_for_status()


def run(scaler: Scaler, ticks: int) -> list[Tick]:
    return [scaler.step() for _ in range(ticks)]


def wait_exited(scaler: Scaler, timeout: float = 20.0) -> None:
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
