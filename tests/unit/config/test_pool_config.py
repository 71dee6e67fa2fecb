"""`gpu.pools` (issue #22): every rule with its exact line naming the full key, the defaults a
pool resolves to, and the pool a stack without `gpu.pools` has."""

from __future__ import annotations

from typing import Any

import pytest

from tts_fleet.config.catalogue import default_spot_types
from tts_fleet.config.models import ConfigError, Pool, StackConfig
from tts_fleet.scaling.pools import PlacementParams

GROUP = "arn:aws:resource-groups:us-east-1:123456789012:group/tts-nightly"
SPOT = {"name": "spot", "capacityType": "spot"}
OD = {"name": "od", "capacityType": "on-demand"}


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as error:
        StackConfig.from_raw(raw)
    return error.value.problems


@pytest.mark.parametrize(
    ("pools", "scaling", "expected"),
    [
        (
            [SPOT, {"name": "res", "capacityType": "reserved"}],
            {},
            [
                "tts-fleet:gpu.pools[1].capacityReservationGroupArn: a reserved pool needs its"
                " Capacity Reservation resource group"
            ],
        ),
        (
            [SPOT, {**OD, "capacityReservationGroupArn": GROUP}],
            {},
            [
                "tts-fleet:gpu.pools[1].capacityReservationGroupArn: only a reserved pool takes"
                " one (capacityType is 'on-demand')"
            ],
        ),
        (
            [{"name": "res", "capacityType": "reserved", "capacityReservationGroupArn": "g"}],
            {},
            [
                "tts-fleet:gpu.pools[0].capacityReservationGroupArn: 'g' is not a resource"
                " group ARN (...:group/NAME)"
            ],
        ),
        (
            [SPOT, {**OD, "name": "spot"}],
            {},
            ["tts-fleet:gpu.pools[1].name: 'spot' is already pools[0].name"],
        ),
        (
            [{**SPOT, "name": "Spot.1"}],
            {},
            [
                "tts-fleet:gpu.pools[0].name: 'Spot.1' must be 1-24 lowercase letters, digits"
                " or '-', from a letter"
            ],
        ),
        (
            [{**SPOT, "capacityType": "dedicated"}],
            {},
            [
                "tts-fleet:gpu.pools[0].capacityType: must be one of 'spot', 'on-demand' or"
                " 'reserved' (got 'dedicated')"
            ],
        ),
        (
            [{**SPOT, "minWorkers": 3, "maxWorkers": 2}],
            {},
            ["tts-fleet:gpu.pools[0].maxWorkers: must be >= minWorkers (2 < 3)"],
        ),
        (
            [{**SPOT, "maxWorkers": 5}, {**OD, "minWorkers": 6}],
            {"maxWorkers": 4},
            [
                "tts-fleet:gpu.pools[0].maxWorkers: must be <= scaling.maxWorkers (5 > 4)",
                "tts-fleet:gpu.pools[1].minWorkers: must be <= scaling.maxWorkers (6 > 4)",
            ],
        ),
        (
            [{**SPOT, "minWorkers": 3}, {**OD, "minWorkers": 2}],
            {"maxWorkers": 4},
            [
                "tts-fleet:gpu.pools: the pools' minWorkers add up to 5, more than"
                " scaling.maxWorkers (4)"
            ],
        ),
        (
            [{**SPOT, "name": f"p{i}"} for i in range(10)],
            {},
            ["tts-fleet:gpu.pools: at most 9 pools (got 10)"],
        ),
        (
            [SPOT, OD],
            {"mode": "alarms"},
            [
                "tts-fleet:gpu.pools: 2 pools need scaling.mode: controller (in alarms mode"
                " Application Auto Scaling sizes only the first pool's service)"
            ],
        ),
        (
            [{**SPOT, "spotPrice": 1}],
            {},
            [
                "tts-fleet:gpu.pools[0].spotPrice: unknown key (known: name, capacityType,"
                " allowedInstanceTypes, capacityReservationGroupArn, minWorkers, maxWorkers)"
            ],
        ),
    ],
    ids=[
        "reserved-needs-group", "only-reserved-has-group", "group-arn-shape", "unique-names",
        "name-shape", "capacity-type", "pool-min-max", "inside-scaling-max", "floors-sum",
        "at-most-nine", "alarms-one-pool", "unknown-key",
    ],
)  # fmt: skip
def test_each_pool_rule_is_one_line_naming_the_full_key(
    pools: list[dict[str, Any]], scaling: dict[str, Any], expected: list[str]
) -> None:
    raw: dict[str, Any] = {"gpu": {"pools": pools}}
    if scaling:
        raw["scaling"] = scaling
    assert problems(raw) == expected


