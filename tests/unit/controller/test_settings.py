"""The controller's environment contract for pools (issue #22): TTS_FLEET_POOLS read back as
written, checked as untrusted input, and absent for a stack without pools."""

from __future__ import annotations

import json

import pytest

from tts_fleet.controller.settings import (
    ENV_PLACEMENT,
    ENV_POOLS,
    MAX_POOLS,
    InvalidPools,
    Settings,
    parse_placement,
    parse_pools,
)
from tts_fleet.scaling.controller import ControllerParams
from tts_fleet.scaling.pools import PlacementParams, PoolSpec

PARAMS = ControllerParams(
    min_workers=0,
    max_workers=6,
    jobs_per_worker=8,
    idle_minutes=5,
    cold_start_work=0.12,
    cold_start_s=630.0,
    seconds_per_job=2.0,
    concurrency=4,
    host_idle_s=200.0,
)
SPOT = PoolSpec("spot", "spot", "tts-dev-spot", 0, 6, 0.41)
ON_DEMAND = PoolSpec("od", "on-demand", "tts-dev-od", 0, 4, 1.03)
PLACEMENT = PlacementParams(provisioning_timeout_s=300.0, cooldown_s=600.0)


def settings(
    pools: tuple[PoolSpec, ...] = (), placement: PlacementParams | None = None
) -> Settings:
    return Settings(
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        cluster="tts-dev",
        service="tts-dev-spot",
        bucket="outputs",
        stack="dev",
        params=PARAMS,
        pools=pools,
        placement=placement,
    )


def test_pools_round_trip_through_the_environment_in_order() -> None:
    written = settings((SPOT, ON_DEMAND), PLACEMENT)
    env = written.to_env()
    assert json.loads(env[ENV_PLACEMENT]) == {"cooldown_s": 600.0, "provisioning_timeout_s": 300.0}
    assert json.loads(env[ENV_POOLS])[1] == {
        "name": "od",
        "capacity_type": "on-demand",
        "service": "tts-dev-od",
        "min_workers": 0,
        "max_workers": 4,
        "usd_per_hour": 1.03,
    }
    read = Settings.from_env(env)
    assert read == written and read.pooled


def test_no_pools_leaves_the_environment_as_it_was() -> None:
    env = settings().to_env()
    assert ENV_POOLS not in env and ENV_PLACEMENT not in env
    read = Settings.from_env(env)
    assert read.pools == () and not read.pooled
    assert Settings.from_env({**env, ENV_POOLS: "[]"}).pools == ()


def test_a_whole_price_is_read_as_a_float() -> None:
    [pool] = parse_pools(
        '[{"name":"r","capacity_type":"reserved","service":"s","min_workers":1,'
        '"max_workers":2,"usd_per_hour":2}]'
    )
    assert pool == PoolSpec("r", "reserved", "s", 1, 2, 2.0)
    assert isinstance(pool.usd_per_hour, float)


def _pool(**changes: object) -> dict[str, object]:
    return {
        "name": "spot",
        "capacity_type": "spot",
        "service": "svc",
        "min_workers": 0,
        "max_workers": 4,
        "usd_per_hour": 0.4,
        **changes,
    }


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{", f"{ENV_POOLS} is not JSON"),
        ('{"name": "spot"}', f"{ENV_POOLS} must be a JSON list, not dict"),
        (json.dumps([_pool()] * (MAX_POOLS + 1)), f"at most {MAX_POOLS}"),
        (json.dumps(["spot"]), f"{ENV_POOLS}[0]: must be an object, not str"),
        (json.dumps([{"name": "spot"}]), f"{ENV_POOLS}[0]: capacity_type is missing"),
        (json.dumps([_pool(weight=2)]), f"{ENV_POOLS}[0]: unknown field weight"),
        (json.dumps([_pool(name="")]), f"{ENV_POOLS}[0].name: must be a text"),
        (json.dumps([_pool(service=7)]), f"{ENV_POOLS}[0].service: must be a text"),
        (json.dumps([_pool(capacity_type="SPOT")]), "capacity_type: must be one of spot"),
        (json.dumps([_pool(min_workers=-1)]), "min_workers: must be a whole number 0..5000"),
        (json.dumps([_pool(max_workers=2.5)]), "max_workers: must be a whole number"),
        (json.dumps([_pool(max_workers=True)]), "max_workers: must be a whole number"),
        (json.dumps([_pool(max_workers=5001)]), "max_workers: must be a whole number"),
        (json.dumps([_pool(usd_per_hour="1")]), "usd_per_hour: must be a number"),
        (json.dumps([_pool(usd_per_hour=-0.1)]), "usd_per_hour: must be >= 0"),
        (
            '[{"name":"a","capacity_type":"spot","service":"s","min_workers":0,'
            '"max_workers":1,"usd_per_hour":NaN}]',
            "NaN is not a JSON number",
        ),
        (json.dumps([_pool(min_workers=3, max_workers=2)]), "min_workers must be <= max_workers"),
        (json.dumps([_pool(), _pool(service="other")]), "name spot listed more than once"),
        (json.dumps([_pool(), _pool(name="od")]), "service svc listed more than once"),
    ],
)
def test_a_bad_pool_list_is_refused_naming_the_problem(value: str, problem: str) -> None:
    with pytest.raises(InvalidPools) as raised:
        parse_pools(value)
    assert problem in str(raised.value)


def test_every_problem_is_one_line() -> None:
    value = json.dumps([_pool(name=""), _pool(capacity_type="x", usd_per_hour=-1)])
    with pytest.raises(InvalidPools) as raised:
        parse_pools(value)
    assert str(raised.value).splitlines() == [
        f"{ENV_POOLS}[0].name: must be a text of 1..255 characters",
        f"{ENV_POOLS}[1].capacity_type: must be one of spot, on-demand, reserved",
        f"{ENV_POOLS}[1].usd_per_hour: must be >= 0",
    ]


def test_pools_without_their_placement_timings_are_refused() -> None:
    with pytest.raises(InvalidPools, match=f"{ENV_POOLS} needs {ENV_PLACEMENT}"):
        settings((SPOT,))
    env = settings((SPOT,), PLACEMENT).to_env()
    del env[ENV_PLACEMENT]
    with pytest.raises(InvalidPools, match=f"{ENV_POOLS} needs {ENV_PLACEMENT}"):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[300, 600]", "must be an object of exactly provisioning_timeout_s, cooldown_s"),
        ('{"provisioning_timeout_s": 300}', "must be an object of exactly"),
        ('{"provisioning_timeout_s": 0, "cooldown_s": 600}', "provisioning_timeout_s: must be"),
        ('{"provisioning_timeout_s": 300, "cooldown_s": true}', "cooldown_s: must be seconds"),
        ('{"provisioning_timeout_s": 300, "cooldown_s": 86401}', "cooldown_s: must be seconds"),
        ('{"provisioning_timeout_s": 300, "cooldown_s": Infinity}', "Infinity is not a JSON"),
    ],
)
def test_bad_placement_timings_are_refused(value: str, problem: str) -> None:
    with pytest.raises(InvalidPools) as raised:
        parse_placement(value)
    assert problem in str(raised.value)


def test_placement_timings_are_read_as_seconds() -> None:
    read = parse_placement('{"provisioning_timeout_s": 180, "cooldown_s": 600.5}')
    assert read == PlacementParams(provisioning_timeout_s=180.0, cooldown_s=600.5)
