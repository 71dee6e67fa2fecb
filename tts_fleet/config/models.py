"""The stack config contract (DESIGN §3.1): pydantic models, one loader, readable errors.

Every field has a default, so an empty stack file deploys a working dev stack. A bad value
fails before any resource exists, one line per problem, naming the full key
(`tts-fleet:scaling.maxWorkers: ...`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from tts_fleet.config.catalogue import default_spot_types
from tts_fleet.scaling.batches import MAX_DEADLINE_S
from tts_fleet.scaling.pools import PlacementParams
from worker.settings import DEFAULT_MODEL, QaMode, QaOnFail, Settings, TaskType, model_variant

# Docker's official Python image on ECR Public: pulled through the stack's own cache rule, so
# the first build does not depend on anonymous Docker Hub pulls (worker/Dockerfile installs
# the pinned vLLM on it).
# By digest: a tag can be moved under a stack; the digest of python:3.12-bookworm as pinned
# by public Dockerfiles (worker/Dockerfile's ARG default names the same image).
DEFAULT_BASE_IMAGE = (
    "public.ecr.aws/docker/library/python:3.12-bookworm"
    "@sha256:3cd9086bdb30f7c9bc08a3fa621d9842e0d3f6f9291aeb4677e0547817c10b12"
)

NAMESPACE = "tts-fleet"

# CloudWatch evaluates an alarm over at most one day of 1-minute periods.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html
MAX_IDLE_MINUTES = 1440
# The longest scaling.deadlineMinutes: the longest deadline a batch record may carry.
MAX_DEADLINE_MINUTES = int(MAX_DEADLINE_S // 60)
# SQS visibility timeout range, seconds. https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
MIN_VISIBILITY_SECONDS = 30  # shorter than this, the worker's heartbeat cannot keep up
MAX_VISIBILITY_SECONDS = 43_200
# SQS message retention: 1 minute to 14 days.
MAX_RETENTION_DAYS = 14
# ECS Managed Instances infrastructureOptimization.scaleInAfter: -1 (off) or 0..3600 s.
MAX_HOST_IDLE_SECONDS = 3600
# ECS container stopTimeout ceiling (seconds) before SIGKILL.
MAX_STOP_TIMEOUT_SECONDS = 120

_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(root|(user|role)/[\w+=,.@/-]+)$")
# ECR pull-through cache credentials must be a secret whose name starts ecr-pullthroughcache/.
# https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreatePullThroughCacheRule.html
_PTC_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:ecr-pullthroughcache/[\w/+=.@-]+$"
)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_COMMIT = re.compile(r"[0-9a-f]{40}")  # a Hugging Face (git) commit, full length
# How long a pool's task may wait for capacity, and a pool stay skipped, at most: an hour (ECS
# retries a provisioning task about every 5 min) and a day (the controller's bound on input,
# tts_fleet/controller/settings.py MAX_PLACEMENT_S).
MAX_PROVISIONING_TIMEOUT_SECONDS = 3600
MAX_POOL_COOLDOWN_SECONDS = 86_400
# At most this many pools: the controller's safety net alarm reads the queue and each pool's
# desired count in one metric math alarm, and CloudWatch evaluates at most 10 metrics per alarm.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html (a hard limit)
MAX_POOLS = 9
# A pool's name is part of its resource and ECS service names: short, lowercase, no dots.
_POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
# A Capacity Reservation resource group (the target of a RESERVED capacity provider).
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CapacityReservationRequest.html
_RESERVATION_GROUP_ARN = re.compile(
    r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]{1,300}$"
)
# Application Auto Scaling cron: cron(minutes hours day-of-month month day-of-week year).
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?,/#L W-]+$")


class ConfigError(Exception):
    """Stack config problems, one readable line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        """Cross-field rules as (camelCase field path, message); empty when valid."""
        return []

    @model_validator(mode="after")
    def _check_rules(self) -> _Section:
        problems = self.rule_problems()
        if problems:
            raise PydanticCustomError(
                "config_rules",
                "{summary}",
                {"summary": "; ".join(m for _, m in problems), "problems": problems},
            )
        return self


class Range(_Section):
    min: int = Field(ge=1, description="Lower bound, inclusive.")
    max: int = Field(ge=1, description="Upper bound, inclusive; must be >= min.")

    def rule_problems(self) -> list[tuple[str, str]]:
        if self.min > self.max:
            return [("max", f"must be >= min ({self.max} < {self.min})")]
        return []


class Schedule(_Section):
    cron: str = Field(
        description=(
            "AWS 6-field cron (minutes hours day-of-month month day-of-week year), UTC; "
            "exactly one of day-of-month and day-of-week is `?`."
        )
    )
    min_workers: int = Field(
        ge=0, description="minWorkers from this time on, until the next schedule fires."
    )
    max_workers: int = Field(
        ge=1,
        description=(
            "maxWorkers from this time on; must be >= this entry's minWorkers and <= "
            "scaling.maxWorkers."
        ),
    )

    @property
    def expression(self) -> str:
        """The Application Auto Scaling schedule string."""
        return f"cron({cron_body(self.cron)})"

    def rule_problems(self) -> list[tuple[str, str]]:
        problems = [("cron", p) for p in cron_problems(self.cron)]
        if self.min_workers > self.max_workers:
            problems.append(
                ("maxWorkers", f"must be >= minWorkers ({self.max_workers} < {self.min_workers})")
            )
        return problems


