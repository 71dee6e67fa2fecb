"""Capacity pools in the graph (issue #22): `gpu.pools` with spot + on-demand + reserved builds
exactly 3 capacity providers and 3 services with pinned inputs, the controller's IAM scoped to
the 3 services and its environment listing them; without `gpu.pools`, today's graph.

What a mock cannot prove: that AWS accepts the requests (the RESERVED option with its group,
the ListTasks condition key) or that an alias keeps a resource; `pulumi preview` does.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pulumi
import pytest
from pydantic import ValidationError

from components.platform import Platform, PlatformArgs
from tests.lib.pulumi_harness import RecordingMocks, run_program, stack_config
from tests.lib.stack_support import (
    PREBUILT,
    WORKER_DIR,
    policy,
    run_main,
    run_platform,
    stack_file_config,
)
from tts_fleet.config import topology
from tts_fleet.config.models import StackConfig
from tts_fleet.cost.pools import pool_specs

PROVIDER = "aws:ecs/capacityProvider:CapacityProvider"
SERVICE = "aws:ecs/service:Service"
READY = "pulumi-python:dynamic:Resource"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
GROUP = "arn:aws:resource-groups:us-east-1:123456789012:group/tts-nightly"
CLUSTER = "tts-capacity-cluster"
CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:tts-capacity-cluster"
THREE = [
    {"name": "spot", "capacityType": "spot"},
    {
        "name": "od",
        "capacityType": "on-demand",
        "allowedInstanceTypes": ["g6.xlarge", "g6e.xlarge"],
        "maxWorkers": 3,
    },
    {
        "name": "reserved",
        "capacityType": "reserved",
        "capacityReservationGroupArn": GROUP,
        "minWorkers": 1,
        "maxWorkers": 2,
    },
]
RAW: dict[str, Any] = {"worker": {"image": PREBUILT}, "gpu": {"pools": THREE}}


def run_pooled(raw: dict[str, Any], stack: str = "dev") -> RecordingMocks:
    """Platform as __main__.py builds it: with the pools priced from the cost tables."""
    config = StackConfig.from_raw(raw)

    def program() -> None:
        args = PlatformArgs(
            config=config, stack=stack, worker_dir=str(WORKER_DIR), pools=pool_specs(config)
        )
        Platform("tts", args)

    return run_program(program, stack_config(raw), stack)


@pytest.fixture(scope="module")
def pooled() -> RecordingMocks:
    return run_pooled(RAW)


def requirements(allowed: list[str] | None) -> dict[str, Any]:
    base: dict[str, Any] = {
        "acceleratorTypes": ["gpu"],
        "acceleratorManufacturers": ["nvidia"],
        "acceleratorCount": {"min": 1, "max": 1},
        "acceleratorTotalMemoryMib": {"min": 20 * 1024},
        "vcpuCount": {"min": 4, "max": 96},
        "memoryMib": {"min": 16 * 1024, "max": 512 * 1024},
    }
    return base if allowed is None else {**base, "allowedInstanceTypes": allowed}


def provider_inputs(option: str, allowed: list[str] | None, **extra: Any) -> dict[str, Any]:
    return {
        "cluster": CLUSTER,
        "managedInstancesProvider": {
            "infrastructureRoleArn": (
                "arn:aws:iam:us-east-1:123456789012:tts-capacity-infrastructure-role"
            ),
            "propagateTags": "CAPACITY_PROVIDER",
            "autoRepairConfiguration": {"actionsStatus": "ENABLED"},
            "infrastructureOptimization": {"scaleInAfter": 200},
            "instanceLaunchTemplate": {
                "ec2InstanceProfileArn": (
                    "arn:aws:iam:us-east-1:123456789012:tts-capacity-instance-profile"
                ),
                "capacityOptionType": option,
                "networkConfiguration": {
                    "subnets": ["tts-network-private-0-id", "tts-network-private-1-id"],
                    "securityGroups": ["tts-capacity-sg-id"],
                },
                "storageConfiguration": {"storageSizeGib": 100},
                "instanceRequirements": requirements(allowed),
                **extra,
            },
        },
    }


def test_three_pools_build_three_providers_and_three_services_and_nothing_else(
    pooled: RecordingMocks,
) -> None:
    today = Counter(run_platform({"worker": {"image": PREBUILT}}).counts())
    # Two more pools: each a provider, its ACTIVE waiter and a service. One task definition,
    # one cluster, one security group, the same roles: nothing else grows.
    more = Counter({PROVIDER: 2, READY: 2, SERVICE: 2})
    assert pooled.counts() == dict(today + more)
    assert len(pooled.of_type(PROVIDER)) == 3 and len(pooled.of_type(SERVICE)) == 3
    assert len(pooled.of_type("aws:ecs/taskDefinition:TaskDefinition")) == 1


def test_each_pool_provider_has_its_purchase_option_types_and_reservation(
    pooled: RecordingMocks,
) -> None:
    found = {r.name: json.loads(json.dumps(r.inputs)) for r in pooled.of_type(PROVIDER)}
    assert found == {
        # No allowedInstanceTypes on a Spot pool: one size per GPU family (L4, A10G, L40S).
        "tts-capacity-gpu-spot": provider_inputs("SPOT", ["g6.xlarge", "g5.xlarge", "g6e.xlarge"]),
        "tts-capacity-gpu-od": provider_inputs("ON_DEMAND", ["g6.xlarge", "g6e.xlarge"]),
        "tts-capacity-gpu-reserved": provider_inputs(
            "RESERVED",
            None,
            capacityReservations={
                "reservationGroupArn": GROUP,
                "reservationPreference": "RESERVATIONS_ONLY",
            },
        ),
    }
    # Each provider's waiter, so each service starts once its provider is ACTIVE.
    waiters = {r.name: r.inputs["name"] for r in pooled.of_type(READY)}
    assert waiters == {
        "tts-capacity-gpu-spot-active": "tts-capacity-gpu-spot",
        "tts-capacity-gpu-od-active": "tts-capacity-gpu-od",
        "tts-capacity-gpu-reserved-active": "tts-capacity-gpu-reserved",
    }


def test_each_pool_service_runs_the_one_task_definition_on_its_own_provider(
    pooled: RecordingMocks,
) -> None:
    def service(provider: str) -> dict[str, Any]:
        return {
            "cluster": CLUSTER_ARN,
            "taskDefinition": "arn:aws:ecs:us-east-1:123456789012:tts-worker-task",
            "desiredCount": 0,
            "capacityProviderStrategies": [{"capacityProvider": provider, "weight": 1, "base": 0}],
            "networkConfiguration": {
                "subnets": ["tts-network-private-0-id", "tts-network-private-1-id"],
                "securityGroups": ["tts-capacity-sg-id"],
                "assignPublicIp": False,
            },
            "deploymentCircuitBreaker": {"enable": True, "rollback": True},
            "propagateTags": "SERVICE",
            "enableEcsManagedTags": True,
            "forceNewDeployment": True,
        }

    found = {r.name: json.loads(json.dumps(r.inputs)) for r in pooled.of_type(SERVICE)}
    assert found == {
        "tts-worker-service-spot": service("tts-capacity-gpu-spot"),
        "tts-worker-service-od": service("tts-capacity-gpu-od"),
        "tts-worker-service-reserved": service("tts-capacity-gpu-reserved"),
    }


def test_the_controller_may_size_exactly_the_three_services_and_read_their_tasks(
    pooled: RecordingMocks,
) -> None:
    role = next(r for r in pooled.of_type("aws:iam/rolePolicy:RolePolicy")
                if r.name == "tts-controller-policy")  # fmt: skip
    statements = {s["Sid"]: s for s in policy(role)["Statement"]}
    prefix = f"arn:aws:ecs:us-east-1:123456789012:service/{CLUSTER}/"
    assert statements["SizeService"] == {
        "Sid": "SizeService",
        "Effect": "Allow",
        "Action": ["ecs:DescribeServices", "ecs:UpdateService"],
        "Resource": [
            prefix + "tts-worker-service-spot",
            prefix + "tts-worker-service-od",
            prefix + "tts-worker-service-reserved",
        ],
    }
    assert statements["ListPoolTasks"] == {
        "Sid": "ListPoolTasks",
        "Effect": "Allow",
        "Action": "ecs:ListTasks",
        "Resource": "*",
        "Condition": {"ArnEquals": {"ecs:cluster": CLUSTER_ARN}},
    }
    assert statements["ReadPoolTasks"] == {
        "Sid": "ReadPoolTasks",
        "Effect": "Allow",
        "Action": "ecs:DescribeTasks",
        "Resource": f"arn:aws:ecs:us-east-1:123456789012:task/{CLUSTER}/*",
    }
    assert list(statements) == [
        "ReadQueue", "SizeService", "ListPoolTasks", "ReadPoolTasks", "ReadTargetBounds",
        "KeepState", "FindState", "ReadBatches", "KeepForecasts", "FindBatches", "WriteLogs",
    ]  # fmt: skip


def test_the_controller_environment_lists_the_pools_priced_with_their_services(
    pooled: RecordingMocks,
) -> None:
    env = pooled.one("aws:lambda/function:Function").inputs["environment"]["variables"]
    # Prices from the cost tables: g6.xlarge Spot $0.375 (table middle) + fee $0.0628;
    # g6.xlarge On-Demand $0.8048 + $0.0628 for the on-demand and the reserved pool.
    assert json.loads(env["TTS_FLEET_POOLS"]) == [
        {"name": "spot", "capacity_type": "spot", "service": "tts-worker-service-spot",
         "min_workers": 0, "max_workers": 4, "usd_per_hour": 0.4378},
        {"name": "od", "capacity_type": "on-demand", "service": "tts-worker-service-od",
         "min_workers": 0, "max_workers": 3, "usd_per_hour": 0.8676},
        {"name": "reserved", "capacity_type": "reserved",
         "service": "tts-worker-service-reserved", "min_workers": 1, "max_workers": 2,
         "usd_per_hour": 0.8676},
    ]  # fmt: skip
    assert json.loads(env["TTS_FLEET_PLACEMENT"]) == {
        "provisioning_timeout_s": 300.0,
        "cooldown_s": 600.0,
    }
    # Application Auto Scaling and the single-service fields name the first pool's service.
    assert env["TTS_FLEET_SERVICE"] == "tts-worker-service-spot"
    target = pooled.one("aws:appautoscaling/target:Target").inputs
    assert target["resourceId"] == f"service/{CLUSTER}/tts-worker-service-spot"


def test_the_safety_net_stays_quiet_while_any_pool_wants_a_worker(pooled: RecordingMocks) -> None:
    alarm = next(a for a in pooled.of_type(ALARM) if a.name.endswith("-safety-net"))
    queries = json.loads(json.dumps(alarm.inputs["metricQueries"]))
    wanted = [
        (q["id"], q["metric"]["metricName"], q["metric"]["dimensions"]["ServiceName"])
        for q in queries
        if q["id"].startswith("desired")
    ]
    assert wanted == [
        ("desired0", "DesiredTaskCount", "tts-worker-service-spot"),
        ("desired1", "DesiredTaskCount", "tts-worker-service-od"),
        ("desired2", "DesiredTaskCount", "tts-worker-service-reserved"),
    ]
    assert queries[-1]["expression"] == (
        "IF(visible >= 1 AND (FILL(desired0, 0) + FILL(desired1, 0) + FILL(desired2, 0)) == 0,"
        " 1, 0)"
    )
    # The cost model counts what the alarm evaluates: visible + one desired count a pool.
    assert topology.alarm_metrics(StackConfig.from_raw(RAW)) == 4 + 3 + 2


def test_the_dashboard_graphs_workers_and_cost_per_pool(pooled: RecordingMocks) -> None:
    body = json.loads(pooled.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardBody"])
    by_title = {w["properties"]["title"]: w["properties"]["metrics"] for w in body["widgets"]}
    workers = by_title["Workers per pool (running tasks)"]
    assert [(m[5], m[6]["label"]) for m in workers] == [
        ("tts-worker-service-spot", "spot (spot)"),
        ("tts-worker-service-od", "od (on-demand)"),
        ("tts-worker-service-reserved", "reserved (reserved)"),
    ]
    cost = by_title["Cost per pool, USD per hour (running × the pool's price)"]
    expressions = [m[0]["expression"] for m in cost if "expression" in m[0]]
    assert expressions == [
        "FILL(r0, 0) * 0.4378",
        "FILL(r1, 0) * 0.8676",
        "FILL(r2, 0) * 0.8676",
    ]


def test_the_first_pool_takes_over_todays_provider_and_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Aliases are engine state a mock does not see: the options each resource was created
    with are recorded at construction instead."""
    seen: dict[str, list[str]] = {}
    real = pulumi.CustomResource.__init__

    def record(
        self: Any, t: str, name: str, props: Any = None, opts: Any = None, **kw: Any
    ) -> None:
        aliases = (opts.aliases if opts is not None else None) or []
        seen[name] = [a.name for a in aliases]
        real(self, t, name, props, opts, **kw)

    monkeypatch.setattr(pulumi.CustomResource, "__init__", record)
    run_pooled(RAW)
    pools = {n: v for n, v in seen.items() if n.startswith(("tts-capacity-gpu", "tts-worker-serv"))}
    assert pools == {
        "tts-capacity-gpu-spot": ["tts-capacity-gpu"],
        "tts-capacity-gpu-spot-active": ["tts-capacity-gpu-active"],
        "tts-worker-service-spot": ["tts-worker-service"],
        "tts-capacity-gpu-od": [],
        "tts-capacity-gpu-od-active": [],
        "tts-worker-service-od": [],
        "tts-capacity-gpu-reserved": [],
        "tts-capacity-gpu-reserved-active": [],
        "tts-worker-service-reserved": [],
    }


