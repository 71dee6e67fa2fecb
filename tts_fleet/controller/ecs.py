"""What the controller reads of each pool's ECS service, and how it sets its count (issue #22).

A pool is one ECS service on its own Managed Instances capacity provider. ECS does not fall
back from one capacity provider to another (aws/containers-roadmap#773): a task with no
capacity waits in PROVISIONING while ECS retries. So, per pool and per sample, the controller
reads what says a pool has no capacity, and the placement (tts_fleet/scaling/pools.py) moves
the demand on:

- `DescribeServices` (every pool in one call per 10): desired, running and pending counts, and
  the service's event stream, whose newest message naming a capacity failure
  (`PLACEMENT_FAILURE_MARKERS`) dates the last placement failure;
- `ListTasks` + `DescribeTasks` (desiredStatus RUNNING), only while the service is short of
  its desired count: how long the oldest task still waiting for capacity has waited (a task
  PROVISIONING, or PENDING before it is on a container instance: once placed it is pulling
  the image, which is a cold start, not a capacity problem);
- `ListTasks` + `DescribeTasks` (desiredStatus STOPPED), for Spot pools: the tasks Spot took
  back (stopCode `SpotInterruption`, or a stop reason naming a Spot interruption), each by its
  stop time, which stays the same at every sample, so the placement counts each one once
  without a list of task ids to keep. ECS shows stopped tasks for at least an hour, the
  window the placement counts interruptions over.

Only the services named in the settings are read or set. boto3 only: this ships in the
Lambda zip.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from tts_fleet.scaling.pools import PLACEMENT_FAILURE_MARKERS, PoolObservation, PoolSpec

# DescribeServices describes "up to 10 services" per call (ECS API reference).
MAX_SERVICES_PER_DESCRIBE = 10
# DescribeTasks takes "up to 100 task IDs or full ARN entries"; ListTasks' maxResults is 1..100.
MAX_TASKS_PER_CALL = 100
# Tasks looked at per pool and status at one sample: one ListTasks page and one DescribeTasks.
# A pool short of more workers than this is waiting either way; the oldest of the first
# hundred still dates the wait (ListTasks returns the service's tasks, not a sample of them).
MAX_TASKS_READ = MAX_TASKS_PER_CALL
# Still waiting for capacity: not yet on a container instance (Task lifecycle, ECS guide).
STARTING = ("PROVISIONING", "PENDING")
SPOT_STOP_CODE = "SpotInterruption"


def read_pools(
    ecs: Any, cluster: str, pools: Sequence[PoolSpec], now: float
) -> tuple[PoolObservation, ...]:
    """Each pool's service as ECS shows it at `now`, in the pools' order; a Spot pool's
    interruptions too. Raises LookupError when a service is missing: the settings name only
    services the stack created."""
    names = [pool.service for pool in pools]
    described: dict[str, dict[str, Any]] = {}
    for chunk in _chunks(names, MAX_SERVICES_PER_DESCRIBE):
        answer = ecs.describe_services(cluster=cluster, services=chunk)
        for service in answer.get("services", []):
            described[str(service.get("serviceName"))] = service
    missing = [name for name in names if name not in described]
    if missing:
        raise LookupError(f"services {', '.join(missing)} not found in cluster {cluster}")
    return tuple(_observation(ecs, cluster, pool, described[pool.service], now) for pool in pools)


def _observation(
    ecs: Any, cluster: str, pool: PoolSpec, service: dict[str, Any], now: float
) -> PoolObservation:
    desired = int(service.get("desiredCount", 0))
    running = int(service.get("runningCount", 0))
    pending = int(service.get("pendingCount", 0))
    waiting: list[float] = []
    starting = 0
    if running < desired or pending > 0:  # otherwise nothing can be waiting for capacity
        for task in _tasks(ecs, cluster, pool.service, "RUNNING"):
            if task.get("lastStatus") in STARTING:
                starting += 1
                if not task.get("containerInstanceArn") and "createdAt" in task:
                    waiting.append(max(0.0, now - _epoch(task["createdAt"])))
    spot = pool.capacity_type == "spot"  # only Spot capacity is taken back
    return PoolObservation(
        name=pool.name,
        desired=desired,
        running=running,
        # PROVISIONING tasks are not in pendingCount ("tasks in the PENDING state").
        pending=max(pending, starting),
        oldest_provisioning_s=max(waiting, default=0.0),
        placement_failure_at=placement_failure_at(service.get("events", [])),
        interruptions=_interruptions(ecs, cluster, pool.service) if spot else (),
    )


def placement_failure_at(events: Sequence[dict[str, Any]]) -> float | None:
    """When the newest service event naming a capacity failure happened (None: none shown)."""
    times = [
        _epoch(event["createdAt"])
        for event in events
        if "createdAt" in event
        and any(marker in str(event.get("message", "")) for marker in PLACEMENT_FAILURE_MARKERS)
    ]
    return max(times, default=None)


def interrupted(task: dict[str, Any]) -> bool:
    """Spot took the task's instance back: its stop code, or its reason where the code is a
    generic one (a Managed Instances host drained on the Spot notice)."""
    if task.get("stopCode") == SPOT_STOP_CODE:
        return True
    reason = str(task.get("stoppedReason", "")).lower()
    return "spot" in reason and "interrupt" in reason


def _interruptions(ecs: Any, cluster: str, service: str) -> tuple[float, ...]:
    times = [
        _epoch(task["stoppedAt"])
        for task in _tasks(ecs, cluster, service, "STOPPED")
        # Only a finished stop has its final time: counted once, at the same time always.
        if task.get("lastStatus") == "STOPPED" and "stoppedAt" in task and interrupted(task)
    ]
    return tuple(sorted(times))


def _tasks(ecs: Any, cluster: str, service: str, status: str) -> list[dict[str, Any]]:
    arns = ecs.list_tasks(
        cluster=cluster, serviceName=service, desiredStatus=status, maxResults=MAX_TASKS_READ
    ).get("taskArns", [])
    if not arns:
        return []
    answer = ecs.describe_tasks(cluster=cluster, tasks=arns[:MAX_TASKS_READ])
    return list(answer.get("tasks", []))


def set_desired(ecs: Any, cluster: str, service: str, desired: int) -> None:
    # desiredCount alone starts no new deployment; it is what a scaling policy would set.
    ecs.update_service(cluster=cluster, service=service, desiredCount=desired)


def _epoch(value: datetime | float) -> float:
    """botocore parses ECS timestamps into aware datetimes; epoch seconds pass through."""
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
