"""The simulated fleet's state: GPU hosts, tasks, and the ECS service's counts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Host:
    index: int
    launched: float
    provisioned_at: float  # booted and registered with the cluster: idle from here if no task
    # The image is on disk from this time; None until a task's pull is under way (the pull
    # belongs to a task: a host whose task was cancelled before it registered pulls nothing).
    image_at: float | None = None
    task: int | None = None
    token: int = 0  # bumps when the host goes idle, so a stale expiry event is ignored
    gone: float | None = None


@dataclass
class ServiceTask:
    """An ECS task of the simulated service (not a worker process, not a queued job)."""

    host: Host
    cold: bool  # waited for host provisioning or the image pull
    ready: bool = False
    in_flight: int = 0
    jobs: set[int] = field(default_factory=set)  # the jobs it holds (a stopped task drops them)


@dataclass
class Fleet:
    hosts: list[Host] = field(default_factory=list)  # every host ever launched (billing)
    spare: dict[int, Host] = field(default_factory=dict)  # alive, no task (warm or launching)
    tasks: dict[int, ServiceTask] = field(default_factory=dict)  # live (not stopped) tasks
    next_task: int = 0
    desired: int = 0
    # Counted when a task becomes ready; a task stopped while pending never started.
    cold_starts: int = 0
    warm_starts: int = 0
    cancelled_starts: int = 0  # stopped while pending: scale-in before the task ran
    killed_jobs: int = 0  # in flight on a task stopped without protection: back to the queue
