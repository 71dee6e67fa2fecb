"""The simulated fleet's state: GPU hosts, tasks, and the ECS service's counts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Host:
    index: int
    launched: float
    ready_at: float  # provisioned and image pulled
    task: int | None = None
    token: int = 0  # bumps when the host goes idle, so a stale expiry event is ignored
    gone: float | None = None


@dataclass
class Task:
    host: Host
    ready: bool = False
    in_flight: int = 0


@dataclass
class Fleet:
    hosts: list[Host] = field(default_factory=list)  # every host ever launched (billing)
    spare: dict[int, Host] = field(default_factory=dict)  # alive, no task (warm or launching)
    tasks: dict[int, Task] = field(default_factory=dict)  # live (not stopped) tasks
    next_task: int = 0
    desired: int = 0
    cold_starts: int = 0
    warm_starts: int = 0
