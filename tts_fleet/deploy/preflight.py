"""Can this account run this stack's GPU fleet? Types, zones, quota, reachable workers, price.

`pulumi up` succeeds with no GPU quota at all (the service starts at 0 tasks); the first burst
then sits in PROVISIONING. This asks EC2 and Service Quotas, before the deploy:
- which instance types match `tts-fleet:gpu` in the region: the attributes the capacity
  provider gets, from the one source both use (tts_fleet/config/gpu.py), in EC2's API names;
- with `gpu.localStorage`, which types its instance-storage requirement leaves out;
- in which of the stack's availability zones each is offered;
- the account's vCPU quota for the family class and purchase option (Service Quotas);
- the largest worker count that quota allows, warned when it is below `scaling.maxWorkers`;
- the cheapest eligible type's hourly price from tts_fleet/cost/data/prices.json.

Pure apart from the boto3 clients passed in (an EC2 and a Service Quotas client).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.config.gpu import ec2_instance_requirements
from tts_fleet.config.models import GpuConfig, NetworkConfig, Pool, StackConfig
from tts_fleet.cost.report import CostError, load_prices, pick_instance

# The worker image (vllm/vllm-openai) is built for amd64 only; Managed Instances would not
# place it on an arm64 host, so arm64 GPU types are not capacity for this stack.
ARCHITECTURES = ["x86_64"]
VIRTUALIZATION = ["hvm"]
DESCRIBE_BATCH = 100  # DescribeInstanceTypes takes at most 100 names per call

# EC2 vCPU quotas per family class and purchase option (Service Quotas, service code "ec2").
# https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html
# P5 Spot now has its own quota too, whose code could not be verified from here: a P5 Spot
# type is checked against L-7212CCBC and may be reported wrong.
QUOTAS: dict[tuple[str, str], tuple[str, str]] = {
    ("G", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("P", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
}


class PreflightError(Exception):
    """The check could not run (an AWS call failed); one readable line."""


class PreflightUnavailable(PreflightError):
    """The check cannot start here: no credentials, rejected credentials or no region."""


# Error codes that mean "these credentials do not work", not "this check failed".
CREDENTIAL_ERRORS = {
    "ExpiredToken",
    "ExpiredTokenException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "AuthFailure",
    "SignatureDoesNotMatch",
}


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    gpus: int
    zones: tuple[str, ...]  # the stack's zones that offer it


@dataclass(frozen=True)
class QuotaCheck:
    code: str
    name: str
    instance_class: str  # "G" (G and VT) or "P"
    vcpus: float | None  # None: the quota could not be read (see `error`)
    smallest_type: str
    smallest_vcpus: int
    workers: int  # what the quota allows: hosts of the smallest type × workers per host
    error: str = ""


@dataclass(frozen=True)
class Price:
    instance_type: str
    hourly_usd: float  # on-demand, or the Spot estimate for a spot stack
    management_fee_usd: float
    total_hourly_usd: float
    prices_as_of: str


@dataclass
class Preflight:
    stack: str
    region: str
    capacity_type: str  # the price's purchase option (gpu.capacityType)
    # gpu.pools as NAME:CAPACITY_TYPE in order (empty without pools); their quotas are checked.
    pools: list[str]
    zones: list[str]
    eligible: list[InstanceType]
    quotas: list[QuotaCheck]
    reachable_workers: int
    max_workers: int
    price: Price | None
    unpriced: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # gpu.localStorage only (else None): the types that match tts-fleet:gpu without it, which
    # the instance-storage requirement leaves out.
    local_storage_excluded: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def instance_class(instance_type: str) -> str | None:
    """ "G" for the G and VT families, "P" for P; None for anything else (no GPU quota known)."""
    family = instance_type.split(".", 1)[0]
    if family.startswith(("g", "vt")):
        return "G"
    if family.startswith("p"):
        return "P"
    return None


def matching_types(ec2: Any, gpu: GpuConfig) -> list[str]:
    pages = ec2.get_paginator("get_instance_types_from_instance_requirements").paginate(
        ArchitectureTypes=ARCHITECTURES,
        VirtualizationTypes=VIRTUALIZATION,
        InstanceRequirements=ec2_instance_requirements(gpu),
    )
    return sorted({t["InstanceType"] for page in pages for t in page["InstanceTypes"]})


def local_storage_excluded(ec2: Any, gpu: GpuConfig, kept: list[str]) -> list[str]:
    """The types `gpu.localStorage` leaves out: those that match without it."""
    without = matching_types(ec2, gpu.model_copy(update={"local_storage": False}))
    return sorted(set(without) - set(kept))


def type_facts(ec2: Any, names: list[str]) -> dict[str, tuple[int, int]]:
    """{type: (default vCPUs, GPUs)}."""
    facts: dict[str, tuple[int, int]] = {}
    for start in range(0, len(names), DESCRIBE_BATCH):
        batch = names[start : start + DESCRIBE_BATCH]
        pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=batch)
        for page in pages:
            for info in page["InstanceTypes"]:
                gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
                facts[info["InstanceType"]] = (info["VCpuInfo"]["DefaultVCpus"], gpus)
    return facts


def offered_zones(ec2: Any, names: list[str]) -> dict[str, set[str]]:
    zones: dict[str, set[str]] = {name: set() for name in names}
    if not names:
        return zones
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": names}],
    )
    for page in pages:
        for offer in page["InstanceTypeOfferings"]:
            zones.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return zones


def stack_zones(ec2: Any, network: NetworkConfig) -> list[str]:
    """The zones the stack's hosts can land in: its existing subnets' zones, or the first
    `azCount` available zones, which is what components/network.py takes."""
    if network.mode == "existing":
        subnets = ec2.describe_subnets(SubnetIds=list(network.subnet_ids))["Subnets"]
        return sorted({s["AvailabilityZone"] for s in subnets})
    zones = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])[
        "AvailabilityZones"
    ]
    # Local and Wavelength zones are not where a new VPC's subnets go.
    names = sorted(
        z["ZoneName"]
        for z in zones
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    )
    return names[: network.az_count]


def quota_vcpus(quotas: Any, code: str) -> tuple[float | None, str]:
    """(applied value, "") or (None, why not); an unset quota falls back to AWS's default."""
    try:
        return quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"], ""
    except ClientError as error:
        if error.response["Error"]["Code"] != "NoSuchResourceException":
            return None, _client_error(error)
    try:
        default = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
        return default["Quota"]["Value"], ""
    except ClientError as error:
        return None, _client_error(error)


