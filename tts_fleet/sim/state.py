"""The simulated fleet's state: GPU hosts, tasks, and the ECS services' counts.

Without capacity pools the fleet is one service, its pool named NO_POOL; with them, each
host and task belongs to one pool (its capacity provider and service).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_POOL = ""  # the one service of a stack without capacity pools


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
    pool: str = NO_POOL


@dataclass
class ServiceTask:
    """An ECS task of the simulated service (not a worker process, not a queued job)."""

    host: Host
    cold: bool  # waited for host provisioning or the image pull
    ready: bool = False
    in_flight: int = 0
    jobs: set[int] = field(default_factory=set)  # the jobs it holds (a stopped task drops them)
    pool: str = NO_POOL
    placed_at: float = 0.0  # when the service asked for it


@dataclass
class Fleet:
    hosts: list[Host] = field(default_factory=list)  # every host ever launched (billing)
    spare: dict[int, Host] = field(default_factory=dict)  # alive, no task (warm or launching)
    tasks: dict[int, ServiceTask] = field(default_factory=dict)  # live (not stopped) tasks
    next_task: int = 0
    desired: int = 0  # the services' desired counts together
    pool_desired: dict[str, int] = field(default_factory=dict)  # each pool's service
    # Counted when a task becomes ready; a task stopped while pending never started.
    cold_starts: int = 0
    warm_starts: int = 0
    cancelled_starts: int = 0  # stopped while pending: scale-in before the task ran
    killed_jobs: int = 0  # in flight on a task stopped without protection: back to the queue
    # Tasks of interrupted hosts finishing their jobs within the notice (no longer counted by
    # their service, which has started their replacements).
    draining: dict[int, ServiceTask] = field(default_factory=dict)
    interruptions: dict[str, list[float]] = field(default_factory=dict)  # times, by pool
    fallbacks: dict[str, int] = field(default_factory=dict)  # times marked unavailable, by pool
    starts: list[tuple[float, str]] = field(default_factory=list)  # (asked at, pool), pooled runs
