"""What the controller function is told, through its environment: the one contract between
the Pulumi component that sets these variables and the handler that reads them. Pure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from tts_fleet.scaling.controller import MAX_TASKS, ControllerParams
from tts_fleet.scaling.pools import CAPACITY_TYPES, PlacementParams, PoolSpec

# The Lambda handler, as the runtime names it (module path in the zip + function).
HANDLER = "tts_fleet.controller.handler.handle"
# Where the state lives: the stack's outputs bucket, outside `outputs/` (what `results`
# reads) and `failures/`; one small JSON object rewritten once a minute at most.
STATE_KEY = "controller/state.json"
# Sampling stops this long after the invocation started, so an invocation every minute
# never overlaps the next (the function's timeout leaves room for the last calls).
SAMPLING_BUDGET_S = 50.0

ENV_QUEUE_URL = "TTS_FLEET_QUEUE_URL"
ENV_CLUSTER = "TTS_FLEET_CLUSTER"
ENV_SERVICE = "TTS_FLEET_SERVICE"
ENV_BUCKET = "TTS_FLEET_STATE_BUCKET"
ENV_STATE_KEY = "TTS_FLEET_STATE_KEY"
ENV_STACK = "TTS_FLEET_STACK"
ENV_PARAMS = "TTS_FLEET_CONTROLLER_PARAMS"
# The capacity pools (issue #22), a JSON list of PoolSpec objects in the stack's order. Absent
# or empty: the one service of TTS_FLEET_SERVICE, run exactly as before pools existed (a
# stack deployed before them has neither this variable nor the role's ListTasks/DescribeTasks).
ENV_POOLS = "TTS_FLEET_POOLS"
# With pools, how long a task may wait for capacity and how long a failed pool rests: a JSON
# object of PlacementParams (gpu.provisioningTimeoutSeconds, gpu.poolCooldownSeconds).
ENV_PLACEMENT = "TTS_FLEET_PLACEMENT"
# The longest either may be: a day (the config's own bounds are tighter).
MAX_PLACEMENT_S = 86_400.0
# More pools than any stack lists (one per purchase option and GPU class): a bound on input.
MAX_POOLS = 16
# ECS service names: up to 255 letters, digits, hyphens and underscores (CreateService).
MAX_NAME_CHARS = 255
POOL_KEYS = tuple(f.name for f in fields(PoolSpec))


class InvalidPools(ValueError):
    """TTS_FLEET_POOLS is not a list of pools: one line per problem."""


@dataclass(frozen=True)
class Settings:
    queue_url: str
    cluster: str
    service: str
    bucket: str
    stack: str
    params: ControllerParams
    state_key: str = STATE_KEY
    # The pools in the stack's order; () is one pool, `service`, as before pools existed.
    pools: tuple[PoolSpec, ...] = ()
    placement: PlacementParams | None = None  # required with pools

    def __post_init__(self) -> None:
        if self.pools and self.placement is None:
            raise InvalidPools(f"{ENV_POOLS} needs {ENV_PLACEMENT}")

    @property
    def resource_id(self) -> str:
        """The service's Application Auto Scaling resource id."""
        return f"service/{self.cluster}/{self.service}"

    @property
    def pooled(self) -> bool:
        """Pools were configured: the handler places demand across their services."""
        return bool(self.pools)

    def to_env(self) -> dict[str, str]:
        return {
            ENV_QUEUE_URL: self.queue_url,
            ENV_CLUSTER: self.cluster,
            ENV_SERVICE: self.service,
            ENV_BUCKET: self.bucket,
            ENV_STATE_KEY: self.state_key,
            ENV_STACK: self.stack,
            ENV_PARAMS: params_json(self.params),
            # Only when there are pools: a stack without them keeps its environment as it was.
            **({ENV_POOLS: pools_json(self.pools)} if self.pools else {}),
            **({ENV_PLACEMENT: placement_json(self.placement)} if self.placement else {}),
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        missing = [
            name
            for name in (ENV_QUEUE_URL, ENV_CLUSTER, ENV_SERVICE, ENV_BUCKET, ENV_STACK, ENV_PARAMS)
            if not env.get(name)
        ]
        if missing:
            raise KeyError(f"controller environment lacks {', '.join(missing)}")
        return cls(
            queue_url=env[ENV_QUEUE_URL],
            cluster=env[ENV_CLUSTER],
            service=env[ENV_SERVICE],
            bucket=env[ENV_BUCKET],
            stack=env[ENV_STACK],
            params=ControllerParams(**json.loads(env[ENV_PARAMS])),
            state_key=env.get(ENV_STATE_KEY) or STATE_KEY,
            pools=parse_pools(env.get(ENV_POOLS) or ""),
            placement=parse_placement(env.get(ENV_PLACEMENT) or ""),
        )


def params_json(params: ControllerParams) -> str:
    """The parameters as the function reads them back: `ControllerParams(**json)`. The
    Pulumi program computes them from the stack config, so the function needs no pydantic."""
    return json.dumps(asdict(params), sort_keys=True, separators=(",", ":"))


def pools_json(pools: tuple[PoolSpec, ...]) -> str:
    """The pools as the function reads them back with `parse_pools`."""
    return json.dumps([asdict(pool) for pool in pools], separators=(",", ":"))


def parse_pools(text: str) -> tuple[PoolSpec, ...]:
    """TTS_FLEET_POOLS checked: a JSON list of at most MAX_POOLS objects with exactly the
    PoolSpec fields, names and services unique, 0 <= minWorkers <= maxWorkers <= MAX_TASKS, a
    finite price >= 0. "" or "[]" is no pools. Raises InvalidPools naming every problem."""
    if not text.strip():
        return ()
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        raise InvalidPools(f"{ENV_POOLS} is not JSON: {error}") from None
    if not isinstance(data, list):
        raise InvalidPools(f"{ENV_POOLS} must be a JSON list, not {type(data).__name__}")
    if len(data) > MAX_POOLS:
        raise InvalidPools(f"{ENV_POOLS} lists {len(data)} pools; at most {MAX_POOLS}")
    problems: list[str] = []
    pools = [pool for i, item in enumerate(data) if (pool := _pool(item, i, problems))]
    for key in ("name", "service"):
        seen = [getattr(pool, key) for pool in pools]
        twice = sorted({value for value in seen if seen.count(value) > 1})
        if twice:
            problems.append(f"{ENV_POOLS}: {key} {', '.join(twice)} listed more than once")
    if problems:
        raise InvalidPools("\n".join(problems))
    return tuple(pools)


def placement_json(placement: PlacementParams) -> str:
    return json.dumps(asdict(placement), sort_keys=True, separators=(",", ":"))


def parse_placement(text: str) -> PlacementParams | None:
    """TTS_FLEET_PLACEMENT checked: exactly the PlacementParams fields, each a finite number of
    seconds in (0, MAX_PLACEMENT_S]. "" is none (a stack without pools)."""
    if not text.strip():
        return None
    keys = tuple(f.name for f in fields(PlacementParams))
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        raise InvalidPools(f"{ENV_PLACEMENT} is not JSON: {error}") from None
    if not isinstance(data, dict) or set(data) != set(keys):
        raise InvalidPools(f"{ENV_PLACEMENT} must be an object of exactly {', '.join(keys)}")
    bad = [
        f"{ENV_PLACEMENT}.{key}: must be seconds in (0, {MAX_PLACEMENT_S:g}]"
        for key in keys
        if isinstance(data[key], bool)
        or not isinstance(data[key], (int, float))
        or not 0 < data[key] <= MAX_PLACEMENT_S
    ]
    if bad:
        raise InvalidPools("\n".join(bad))
    return PlacementParams(**{key: float(data[key]) for key in keys})


def _pool(item: object, index: int, problems: list[str]) -> PoolSpec | None:
    where = f"{ENV_POOLS}[{index}]"
    if not isinstance(item, dict):
        problems.append(f"{where}: must be an object, not {type(item).__name__}")
        return None
    found = len(problems)
    for key in sorted(set(POOL_KEYS) - set(item)):
        problems.append(f"{where}: {key} is missing")
    for key in sorted(set(item) - set(POOL_KEYS)):
        problems.append(f"{where}: unknown field {key}")
    if len(problems) > found:
        return None
    for key in ("name", "service"):
        value = item[key]
        if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
            problems.append(f"{where}.{key}: must be a text of 1..{MAX_NAME_CHARS} characters")
    if item["capacity_type"] not in CAPACITY_TYPES:
        problems.append(f"{where}.capacity_type: must be one of {', '.join(CAPACITY_TYPES)}")
    for key in ("min_workers", "max_workers"):
        value = item[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TASKS:
            problems.append(f"{where}.{key}: must be a whole number 0..{MAX_TASKS}")
    price = item["usd_per_hour"]
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price):
        problems.append(f"{where}.usd_per_hour: must be a number")
    elif price < 0:
        problems.append(f"{where}.usd_per_hour: must be >= 0")
    if len(problems) > found:
        return None
    if item["min_workers"] > item["max_workers"]:
        problems.append(
            f"{where}: min_workers must be <= max_workers "
            f"({item['min_workers']} > {item['max_workers']})"
        )
        return None
    return PoolSpec(**{**item, "usd_per_hour": float(price)})


def _no_constant(name: str) -> float:
    """json.loads reads NaN and Infinity, which JSON does not have: refuse them."""
    raise ValueError(f"{name} is not a JSON number")