def _client_error(error: ClientError) -> str:
    info = error.response.get("Error", {})
    return f"{info.get('Code', 'Error')}: {info.get('Message', '')}".strip()


def quota_checks(
    quotas: Any, capacity_type: str, gpu_count: int, usable: Iterable[InstanceType]
) -> list[QuotaCheck]:
    """One check per family class among the usable types, sized by its smallest type."""
    by_class: dict[str, list[InstanceType]] = {}
    for item in usable:
        cls = instance_class(item.name)
        if cls is not None:
            by_class.setdefault(cls, []).append(item)
    checks = []
    for cls, items in sorted(by_class.items()):
        code, name = QUOTAS[(cls, capacity_type)]
        smallest = min(items, key=lambda t: (t.vcpus, t.name))
        value, error = quota_vcpus(quotas, code)
        # Each task reserves gpu.gpuCount GPUs and each host has exactly that many: one
        # worker per host, unless a type has more GPUs than asked for.
        per_host = max(smallest.gpus // gpu_count, 1)
        hosts = int(value // smallest.vcpus) if value is not None and smallest.vcpus else 0
        checks.append(
            QuotaCheck(
                code, name, cls, value, smallest.name, smallest.vcpus, hosts * per_host, error
            )
        )
    return checks


def quota_kind(capacity_type: str) -> str:
    """The vCPU quota a pool draws on: Spot requests have their own; a Capacity Reservation
    counts against the On-Demand one (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    capacity-reservations-limits.html)."""
    return "spot" if capacity_type == "spot" else "on-demand"


def pool_quota_checks(
    quotas: Any, pools: Sequence[Pool], gpu_count: int, usable: Sequence[InstanceType]
) -> list[QuotaCheck]:
    """The quota checks of every purchase option the stack's pools use, each over the types
    its pools admit (a pool's allowedInstanceTypes, else every usable type). One pool (a stack
    without gpu.pools) is the single check of its capacity type, as before pools."""
    by_kind: dict[str, dict[str, InstanceType]] = {}
    for pool in pools:
        allowed = set(pool.allowed_instance_types)
        admitted = by_kind.setdefault(quota_kind(pool.capacity_type), {})
        admitted.update({t.name: t for t in usable if not allowed or t.name in allowed})
    return [
        check
        for kind, types in sorted(by_kind.items())
        for check in quota_checks(quotas, kind, gpu_count, types.values())
    ]


def cheapest_price(
    cfg: StackConfig, region: str, names: list[str]
) -> tuple[Price | None, list[str]]:
    """The cheapest eligible type in the price table, and the eligible types it lacks."""
    prices = load_prices(region)
    priced, unpriced = [], []
    for name in names:
        try:
            priced.append(pick_instance(cfg, prices, name))
        except CostError:
            unpriced.append(name)
    if not priced:
        return None, unpriced
    best = min(priced, key=lambda i: (i.total_hourly_usd, i.type))
    price = Price(
        best.type,
        best.hourly_usd,
        best.fee_usd,
        round(best.total_hourly_usd, 4),
        str(prices.meta["as_of"]),
    )
    return price, unpriced


def run_preflight(cfg: StackConfig, stack: str, region: str, ec2: Any, quotas: Any) -> Preflight:
    try:
        zones = stack_zones(ec2, cfg.network)
        names = matching_types(ec2, cfg.gpu)
        excluded = local_storage_excluded(ec2, cfg.gpu, names) if cfg.gpu.local_storage else None
        facts = type_facts(ec2, names)
        offers = offered_zones(ec2, names)
    except ClientError as error:
        raise PreflightError(f"EC2 {error.operation_name}: {_client_error(error)}") from error
    eligible = [
        InstanceType(n, facts[n][0], facts[n][1], tuple(sorted(offers.get(n, set()) & set(zones))))
        for n in names
        if n in facts
    ]
    usable = [t for t in eligible if t.zones]
    checks = pool_quota_checks(quotas, cfg.pools(), cfg.gpu.gpu_count, usable)
    price, unpriced = cheapest_price(cfg, region, [t.name for t in usable])
    result = Preflight(
        stack=stack,
        region=region,
        capacity_type=cfg.gpu.capacity_type,
        pools=[f"{p.name}:{p.capacity_type}" for p in cfg.pools()] if cfg.gpu.pools else [],
        zones=zones,
        eligible=eligible,
        quotas=checks,
        reachable_workers=sum(c.workers for c in checks),
        max_workers=cfg.scaling.max_workers,
        price=price,
        unpriced=unpriced,
        local_storage_excluded=excluded,
    )
    result.warnings = warnings(result)
    return result


def warnings(result: Preflight) -> list[str]:
    found: list[str] = []
    if not result.eligible and result.local_storage_excluded:
        found.append(
            f"gpu.localStorage leaves no instance type in {result.region}: "
            f"{', '.join(result.local_storage_excluded)} match tts-fleet:gpu but lack SSD "
            "instance storage of gpu.storageGib (lower it, or turn gpu.localStorage off)"
        )
    elif not result.eligible:
        found.append(
            f"no instance type in {result.region} matches tts-fleet:gpu: Managed Instances "
            "cannot launch a host (widen gpu.vcpu / gpu.memoryGib or lower gpu.minGpuMemoryGib)"
        )
    elif not any(t.zones for t in result.eligible):
        found.append(
            f"no eligible type is offered in the stack's zones ({', '.join(result.zones)})"
        )
    for check in result.quotas:
        if check.vcpus is None:
            found.append(f"quota {check.code} ({check.name}) could not be read: {check.error}")
    if result.eligible and result.reachable_workers < result.max_workers:
        found.append(_quota_warning(result))
    if result.price is None and any(t.zones for t in result.eligible):
        found.append("no eligible type is in the price table (tts_fleet/cost/data/prices.json)")
    return found


def _quota_warning(result: Preflight) -> str:
    text = (
        f"the account's quota allows {result.reachable_workers} workers, below "
        f"scaling.maxWorkers {result.max_workers}"
    )
    asks = [
        f"{result.max_workers * c.smallest_vcpus} vCPU of '{c.name}' ({c.code}) for "
        f"{result.max_workers} × {c.smallest_type}"
        for c in result.quotas
    ]
    return text + (f": request {' or '.join(asks)}" if asks else "")


def check_stack(
    cfg: StackConfig, stack: str, session_factory: Callable[..., Any], region: str | None
) -> Preflight:
    """The check for one stack with a boto3-Session-like factory (what `tts-fleet preflight`
    and `deploy preview` run). PreflightUnavailable when it cannot start, PreflightError when
    an AWS call fails."""
    session = session_factory(region_name=region)
    if session.get_credentials() is None:
        raise PreflightUnavailable(
            "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or log in"
        )
    if not session.region_name:
        raise PreflightUnavailable(
            "no AWS region: pass --region or set aws:region in the stack file"
        )
    try:
        ec2, quotas = session.client("ec2"), session.client("service-quotas")
        return run_preflight(cfg, stack, session.region_name, ec2, quotas)
    except PreflightUnavailable:
        raise
    except PreflightError as error:
        if any(code in str(error) for code in CREDENTIAL_ERRORS):
            raise PreflightUnavailable(f"AWS credentials rejected: {error}") from error
        raise
    except (BotoCoreError, ClientError) as error:
        # No credentials found only when a call is made, or no endpoint: one line.
        raise PreflightUnavailable(f"AWS: {error}") from error


def render(result: Preflight) -> str:
    lines = [
        f"preflight {result.stack}: {result.region}, "
        f"{'pools ' + ', '.join(result.pools) if result.pools else result.capacity_type}, "
        f"zones {', '.join(result.zones) or '(none)'}",
        f"eligible instance types ({len(result.eligible)}):",
    ]
    for t in result.eligible:
        where = " ".join(t.zones) if t.zones else "not offered in the stack's zones"
        lines.append(f"  {t.name:<16} {t.vcpus:>3} vCPU  {t.gpus} GPU  {where}")
    if result.local_storage_excluded is not None:
        left_out = ", ".join(result.local_storage_excluded) or "none"
        lines.append(
            f"gpu.localStorage: only types with SSD instance storage; left out: {left_out}"
        )
    for c in result.quotas:
        value = "unknown" if c.vcpus is None else f"{c.vcpus:g} vCPU"
        lines.append(
            f"quota {c.code} {c.name}: {value} → {c.workers} workers on {c.smallest_type} "
            f"({c.smallest_vcpus} vCPU)"
        )
    lines.append(
        f"reachable workers: {result.reachable_workers} (scaling.maxWorkers {result.max_workers})"
    )
    if result.price is not None:
        p = result.price
        lines.append(
            f"cheapest eligible: {p.instance_type} ${p.hourly_usd}/h {result.capacity_type} + "
            f"${p.management_fee_usd}/h management fee = ${p.total_hourly_usd}/h "
            f"(prices as of {p.prices_as_of})"
        )
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
