"""The local stand-in for an ECS service's tasks: `python -m worker` processes.

Like ECS: a new task can take a while to start (`cold_start_ticks`, the seed's GPU host and
image pull), a lower desired count stops only tasks without scale-in protection (asked of
the stand-in agent), a stopped task gets SIGTERM and then SIGKILL after the stop timeout,
and a task that dies is replaced on the next evaluation because the count is short.

With capacity pools (issue #22) the tasks come in groups, one per pool, each standing for that
pool's ECS service: `scale_group` sets one group's count, and a group whose pool `refuses`
capacity (`--capacity-outage`) keeps its due tasks pending, as ECS keeps a task PROVISIONING
when no host can be had, until the controller moves the demand elsewhere.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tts_fleet.local import procs
from tts_fleet.local.agent import EcsAgent
from tts_fleet.local.events import EventLog

# After the worker's own drain budget, how long ECS-like stop waits before SIGKILL.
KILL_GRACE_SECONDS = 1.0


@dataclass
class WorkerTask:
    id: str
    launch_tick: int  # the tick at which its process starts (cold start)
    group: str = ""  # its capacity pool; "" without pools
    created_tick: int = 0  # when it was asked for (ECS's createdAt)
    refused_tick: int | None = None  # the first due tick its pool had no capacity for it
    proc: subprocess.Popen[bytes] | None = None
    launched_at: float | None = None
    stopping_at: float | None = None
    ended_at: float | None = None

    @property
    def state(self) -> str:
        if self.ended_at is not None:
            return "exited"
        if self.proc is None:
            return "pending"
        return "stopping" if self.stopping_at is not None else "running"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class WorkerPool:
    def __init__(
        self,
        env: Mapping[str, str],
        agent: EcsAgent,
        log_dir: Path,
        stop_timeout: float,
        events: EventLog,
        clock: Callable[[], float] = time.monotonic,
        command: Sequence[str] | None = None,
    ) -> None:
        self._env = dict(env)
        self._command = list(command or procs.python_module("worker"))
        self._agent = agent
        self._log_dir = log_dir
        self._stop_timeout = stop_timeout
        self._events = events
        self._clock = clock
        self._serial = 0
        self.tasks: list[WorkerTask] = []
        self.crashed: list[WorkerTask] = []  # exits nobody asked for (a crash, a SIGKILL)
        self.desired: dict[str, int] = {}  # each group's count, as last set (its service's)

    def of_state(self, state: str, group: str | None = None) -> list[WorkerTask]:
        """The tasks in `state`, of one group when `group` is given."""
        return [
            task
            for task in self.tasks
            if task.state == state and (group is None or task.group == group)
        ]

    def live(self) -> list[WorkerTask]:
        return [task for task in self.tasks if task.state != "exited"]

    def protected(self, task: WorkerTask) -> bool:
        return self._agent.is_protected(task.id)

    def scale_to(self, desired: int, tick: int, cold_start_ticks: int) -> None:
        """Adds pending tasks or stops surplus ones; protected tasks are never stopped."""
        self._scale("", desired, tick, cold_start_ticks)
        self.launch_due(tick)

    def scale_group(
        self, group: str, desired: int, tick: int, cold_start_ticks: int, refused: bool
    ) -> None:
        """`scale_to` for one pool's group; while its pool `refused` capacity, its due tasks
        stay pending (each remembers the first tick it was refused)."""
        self._scale(group, desired, tick, cold_start_ticks)
        due = [t for t in self.of_state("pending", group) if t.launch_tick <= tick]
        for task in due:
            if not refused:
                self._launch(task)
            elif task.refused_tick is None:
                task.refused_tick = tick
                self._events.write("worker_refused", worker=task.id, pool=group)

    def _scale(self, group: str, desired: int, tick: int, cold_start_ticks: int) -> None:
        self.desired[group] = desired
        active = self.of_state("pending", group) + self.of_state("running", group)
        for _ in range(desired - len(active)):
            self._serial += 1
            task = WorkerTask(
                f"{group or 'worker'}-{self._serial}", tick + cold_start_ticks, group, tick
            )
            self.tasks.append(task)
            self._events.write(
                "worker_pending", worker=task.id, launch_tick=task.launch_tick, **_pool(group)
            )
        surplus = len(active) - desired
        for task in reversed(active):  # the newest first: pending ones cost nothing to drop
            if surplus <= 0:
                break
            if task.proc is None:
                task.ended_at = self._clock()
                self._events.write("worker_cancelled", worker=task.id, **_pool(task.group))
                surplus -= 1
            elif not self.protected(task):
                self.terminate(task, reason="scale-in")
                surplus -= 1

    def launch_due(self, tick: int) -> None:
        for task in self.of_state("pending"):
            if task.launch_tick <= tick:
                self._launch(task)

    def _launch(self, task: WorkerTask) -> None:
        env = {**self._env, "WORKER_ID": task.id, "ECS_AGENT_URI": self._agent.uri(task.id)}
        log = self.log_of(task)
        task.proc = procs.spawn(self._command, env, log)
        task.launched_at = self._clock()
        self._events.write("worker_started", worker=task.id, pid=task.proc.pid, log=str(log))

    def terminate(self, task: WorkerTask, reason: str) -> None:
        if task.proc is None or task.stopping_at is not None:
            return
        task.stopping_at = self._clock()
        procs.signal_group(task.proc, signal.SIGTERM)
        self._events.write("worker_stopping", worker=task.id, pid=task.pid, reason=reason)

    def reap(self) -> None:
        """Notes exits; SIGKILLs a stopping task that outlived its stop timeout."""
        now = self._clock()
        for task in self.of_state("running") + self.of_state("stopping"):
            assert task.proc is not None
            deadline = (task.stopping_at or now) + self._stop_timeout + KILL_GRACE_SECONDS
            if task.stopping_at is not None and now > deadline and task.proc.poll() is None:
                procs.kill(task.proc)
                self._events.write("worker_killed", worker=task.id, pid=task.pid)
            code = task.proc.poll()
            if code is not None:
                task.ended_at = now
                expected = task.stopping_at is not None
                if not expected:
                    self.crashed.append(task)
                self._events.write(
                    "worker_exited", worker=task.id, pid=task.pid, code=code, expected=expected
                )

    def shutdown(self, should_hurry: Callable[[], bool]) -> None:
        """SIGTERM every task, wait for the drain, SIGKILL what is left; reaps all."""
        for task in self.of_state("pending"):
            task.ended_at = self._clock()
        for task in self.of_state("running"):
            self.terminate(task, reason="shutdown")
        deadline = self._clock() + self._stop_timeout + KILL_GRACE_SECONDS
        while self.of_state("stopping") and self._clock() < deadline and not should_hurry():
            self.reap()
            time.sleep(0.05)
        for task in self.of_state("stopping"):
            assert task.proc is not None
            procs.kill(task.proc)
        self.reap()

    def log_of(self, task: WorkerTask) -> Path:
        return self._log_dir / f"{task.id}.log"

    def worker_seconds(self) -> float:
        now = self._clock()
        return sum(
            (task.ended_at or now) - task.launched_at
            for task in self.tasks
            if task.launched_at is not None
        )

    def describe(self) -> list[dict[str, object]]:
        return [
            {"id": t.id, "pid": t.pid, "state": t.state, "protected": self.protected(t)}
            | _pool(t.group)
            for t in self.live()
        ]


def _pool(group: str) -> dict[str, object]:
    """The pool field of an event or a worker's description; none without pools."""
    return {"pool": group} if group else {}
