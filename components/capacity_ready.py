"""The `pulumi up` step between the capacity provider and the service: wait until ACTIVE.

CreateCapacityProvider returns while a Managed Instances provider is still PROVISIONING, and
pulumi-aws's `aws.ecs.CapacityProvider` has no create waiter; a CreateService that names it
then fails ("capacity provider ... is not in an ACTIVE state"), the same race pulumi-aws#6061
documents for PutClusterCapacityProviders. This dynamic resource polls
DescribeCapacityProviders and outputs the provider's name only once it is ACTIVE, so the
service (which takes that name) is created after it.
https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CapacityProvider.html (status)

A Pulumi dynamic resource: its provider is pickled by module reference into the state, so it
lives in this module of its own (as components/image_build.py). `wait_until_active` takes
the ECS client, the sleep and the clock as parameters, so it is tested against a scripted
fake that reports PROVISIONING first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

ACTIVE = "ACTIVE"
PROVISIONING = "PROVISIONING"  # the only status worth waiting through
# Generous: provisioning takes seconds to a few minutes; a provider stuck longer is broken.
WAIT_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 5.0
WATCHED = ("name", "cluster", "region")


class CapacityProviderNotActive(Exception):
    """The capacity provider did not become ACTIVE; the message says what it reported."""


@cache
def ecs_client(region: str) -> Any:
    """One boto3 client per region per process (DESIGN §7.6)."""
    import boto3

    return boto3.client("ecs", region_name=region)


def provider_status(ecs: Any, name: str, cluster: str) -> tuple[str, str]:
    """(status, reason) of one capacity provider; ("MISSING", …) when ECS does not list it."""
    answer = ecs.describe_capacity_providers(capacityProviders=[name], cluster=cluster)
    found = [p for p in answer.get("capacityProviders", []) if p.get("name") == name]
    if not found:
        failures = "; ".join(f.get("reason", "?") for f in answer.get("failures", []))
        return "MISSING", failures or "not returned by DescribeCapacityProviders"
    provider = found[0]
    return provider.get("status", "?"), provider.get("updateStatusReason", "")


def wait_until_active(
    ecs: Any,
    name: str,
    cluster: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout_seconds: float = WAIT_TIMEOUT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> int:
    """Polls until ACTIVE; returns the number of polls. Any status other than PROVISIONING
    (INACTIVE, DEPROVISIONING, missing) or the timeout raises CapacityProviderNotActive."""
    deadline = clock() + timeout_seconds
    polls = 0
    while True:
        status, reason = provider_status(ecs, name, cluster)
        polls += 1
        if status == ACTIVE:
            return polls
        if status != PROVISIONING:
            detail = f": {reason}" if reason else ""
            raise CapacityProviderNotActive(f"capacity provider {name} is {status}{detail}")
        if clock() >= deadline:
            raise CapacityProviderNotActive(
                f"capacity provider {name} still {PROVISIONING} after {timeout_seconds:.0f} s"
            )
        sleep(poll_seconds)


class CapacityProviderReadyProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        wait_until_active(ecs_client(props["region"]), props["name"], props["cluster"])
        return CreateResult(id_=f"{props['cluster']}/{props['name']}", outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in WATCHED if olds.get(k) != news.get(k)]
        # A replaced capacity provider has a new name: wait for the new one (a replacement).
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=news)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing to delete: this resource only waits


class CapacityProviderReady(pulumi.dynamic.Resource):
    """Outputs `name` once the capacity provider of that name is ACTIVE in `cluster`."""

    name: pulumi.Output[str]

    def __init__(
        self,
        resource_name: str,
        *,
        name: pulumi.Input[str],
        cluster: pulumi.Input[str],
        region: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            CapacityProviderReadyProvider(),
            resource_name,
            {"name": name, "cluster": cluster, "region": region},
            opts,
        )