def cron_body(cron: str) -> str:
    text = cron.strip()
    if text.startswith("cron(") and text.endswith(")"):
        text = text[5:-1]
    return " ".join(text.split())


def cron_problems(cron: str) -> list[str]:
    """Checks an AWS 6-field cron (minutes hours day-of-month month day-of-week year)."""
    fields = cron_body(cron).split(" ")
    if len(fields) != 6:
        return [
            f"must have 6 fields (minutes hours day-of-month month day-of-week year), "
            f"got {len(fields)} in {cron!r}; e.g. 'cron(0 8 ? * MON-FRI *)'"
        ]
    bad = [f for f in fields if not _CRON_FIELD.match(f)]
    if bad:
        return [f"invalid field {bad[0]!r} in {cron!r}"]
    if (fields[2] == "?") == (fields[4] == "?"):
        return [f"exactly one of day-of-month and day-of-week must be '?' in {cron!r}"]
    for (name, low, high), field in zip(_CRON_RANGES, fields, strict=False):
        for number in re.findall(r"\d+", field.split("/")[0]):
            if not low <= int(number) <= high:
                return [f"{name} {number} is outside {low}-{high} in {cron!r}"]
    return []


# Numeric ranges of the first four AWS cron fields (day-of-week and year are left to AWS).
_CRON_RANGES = (("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31), ("month", 1, 12))


class ScalingConfig(_Section):
    min_workers: int = Field(0, ge=0, description="Workers kept when idle; 0 scales to zero.")
    max_workers: int = Field(4, ge=1, description="Upper bound on workers; must be >= minWorkers.")
    jobs_per_worker: int = Field(
        8,
        ge=1,
        description=(
            "Target backlog per worker: desired = ceil(outstanding / jobsPerWorker). Keep"
            " it >= worker.concurrency."
        ),
    )
    idle_minutes: int = Field(
        5,
        ge=1,
        le=MAX_IDLE_MINUTES,
        description="Minutes with nothing outstanding before the fleet returns to minWorkers.",
    )
    host_idle_seconds: int = Field(
        200,
        ge=-1,
        le=MAX_HOST_IDLE_SECONDS,
        description=(
            "Managed Instances `scaleInAfter`: how long an idle GPU host, with its pulled"
            " image, is kept for reuse; -1 turns it off. 200 s: the nine simulated workloads"
            " of docs/scaling.md cost least there with no p95 lost."
        ),
    )
    schedules: tuple[Schedule, ...] = Field(
        (),
        description=(
            "Scheduled capacity: a list of {cron, minWorkers, maxWorkers}, one "
            "ScheduledAction each."
        ),
    )
    mode: Literal["controller", "alarms"] = Field(
        "controller",
        description=(
            "`controller`: a controller function samples the queue every 10 s and sets the"
            " desired count with the cold-start-aware policy (tts_fleet/scaling/controller.py);"
            " `alarms`: CloudWatch alarms and a step scaling policy on 1-minute metrics."
        ),
    )
    cold_start_work: float = Field(
        0.12,
        ge=0,
        le=10,
        description=(
            "controller mode only: a new GPU is started only if at least this many cold"
            " starts' worth of work would remain for it when it arrives (0: start one for"
            " any backlog; higher: fewer GPU-hours, longer waits)."
        ),
    )

    deadline_minutes: int = Field(
        0,
        ge=0,
        le=MAX_DEADLINE_MINUTES,
        description=(
            "The deadline, in minutes from submission, that `tts-fleet submit` gives a batch"
            " sent without --deadline or --within (issue #23); 0: none, the fleet scales on"
            " the backlog alone."
        ),
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        if self.min_workers > self.max_workers:
            return [
                ("maxWorkers", f"must be >= minWorkers ({self.max_workers} < {self.min_workers})")
            ]
        # The step bands stop at maxWorkers, so a schedule cannot raise the fleet above it.
        return [
            (
                f"schedules[{i}].maxWorkers",
                f"must be <= scaling.maxWorkers ({entry.max_workers} > {self.max_workers})",
            )
            for i, entry in enumerate(self.schedules)
            if entry.max_workers > self.max_workers
        ] + self._deadline_problems()

    def _deadline_problems(self) -> list[tuple[str, str]]:
        """Only the controller reads deadline batches: in alarms mode one would be a promise
        nothing keeps."""
        if self.deadline_minutes and self.mode != "controller":
            return [("deadlineMinutes", "needs scaling.mode controller (0 in alarms mode)")]
        return []


class NetworkConfig(_Section):
    mode: Literal["nat", "endpoints", "existing"] = Field(
        "nat",
        description=(
            "`nat`: new VPC with NAT gateways; `endpoints`: new VPC with VPC endpoints "
            "and no internet egress; `existing`: your VPC and subnets."
        ),
    )
    az_count: int = Field(
        2, ge=1, le=6, description="Availability zones of the new VPC (nat and endpoints modes)."
    )
    nat_gateways: Literal["single", "one-per-az"] = Field(
        "single", description="`single` NAT gateway, or `one-per-az` (nat mode only)."
    )
    vpc_id: str = Field("", description="existing mode only: the VPC id.")
    subnet_ids: tuple[str, ...] = Field(
        (), description="existing mode only: at least 2 private subnet ids in different AZs."
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.mode == "existing":
            if not _VPC_ID.match(self.vpc_id):
                problems.append(("vpcId", "existing mode needs a VPC id like 'vpc-0abc12345'"))
            if len(self.subnet_ids) < 2:
                problems.append(
                    (
                        "subnetIds",
                        f"existing mode needs at least 2 private subnet ids in "
                        f"different AZs (got {len(self.subnet_ids)})",
                    )
                )
            for i, subnet in enumerate(self.subnet_ids):
                if not _SUBNET_ID.match(subnet):
                    problems.append((f"subnetIds[{i}]", f"{subnet!r} is not a subnet id"))
        else:
            if self.vpc_id:
                problems.append(
                    ("vpcId", f"only used when mode is 'existing' (mode is {self.mode!r})")
                )
            if self.subnet_ids:
                problems.append(
                    ("subnetIds", f"only used when mode is 'existing' (mode is {self.mode!r})")
                )
        return problems


class PoolConfig(_Section):
    """One entry of `gpu.pools`: a capacity provider (its purchase option fixed at creation)
    and the ECS service that places workers on it."""

    name: str = Field(
        description=(
            "The pool's name (lowercase letters, digits, `-`; at most 24): its resources, its"
            " ECS service and the controller's events carry it."
        ),
    )
    capacity_type: Literal["spot", "on-demand", "reserved"] = Field(
        description=(
            "`spot`, `on-demand` or `reserved` (a Capacity Reservation resource group);"
            " changing it replaces the pool's capacity provider."
        ),
    )
    allowed_instance_types: tuple[str, ...] = Field(
        (),
        description=(
            "Instance types this pool may launch. Empty: a spot pool takes the smallest"
            " admitted size of up to 3 GPU families (several Spot pools are interrupted less),"
            " any other pool any type that matches gpu.*."
        ),
    )
    capacity_reservation_group_arn: str = Field(
        "",
        description=(
            "reserved pools only (and required there): the resource group of Capacity"
            " Reservations the pool launches into, and only into."
        ),
    )
    min_workers: int | None = Field(
        None, ge=0, description="Workers this pool keeps running; unset: 0."
    )
    max_workers: int | None = Field(
        None,
        ge=1,
        description="At most this many workers in this pool; unset: scaling.maxWorkers.",
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if not _POOL_NAME.match(self.name):
            problems.append(
                (
                    "name",
                    f"{self.name!r} must be 1-24 lowercase letters, digits or '-', from a letter",
                )
            )
        arn = self.capacity_reservation_group_arn
        key = "capacityReservationGroupArn"
        if self.capacity_type == "reserved" and not arn:
            problems.append((key, "a reserved pool needs its Capacity Reservation resource group"))
        elif self.capacity_type != "reserved" and arn:
            problems.append(
                (key, f"only a reserved pool takes one (capacityType is {self.capacity_type!r})")
            )
        elif arn and not _RESERVATION_GROUP_ARN.match(arn):
            problems.append((key, f"{arn!r} is not a resource group ARN (...:group/NAME)"))
        low, high = self.min_workers, self.max_workers
        if low is not None and high is not None and low > high:
            problems.append(("maxWorkers", f"must be >= minWorkers ({high} < {low})"))
        return problems


@dataclass(frozen=True)
class Pool:
    """A pool with every default applied (StackConfig.pools())."""

    name: str
    capacity_type: Literal["spot", "on-demand", "reserved"]
    allowed_instance_types: tuple[str, ...]
    capacity_reservation_group_arn: str  # "" unless reserved
    min_workers: int
    max_workers: int


# worker.concurrency when the stack does not set it, by the GPU memory every host the stack
# admits has (gpu.minGpuMemoryGib): (floor GiB, requests in flight), largest floor first.
# From the one published sweep of this server and model (aws/deep-learning-containers PR #6022,
# vllm-omni on a g6e.xlarge, L40S 46 GB, Qwen3-TTS-1.7B-CustomVoice: 4.08× / 8.17× / 13.0× /
# 18.0× real time at 1 / 4 / 8 / 16 in flight, p95 1.1 / 2.4 / 3.6 / 4.2 s). A 46-GB GPU keeps
# 16: still +38 % over 8, at a p95 a batch job does not feel. The gain flattens (×2.0, ×1.59,
# ×1.38 per doubling), and what a sequence holds (its KV cache, up to the talker's 4,096-token
# max_model_len, inside the talker's fixed 0.3 share of the GPU) halves with a 24-GB L4 or A10G:
# 8 there. Below 20 GiB, 4. Why, in full: docs/worker.md#concurrency.
CONCURRENCY_BY_GPU_MEMORY_GIB: tuple[tuple[int, int], ...] = ((40, 16), (20, 8), (0, 4))


def default_concurrency(min_gpu_memory_gib: int) -> int:
    """worker.concurrency for a stack that does not set it (CONCURRENCY_BY_GPU_MEMORY_GIB)."""
    return next(c for floor, c in CONCURRENCY_BY_GPU_MEMORY_GIB if min_gpu_memory_gib >= floor)


class GpuConfig(_Section):
    min_gpu_memory_gib: int = Field(
        20, ge=1, le=1536, description="Minimum total GPU memory per host."
    )
    gpu_count: int = Field(
        1, ge=1, le=16, description="Exact GPUs per host, and GPUs reserved per task."
    )
    vcpu: Range = Field(
        Range(min=4, max=96), description="vCPU range of acceptable instance types."
    )
    memory_gib: Range = Field(
        Range(min=16, max=512), description="Memory range of acceptable instance types."
    )
    capacity_type: Literal["on-demand", "spot"] = Field(
        "on-demand",
        description="`on-demand` or `spot`; changing it replaces the capacity provider.",
    )
    allowed_instance_types: tuple[str, ...] = Field(
        (),
        description=(
            "Pin instance types (e.g. `g6e.xlarge`) for an SLA; empty means any type that matches."
        ),
    )
    pools: tuple[PoolConfig, ...] = Field(
        (),
        description=(
            "Capacity pools (at most 9), each one capacity provider with its own ECS service;"
            " the controller fills reserved pools first, then the cheapest, the listed order"
            " breaking ties; the first is the one Application Auto Scaling drives"
            " (docs/deploy.md#capacity-pools). Empty: one pool from capacityType and"
            " allowedInstanceTypes."
        ),
    )
    provisioning_timeout_seconds: int = Field(
        300,
        ge=30,
        le=MAX_PROVISIONING_TIMEOUT_SECONDS,
        description=(
            "With gpu.pools: a pool whose oldest task has waited this long for capacity"
            " (PROVISIONING) is unavailable for poolCooldownSeconds; its demand moves to the"
            " next pool."
        ),
    )
    pool_cooldown_seconds: int = Field(
        600,
        ge=60,
        le=MAX_POOL_COOLDOWN_SECONDS,
        description=(
            "With gpu.pools: how long a pool stays unavailable after a provisioning timeout,"
            " a placement failure or too many Spot interruptions (its running tasks stay)."
        ),
    )
    storage_gib: int = Field(
        100,
        ge=30,
        le=16_384,
        description="Task volume size per host; it must hold the image and its baked weights.",
    )
    local_storage: bool = Field(
        False,
        description=(
            "Put the hosts' data volume (the image, the task's `/data` volume and the fetched"
            " weights) on the instance's NVMe instance store (Managed Instances"
            " `useLocalStorage`): only types with SSD instance storage of at least `storageGib`"
            " are eligible (`tts-fleet preflight` lists which remain). Off by default, so"
            " existing stacks keep their EBS data volume and every matching type."
        ),
    )


class QueueConfig(_Section):
    visibility_timeout_seconds: int = Field(
        300,
        ge=MIN_VISIBILITY_SECONDS,
        le=MAX_VISIBILITY_SECONDS,
        description="Initial visibility timeout; the worker's heartbeat extends it.",
    )
    max_receive_count: int = Field(
        5, ge=1, le=1000, description="Receives before SQS moves a message to the DLQ."
    )
    retention_days: int = Field(4, ge=1, le=MAX_RETENTION_DAYS, description="Jobs queue retention.")
    dlq_retention_days: int = Field(
        14, ge=1, le=MAX_RETENTION_DAYS, description="DLQ retention; must be >= retentionDays."
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        # A standard queue keeps a message's original enqueue time in the DLQ, so a shorter
        # DLQ retention would silently drop redriven failures.
        if self.dlq_retention_days < self.retention_days:
            return [
                (
                    "dlqRetentionDays",
                    f"must be >= retentionDays ({self.dlq_retention_days} < {self.retention_days})",
                )
            ]
        return []


class QaConfig(_Section):
    """worker.qa: the output checks of every piece (worker/qa/, docs/worker.md#output-checks).
    Each default is the worker's own (worker/settings.py Settings), read from there."""

    mode: QaMode = Field(
        Settings.qa_mode,
        description=(
            "`basic`: duration against the text, silences, signal, runaway ceiling;"
            " `asr`: also a transcript by a second vLLM server on the same GPU, scored by"
            " word error rate; `off`: none."
        ),
    )
    retries: int = Field(
        Settings.qa_retries,
        ge=0,
        le=10,
        description="Re-renders of a bad piece, each with a new seed.",
    )
    max_wer: float = Field(
        Settings.qa_max_wer,
        ge=0,
        le=1,
        description="Mode `asr`: a piece whose transcript's word error rate is above this is bad.",
    )
    on_fail: QaOnFail = Field(
        Settings.qa_on_fail,
        description=(
            "A job with a piece that fails every attempt: `fail` records a `quality:` failure"
            " and dead-letters it; `keep` stores it with `qa.passed: false` in its manifest."
        ),
    )
    asr_model: str = Field(
        Settings.asr_model,
        min_length=1,
        description="Mode `asr`: the recognizer vLLM serves beside the TTS model.",
    )
    asr_model_revision: str = Field(
        "",
        description=(
            "Mode `asr` with an image the stack builds: the Hugging Face commit (40 hex digits)"
            " of `asrModel` the build bakes in (`ARG ASR_MODEL_REVISION`), as `modelRevision`"
            " pins the TTS model; a prebuilt `image` brings its own."
        ),
    )


class WorkerConfig(_Section):
    image: str = Field(
        "",
        description=(
            "Empty: build `worker/` with CodeBuild. Otherwise a prebuilt image URI, used as is."
        ),
    )
    model: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        description="Model baked into the image and served by vLLM-Omni.",
    )
    concurrency: int = Field(
        default_concurrency(GpuConfig.model_fields["min_gpu_memory_gib"].default),
        ge=1,
        le=64,
        description=(
            "Speech requests in flight per GPU task. Unset: from gpu.minGpuMemoryGib, 16 at"
            " >= 40 GiB, 8 at >= 20 GiB, else 4 (the default's 8: 20 GiB)."
        ),
    )
    stop_timeout_seconds: int = Field(
        120,
        ge=2,
        le=MAX_STOP_TIMEOUT_SECONDS,
        description="Drain time after SIGTERM before SIGKILL (the task's stopTimeout).",
    )
    max_text_chars: int = Field(
        20_000, ge=1, le=200_000, description="Longest accepted job text; longer goes to the DLQ."
    )
    base_image: str = Field(
        DEFAULT_BASE_IMAGE,
        min_length=1,
        description=(
            "Base image of the build (`ARG BASE_IMAGE`). A `public.ecr.aws/...` or `quay.io/...`"
            " image is pulled through an ECR pull-through cache rule the stack creates (no"
            " credentials); a Docker Hub image too when `dockerHubSecretArn` is set, otherwise"
            " anonymously from Docker Hub (rate-limited; docs/deploy.md#the-base-image)."
        ),
    )
    docker_hub_secret_arn: str = Field(
        "",
        description=(
            "Secrets Manager secret `ecr-pullthroughcache/...` holding Docker Hub `username` and"
            " `accessToken`: a Docker Hub `baseImage` is then pulled through an ECR cache."
        ),
    )
    model_revision: str = Field(
        # Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice's commit, the snapshot directory its download
        # leaves in a Hugging Face cache (models--Qwen--Qwen3-TTS-12Hz-1.7B-CustomVoice/snapshots/).
        "0c0e3051f131929182e2c023b9537f8b1c68adfe",
        description=(
            "Hugging Face commit (40 hex digits) of the model weights baked in (`ARG"
            " MODEL_REVISION`); the default is the default model's. Another `model` needs its"
            " own: the newest commit in the model's history on the Hub, or the"
            " `snapshots/<commit>` directory a download leaves (docs/deploy.md#the-model-revision);"
            " unused with a prebuilt `image`."
        ),
    )
    cuda_compatibility: bool = Field(
        False,
        description=(
            "Set `VLLM_ENABLE_CUDA_COMPATIBILITY=1` on the container: vLLM loads the image's"
            " CUDA forward-compatibility libraries when the host driver is older."
        ),
    )
    weights: Literal["s3", "image"] = Field(
        "image",
        description=(
            "Where the task gets the model: `image` bakes the snapshot into the worker image"
            " at build; `s3` fetches `weights/<model>/<modelRevision>/` of the stack's bucket"
            " (written once by `tts-fleet weights upload`) to the task's data volume before"
            " vLLM starts, verified file by file, so the image is ~4 GB smaller and the weights"
            " arrive over parallel S3 connections. `image` is the default because it needs"
            " no step besides `pulumi up` (an empty stack file deploys a working stack, and"
            " existing stacks are unchanged); switch to `s3` after the upload"
            " (docs/deploy.md#weights-from-s3)."
        ),
    )
    qa: QaConfig = Field(
        QaConfig(),
        description=(
            "Output checks: `mode` (off, basic, asr), `retries`, `maxWer`, `onFail` (fail,"
            " keep), `asrModel` and its `asrModelRevision` (docs/deploy.md#output-checks)."
        ),
    )
    task_type: TaskType = Field(
        "CustomVoice",
        description=(
            "What the checkpoint does: `CustomVoice` (its 9 speakers), `VoiceDesign` (a voice"
            " from a description) or `Base` (a voice cloned from reference audio); jobs name a"
            " speaker or a voice of the library (`tts-fleet voices`). Another task type needs"
            " its checkpoint as `model` (Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign, -Base) and that"
            " checkpoint's `modelRevision` (docs/cli.md#voices)."
        ),
    )
    shared_memory_mib: int = Field(
        2048,
        ge=64,
        le=65_536,
        description=(
            "`/dev/shm` size (linuxParameters.sharedMemorySize); it counts against the"
            " task's memory reservation."
        ),
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        problems = []
        arn = self.docker_hub_secret_arn
        if arn and not _PTC_SECRET_ARN.match(arn):
            problems.append(
                (
                    "dockerHubSecretArn",
                    f"{arn!r} is not a Secrets Manager secret ARN named ecr-pullthroughcache/...",
                )
            )
        # vLLM-Omni refuses every request whose task type is not its checkpoint's.
        variant = model_variant(self.model)
        if variant is not None and variant != self.task_type:
            problems.append(
                (
                    "model",
                    f"{self.model!r} is a {variant} checkpoint, not one for taskType"
                    f" {self.task_type} (e.g. {checkpoint_of(self.task_type)})",
                )
            )
        # A branch or tag moves under a stack; a commit is what was reviewed.
        if not _COMMIT.fullmatch(self.model_revision):
            problems.append(
                (
                    "modelRevision",
                    f"must be a commit SHA, 40 hex digits (got {self.model_revision!r})",
                )
            )
        elif (
            # a prebuilt image brings its own weights, unless they come from S3
            (not self.image or self.weights == "s3")
            and self.model != DEFAULT_MODEL
            and self.model_revision == _pinned_revision()
        ):
            problems.append(
                ("modelRevision", f"is the default model's commit: set the commit of {self.model}")
            )
        # Mode asr bakes the recognizer into the image the stack builds, pinned like the model.
        revision = self.qa.asr_model_revision
        if revision and not _COMMIT.fullmatch(revision):
            problems.append(
                ("qa.asrModelRevision", f"must be a commit SHA, 40 hex digits (got {revision!r})")
            )
        elif not revision and self.qa.mode == "asr" and not self.image:
            problems.append(
                (
                    "qa.asrModelRevision",
                    "mode asr bakes the recognizer into the image the stack builds: set the"
                    f" commit SHA (40 hex digits) of {self.qa.asr_model}",
                )
            )
        return problems


def checkpoint_of(task_type: str) -> str:
    """The 1.7B Qwen3-TTS checkpoint of a task type (the default model is CustomVoice's)."""
    return DEFAULT_MODEL.removesuffix("CustomVoice") + task_type


def _pinned_revision() -> str:
    """worker.modelRevision's default: the commit of the default model."""
    return str(WorkerConfig.model_fields["model_revision"].default)


class OutputsConfig(_Section):
    expire_days: int = Field(
        30, ge=0, le=3650, description="Delete outputs after this many days; 0 keeps them."
    )
    on_destroy: Literal["retain", "delete"] = Field(
        "retain",
        description=(
            "What `pulumi destroy` does with the output bucket: `retain` leaves it (and its"
            " objects) in place, `delete` empties and deletes it. Run `up` after changing it."
        ),
    )
    break_glass_principal_arns: tuple[str, ...] = Field(
        (),
        description=(
            "IAM roles or users that may write or delete `outputs/`, `failures/` and"
            " `controller/` besides the worker task role and the controller role (the bucket"
            " policy denies everyone else): an operator's break-glass role."
        ),
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        return [
            (f"breakGlassPrincipalArns[{i}]", f"{arn!r} is not an IAM account, user or role ARN")
            for i, arn in enumerate(self.break_glass_principal_arns)
            if not _PRINCIPAL_ARN.match(arn)
        ]


class AlertsConfig(_Section):
    email: str = Field("", description="Optional SNS email subscription for the alerts topic.")
    monthly_budget_usd: float | None = Field(
        None, gt=0, description="Optional AWS Budget on the stack's cost tag."
    )
    max_queue_age_minutes: int = Field(
        60, ge=1, le=20_160, description="Alert when the oldest job has waited longer than this."
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        if self.email and not _EMAIL.match(self.email):
            return [("email", f"{self.email!r} is not an email address")]
        return []


class ProducersConfig(_Section):
    principal_arns: tuple[str, ...] = Field(
        (),
        description=(
            "IAM principals (other accounts too) allowed to SendMessage through the queue policy."
        ),
    )

    def rule_problems(self) -> list[tuple[str, str]]:
        return [
            (f"principalArns[{i}]", f"{arn!r} is not an IAM account, user or role ARN")
            for i, arn in enumerate(self.principal_arns)
            if not _PRINCIPAL_ARN.match(arn)
        ]


class NotificationsConfig(_Section):
    # One switch, no `target`: EventBridge is the bus, so an SNS topic, a Lambda or another
    # account subscribes with a rule of its own (docs/cli.md#completion-events).
    enabled: bool = Field(
        False,
        description=(
            "Publish one EventBridge event per finished or failed job (S3 Object Created on"
            " `outputs/*.json` and `failures/*.json`) into an events queue that"
            " `tts-fleet wait --events` consumes (docs/cli.md#completion-events)."
        ),
    )


SECTIONS: dict[str, type[_Section]] = {
    "scaling": ScalingConfig,
    "network": NetworkConfig,
    "gpu": GpuConfig,
    "queue": QueueConfig,
    "worker": WorkerConfig,
    "outputs": OutputsConfig,
    "alerts": AlertsConfig,
    "producers": ProducersConfig,
    "notifications": NotificationsConfig,
}


# Soft memory reservation: leave headroom under the smallest allowed host for the ECS agent
# and the OS (a hard limit equal to host memory would never be placed).
MEMORY_RESERVATION_FRACTION = 0.75
# /dev/shm counts against the host's memory when ECS places the task, so it comes out of
# that reservation; keep at least this much for the task itself.
# https://github.com/aws/amazon-ecs-agent/blob/master/proposals/shmsize-tmpfs.md
MIN_MEMORY_RESERVATION_MIB = 1024


def memory_reservation_mib(min_memory_gib: int, shared_memory_mib: int) -> int:
    """The worker container's soft memory reservation: the host headroom fraction minus
    /dev/shm (components/service.py sets it; StackConfig refuses one under the floor)."""
    return int(min_memory_gib * 1024 * MEMORY_RESERVATION_FRACTION) - shared_memory_mib


class StackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scaling: ScalingConfig = Field(
        ScalingConfig(), description="How many workers run: the 0..N policy."
    )
    network: NetworkConfig = Field(
        NetworkConfig(), description="Where the GPU hosts and tasks live."
    )
    gpu: GpuConfig = Field(
        GpuConfig(), description="Which instances ECS Managed Instances may launch."
    )
    queue: QueueConfig = Field(
        QueueConfig(), description="The jobs queue and its dead-letter queue."
    )
    worker: WorkerConfig = Field(
        WorkerConfig(), description="The worker image and the task it runs."
    )
    outputs: OutputsConfig = Field(OutputsConfig(), description="The output bucket.")
    alerts: AlertsConfig = Field(AlertsConfig(), description="Alarms' recipients and the budget.")
    producers: ProducersConfig = Field(ProducersConfig(), description="Who may submit jobs.")
    notifications: NotificationsConfig = Field(
        NotificationsConfig(), description="Completion events for finished and failed jobs."
    )

    @model_validator(mode="before")
    @classmethod
    def _derive_concurrency(cls, data: Any) -> Any:
        """worker.concurrency not set: the default for gpu.minGpuMemoryGib
        (default_concurrency). Sections given as validated models (from_raw, the defaults);
        raw dicts are left to the section models, which give the 20-GiB default."""
        if not isinstance(data, dict):
            return data
        gpu, worker = data.get("gpu", GpuConfig()), data.get("worker", WorkerConfig())
        if not (isinstance(gpu, GpuConfig) and isinstance(worker, WorkerConfig)):
            return data
        if "concurrency" in worker.model_fields_set:
            return data  # explicit wins
        derived = default_concurrency(gpu.min_gpu_memory_gib)
        return {**data, "worker": worker.model_copy(update={"concurrency": derived})}

    def rule_problems(self) -> list[tuple[str, str]]:
        """Rules across sections as (section.key, message); empty when valid."""
        return self._memory_problems() + self._pool_problems()

    def _memory_problems(self) -> list[tuple[str, str]]:
        shm, host = self.worker.shared_memory_mib, self.gpu.memory_gib.min
        reservation = memory_reservation_mib(host, shm)
        if reservation < MIN_MEMORY_RESERVATION_MIB:
            return [
                (
                    "worker.sharedMemoryMib",
                    f"{shm} leaves {reservation} MiB of the {host} GiB host (gpu.memoryGib.min)"
                    f" for the task (at least {MIN_MEMORY_RESERVATION_MIB}); lower it or raise"
                    " gpu.memoryGib.min",
                )
            ]
        return []

    def _pool_problems(self) -> list[tuple[str, str]]:
        """gpu.pools: at most MAX_POOLS, unique names, no gpu-level purchase keys beside them,
        and each pool's bounds inside scaling's: no pool above the fleet's maximum, and the
        pools' floors together not above it either."""
        gpu, top = self.gpu, self.scaling.max_workers
        problems: list[tuple[str, str]] = []
        if len(gpu.pools) > MAX_POOLS:
            problems.append(("gpu.pools", f"at most {MAX_POOLS} pools (got {len(gpu.pools)})"))
        seen: dict[str, int] = {}
        for i, pool in enumerate(gpu.pools):
            if pool.name in seen:
                problems.append(
                    (
                        f"gpu.pools[{i}].name",
                        f"{pool.name!r} is already pools[{seen[pool.name]}].name",
                    )
                )
            seen.setdefault(pool.name, i)
        # Each pool says its own purchase option and types; a gpu-level one beside them
        # would be silently unused.
        for key in ("capacity_type", "allowed_instance_types"):
            if gpu.pools and key in gpu.model_fields_set:
                problems.append(
                    (
                        f"gpu.{to_camel(key)}",
                        f"only used without gpu.pools (each pool has its own {to_camel(key)})",
                    )
                )
        for i, pool in enumerate(self.gpu.pools):
            for key, value in (("minWorkers", pool.min_workers), ("maxWorkers", pool.max_workers)):
                if value is not None and value > top:
                    problems.append(
                        (
                            f"gpu.pools[{i}].{key}",
                            f"must be <= scaling.maxWorkers ({value} > {top})",
                        )
                    )
        # Application Auto Scaling sizes one service (the first pool's): in alarms mode the
        # other pools would never get a worker.
        if len(gpu.pools) > 1 and self.scaling.mode == "alarms":
            problems.append(
                (
                    "gpu.pools",
                    f"{len(gpu.pools)} pools need scaling.mode: controller (in alarms mode"
                    " Application Auto Scaling sizes only the first pool's service)",
                )
            )
        floors = sum(pool.min_workers or 0 for pool in self.gpu.pools)
        if floors > top and not problems:
            problems.append(
                (
                    "gpu.pools",
                    f"the pools' minWorkers add up to {floors}, more than scaling.maxWorkers"
                    f" ({top})",
                )
            )
        return problems

    def placement(self) -> PlacementParams:
        """How the controller moves demand between pools (gpu.provisioningTimeoutSeconds,
        gpu.poolCooldownSeconds)."""
        return PlacementParams(
            provisioning_timeout_s=float(self.gpu.provisioning_timeout_seconds),
            cooldown_s=float(self.gpu.pool_cooldown_seconds),
        )

    def pools(self) -> tuple[Pool, ...]:
        """The stack's capacity pools in order of preference, defaults applied. Without
        `gpu.pools`, one pool from `gpu.capacityType` and `gpu.allowedInstanceTypes`, named
        by its capacity type, bounded by scaling's bounds: today's single-pool stack."""
        gpu, scaling = self.gpu, self.scaling
        if not gpu.pools:
            only = Pool(
                name=gpu.capacity_type,
                capacity_type=gpu.capacity_type,
                allowed_instance_types=gpu.allowed_instance_types,
                capacity_reservation_group_arn="",
                min_workers=scaling.min_workers,
                max_workers=scaling.max_workers,
            )
            return (only,)
        return tuple(
            Pool(
                name=pool.name,
                capacity_type=pool.capacity_type,
                allowed_instance_types=pool.allowed_instance_types
                or (default_spot_types(gpu) if pool.capacity_type == "spot" else ()),
                capacity_reservation_group_arn=pool.capacity_reservation_group_arn,
                min_workers=pool.min_workers or 0,
                max_workers=scaling.max_workers if pool.max_workers is None else pool.max_workers,
            )
            for pool in gpu.pools
        )

    @model_validator(mode="after")
    def _check_rules(self) -> StackConfig:
        problems = self.rule_problems()
        if problems:
            raise ConfigError([f"{NAMESPACE}:{key}: {message}" for key, message in problems])
        return self

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> StackConfig:
        """Validates `{section: value}`; raises ConfigError listing every problem."""
        problems: list[str] = []
        sections: dict[str, _Section] = {}
        for name, value in raw.items():
            model = SECTIONS.get(name)
            if model is None:
                problems.append(f"{NAMESPACE}:{name}: unknown key{_suggest_top(name)}")
                continue
            try:
                sections[name] = model.model_validate(value)
            except ValidationError as error:
                problems.extend(_format_errors(name, model, error))
        if problems:
            raise ConfigError(problems)
        return cls(**sections)


# Keys a stack file may still hold from an earlier release: what each is called now.
RENAMED: dict[tuple[str, ...], str] = {
    ("scaling", "controller"): (
        "renamed: it is now scaling.mode (`lambda` is now `controller`, `alarms` stays)"
    ),
}


def _key(section: str, loc: tuple[int | str, ...]) -> tuple[str, ...]:
    return (section, *map(str, loc))


def _format_errors(section: str, model: type[_Section], error: ValidationError) -> list[str]:
    lines: list[str] = []
    for item in error.errors():
        base = _key_path(section, item["loc"])
        if item["type"] == "config_rules":
            for field, message in item["ctx"]["problems"]:
                lines.append(f"{base}.{field}: {message}")
        elif item["type"] == "extra_forbidden" and _key(section, item["loc"]) in RENAMED:
            lines.append(f"{base}: {RENAMED[_key(section, item['loc'])]}")
        elif item["type"] == "extra_forbidden":
            leaf = str(item["loc"][-1])
            known = _known_fields(model, item["loc"][:-1])
            lines.append(f"{base}: unknown key{_suggest(leaf, known)}")
        else:
            lines.append(f"{base}: {_friendly(item)}")
    return lines


def _key_path(section: str, loc: tuple[Any, ...]) -> str:
    path = f"{NAMESPACE}:{section}"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        annotation = getattr(field, "annotation", None)
        inner = getattr(annotation, "__args__", (annotation,))
        current = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if current is None:
            return []
    return [f.alias or n for n, f in current.model_fields.items()]


def _suggest_top(name: str) -> str:
    """A field given without its section (`maxWorkers`) is pointed at `scaling.maxWorkers`;
    anything else gets the closest section name."""
    owners = [
        f"{section}.{field.alias or key}"
        for section, model in SECTIONS.items()
        for key, field in model.model_fields.items()
        if name in (key, field.alias)
    ]
    if owners:
        return f"; it belongs to a section: did you mean {' or '.join(map(repr, owners))}?"
    return _suggest(name, SECTIONS)


def _suggest(name: str, known: Mapping[str, Any] | list[str]) -> str:
    choices = list(known)
    close = difflib.get_close_matches(name, choices, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f" (known: {', '.join(choices)}){hint}"


def _friendly(item: Any) -> str:
    ctx = item.get("ctx") or {}
    value = item.get("input")
    kind = item["type"]
    if kind == "greater_than_equal":
        return f"must be >= {ctx['ge']} (got {value!r})"
    if kind == "less_than_equal":
        return f"must be <= {ctx['le']} (got {value!r})"
    if kind == "greater_than":
        return f"must be > {ctx['gt']} (got {value!r})"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']} (got {value!r})"
    if kind == "missing":
        return "is required"
    plain = _PLAIN_WORDS.get(kind)
    if plain is not None:
        return f"{plain} (got {value!r})"
    message = str(item["msg"]).removeprefix("Value error, ")
    return f"{message} (got {value!r})"


# pydantic's wording for a wrong type, in the words of a stack file's author.
_PLAIN_WORDS = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "model_type": "must be a mapping of keys to values",
    "model_attributes_type": "must be a mapping of keys to values",
    "dict_type": "must be a mapping of keys to values",
}