def test_gpu_level_purchase_keys_are_refused_beside_pools() -> None:
    raw = {"gpu": {"capacityType": "spot", "allowedInstanceTypes": ["g6.xlarge"], "pools": [OD]}}
    assert problems(raw) == [
        "tts-fleet:gpu.capacityType: only used without gpu.pools (each pool has its own"
        " capacityType)",
        "tts-fleet:gpu.allowedInstanceTypes: only used without gpu.pools (each pool has its own"
        " allowedInstanceTypes)",
    ]


@pytest.mark.parametrize("kind", ["on-demand", "spot"])
def test_without_pools_the_stack_has_one_pool_from_todays_keys(kind: str) -> None:
    cfg = StackConfig.from_raw(
        {
            "gpu": {"capacityType": kind, "allowedInstanceTypes": ["g6e.xlarge"]},
            "scaling": {"minWorkers": 1, "maxWorkers": 6},
        }
    )
    # Named by its capacity type; no Spot default types (today's provider inputs stay).
    assert cfg.pools() == (Pool(kind, kind, ("g6e.xlarge",), "", 1, 6),)  # type: ignore[arg-type]
    assert StackConfig().pools() == (Pool("on-demand", "on-demand", (), "", 0, 4),)


def test_pool_defaults_resolve_in_the_listed_order() -> None:
    cfg = StackConfig.from_raw(
        {
            "scaling": {"maxWorkers": 8},
            "gpu": {
                "pools": [
                    {"name": "res", "capacityType": "reserved",
                     "capacityReservationGroupArn": GROUP, "minWorkers": 2, "maxWorkers": 2},
                    SPOT,
                    {**OD, "allowedInstanceTypes": ["g6e.*"]},
                ]
            },
        }
    )  # fmt: skip
    assert cfg.pools() == (
        Pool("res", "reserved", (), GROUP, 2, 2),
        Pool("spot", "spot", ("g6.xlarge", "g5.xlarge", "g6e.xlarge"), "", 0, 8),
        Pool("od", "on-demand", ("g6e.*",), "", 0, 8),
    )


def test_a_spot_pools_default_types_follow_the_gpu_requirements() -> None:
    big = StackConfig.from_raw({"gpu": {"minGpuMemoryGib": 40, "pools": [SPOT]}})
    # L4 and A10G (22,888 MiB) no longer pass: L40S, RTX PRO 6000 and H100, one size each.
    assert big.pools()[0].allowed_instance_types == ("g6e.xlarge", "g7e.2xlarge", "p5.4xlarge")
    wide = StackConfig.from_raw({"gpu": {"vcpu": {"min": 8, "max": 8}, "pools": [SPOT]}})
    assert wide.pools()[0].allowed_instance_types == ("g6.2xlarge", "g5.2xlarge", "g6e.2xlarge")
    none = StackConfig.from_raw({"gpu": {"minGpuMemoryGib": 200}}).gpu
    assert default_spot_types(none) == ()


def test_placement_comes_from_the_gpu_section() -> None:
    assert StackConfig().placement() == PlacementParams(300.0, 600.0)
    cfg = StackConfig.from_raw(
        {"gpu": {"provisioningTimeoutSeconds": 120, "poolCooldownSeconds": 1800}}
    )
    assert cfg.placement() == PlacementParams(provisioning_timeout_s=120.0, cooldown_s=1800.0)
    assert problems({"gpu": {"provisioningTimeoutSeconds": 29}}) == [
        "tts-fleet:gpu.provisioningTimeoutSeconds: must be >= 30 (got 29)"
    ]