def test_without_pools_the_graph_is_todays() -> None:
    mocks = run_platform({"worker": {"image": PREBUILT}, "gpu": {"capacityType": "spot"}})
    assert [r.name for r in mocks.of_type(PROVIDER)] == ["tts-capacity-gpu"]
    assert [r.name for r in mocks.of_type(READY)] == ["tts-capacity-gpu-active"]
    assert [r.name for r in mocks.of_type(SERVICE)] == ["tts-worker-service"]
    template = mocks.one(PROVIDER).inputs["managedInstancesProvider"]["instanceLaunchTemplate"]
    # Today's keys: no allowed-type list of its own, no reservation.
    assert "allowedInstanceTypes" not in template["instanceRequirements"]
    assert "capacityReservations" not in template
    env = mocks.one("aws:lambda/function:Function").inputs["environment"]["variables"]
    assert "TTS_FLEET_POOLS" not in env and "TTS_FLEET_PLACEMENT" not in env
    role = next(r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy")
                if r.name == "tts-controller-policy")  # fmt: skip
    sids = [s["Sid"] for s in policy(role)["Statement"]]
    assert "ListPoolTasks" not in sids and "ReadPoolTasks" not in sids


def test_platform_refuses_pools_that_are_not_the_configs() -> None:
    config = StackConfig.from_raw(RAW)
    specs = pool_specs(config)
    with pytest.raises(ValidationError, match=r"priced gpu\.pools"):
        PlatformArgs(config=config, stack="dev", worker_dir=str(WORKER_DIR), pools=specs[:2])
    with pytest.raises(ValidationError, match=r"priced gpu\.pools"):
        PlatformArgs(config=config, stack="dev", worker_dir=str(WORKER_DIR))


