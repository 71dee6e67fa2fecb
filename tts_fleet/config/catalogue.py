"""The catalogue of NVIDIA GPU instance types tts-fleet knows the shape of: what the cost
tables price (tts_fleet/cost/data/prices.json holds prices only) and what a Spot pool's default
type list (`gpu.pools`) is drawn from.

Nothing here imports the config models (they import this module for a Spot pool's default
types); `gpu.*` is read through the `GpuRequirements` protocol `GpuConfig` meets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

MIB_PER_GIB = 1024


class Bounds(Protocol):
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


class GpuRequirements(Protocol):
    """What `gpu.*` asks of a host (tts_fleet/config/models.py::GpuConfig)."""

    @property
    def gpu_count(self) -> int: ...
    @property
    def min_gpu_memory_gib(self) -> int: ...
    @property
    def vcpu(self) -> Bounds: ...
    @property
    def memory_gib(self) -> Bounds: ...


@dataclass(frozen=True)
class InstanceType:
    """One EC2 GPU instance type's shape, as EC2's DescribeInstanceTypes reports it."""

    name: str
    gpu: str  # the accelerator's name
    gpus: int
    gpu_memory_mib: int  # total across the host's GPUs
    vcpu: int
    memory_gib: int

    def fits(self, gpu: GpuRequirements) -> bool:
        """Whether `gpu.*`'s attribute filter admits this type (allowed types aside)."""
        return (
            self.gpus == gpu.gpu_count
            and self.gpu_memory_mib >= gpu.min_gpu_memory_gib * MIB_PER_GIB
            and gpu.vcpu.min <= self.vcpu <= gpu.vcpu.max
            and gpu.memory_gib.min <= self.memory_gib <= gpu.memory_gib.max
        )


def _types(gpu: str, gpus: int, memory_mib: int, sizes: str) -> tuple[InstanceType, ...]:
    """`sizes`: "name vcpu memory_gib, ..." of one family with the same GPU."""
    rows = (entry.split() for entry in sizes.split(","))
    return tuple(InstanceType(n, gpu, gpus, memory_mib, int(v), int(m)) for n, v, m in rows)


# NVIDIA GPU instance types in us-east-1, each family in the order of its smallest size's
# On-Demand Linux price (cheapest first), sizes smallest first. Shapes from the EC2 accelerated
# computing page (https://aws.amazon.com/ec2/instance-types/#Accelerated_Computing) as the
# SkyPilot AWS catalogue records them (skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv),
# GPU memory as DescribeInstanceTypes reports it (MiB); as of 2026-12-01.
CATALOGUE: tuple[InstanceType, ...] = (
    *_types("T4", 1, 15_360, "g4dn.xlarge 4 16, g4dn.2xlarge 8 32, g4dn.4xlarge 16 64"),
    *_types(
        "L4", 1, 22_888,
        "g6.xlarge 4 16, g6.2xlarge 8 32, g6.4xlarge 16 64, g6.8xlarge 32 128,"
        " g6.16xlarge 64 256",
    ),
    *_types(
        "A10G", 1, 22_888,
        "g5.xlarge 4 16, g5.2xlarge 8 32, g5.4xlarge 16 64, g5.8xlarge 32 128,"
        " g5.16xlarge 64 256",
    ),
    *_types("L4", 1, 22_888, "gr6.4xlarge 16 128, gr6.8xlarge 32 256"),
    *_types(
        "L40S", 1, 45_776,
        "g6e.xlarge 4 32, g6e.2xlarge 8 64, g6e.4xlarge 16 128, g6e.8xlarge 32 256,"
        " g6e.16xlarge 64 512",
    ),
    *_types("RTX PRO 6000", 1, 98_304, "g7e.2xlarge 8 64, g7e.4xlarge 16 128"),
    *_types("H100", 1, 81_920, "p5.4xlarge 16 256"),
    *_types("L4", 4, 91_552, "g6.12xlarge 48 192"),
    *_types("A10G", 4, 91_552, "g5.12xlarge 48 192"),
)  # fmt: skip
BY_NAME = {t.name: t for t in CATALOGUE}

# A Spot pool without its own allowedInstanceTypes asks for this many types, one per GPU model:
# a request spread over several Spot pools is interrupted less and placed sooner (a set of g6,
# g5 and g6e scored 9/10 in GetSpotPlacementScores where g6.xlarge alone scored 1/10:
# the public repo k-k1/agent-fleet, its ADR 0075 "engine purchase offers"; RunPod takes up to 3).
DEFAULT_SPOT_TYPES = 3


def default_spot_types(gpu: GpuRequirements) -> tuple[str, ...]:
    """A Spot pool's default types: the smallest admitted size of each of the cheapest
    families, one family per GPU model (a different GPU is a different Spot capacity pool
    more surely than another size of the same one), at most DEFAULT_SPOT_TYPES."""
    chosen: dict[str, str] = {}  # GPU model -> type
    for entry in CATALOGUE:
        if entry.gpu not in chosen and entry.fits(gpu):
            chosen[entry.gpu] = entry.name
    return tuple(chosen.values())[:DEFAULT_SPOT_TYPES]