def test_the_cost_model_counts_the_controllers_per_pool_metrics() -> None:
    from tts_fleet.controller.metrics import METRIC_NAMES, POOL_METRIC_NAMES

    cfg = StackConfig.from_raw(RAW)
    assert topology.custom_metrics_always_on(cfg) == len(METRIC_NAMES) + 3 * len(POOL_METRIC_NAMES)


def test_main_prices_the_pools_it_passes_to_the_platform() -> None:
    config = {**stack_file_config("dev"), "tts-fleet:gpu": {"pools": THREE}}
    mocks, _ = run_main(config, "dev")
    env = mocks.one("aws:lambda/function:Function").inputs["environment"]["variables"]
    pools = json.loads(env["TTS_FLEET_POOLS"])
    assert [(p["name"], p["service"], p["usd_per_hour"]) for p in pools] == [
        ("spot", "tts-fleet-worker-service-spot", 0.4378),
        ("od", "tts-fleet-worker-service-od", 0.8676),
        ("reserved", "tts-fleet-worker-service-reserved", 0.8676),
    ]


def test_the_controllers_pool_graph_reads_the_records_it_emits(pooled: RecordingMocks) -> None:
    from tts_fleet.controller.metrics import POOL_DESIRED, POOL_UNAVAILABLE, emf_line

    body = json.loads(pooled.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardBody"])
    by_title = {w["properties"]["title"]: w["properties"]["metrics"] for w in body["widgets"]}
    lines = by_title["Scaling controller per pool: desired, and unavailable after a failure"]
    graphed = [tuple(line[:6]) for line in lines]
    # What a pool's EMF record publishes: its namespace, names and dimension values.
    emitted = []
    for pool in ("spot", "od", "reserved"):
        record = json.loads(emf_line("dev", 0, {POOL_DESIRED: 1, POOL_UNAVAILABLE: 0}, {}, pool))
        spec = record["_aws"]["CloudWatchMetrics"][0]
        dims = [x for d in spec["Dimensions"][0] for x in (d, record[d])]
        emitted += [(spec["Namespace"], m["Name"], *dims) for m in spec["Metrics"]]
    assert graphed == emitted
