"""`tts-fleet:gpu` as instance requirements: the one source for the capacity provider
(components/capacity.py) and the preflight (tts_fleet/deploy/preflight.py).

Two spellings of the same attributes: the Terraform/pulumi-aws argument names the capacity
provider takes, and the EC2 API names `GetInstanceTypesFromInstanceRequirements` takes. The
second is derived from the first by a fixed name table, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from tts_fleet.config.models import GpuConfig

MIB_PER_GIB = 1024  # GiB in the config, MiB in both APIs

# pulumi-aws `instance_requirements` argument -> EC2 InstanceRequirementsRequest member.
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceRequirementsRequest.html
EC2_NAMES = {
    "accelerator_types": "AcceleratorTypes",
    "accelerator_manufacturers": "AcceleratorManufacturers",
    "accelerator_count": "AcceleratorCount",
    "accelerator_total_memory_mib": "AcceleratorTotalMemoryMiB",
    "vcpu_count": "VCpuCount",
    "memory_mib": "MemoryMiB",
    "allowed_instance_types": "AllowedInstanceTypes",
    "local_storage": "LocalStorage",
    "local_storage_types": "LocalStorageTypes",
    "total_local_storage_gb": "TotalLocalStorageGB",
}
EC2_BOUNDS = {"min": "Min", "max": "Max"}


def instance_requirements(gpu: GpuConfig) -> dict[str, Any]:
    """Attribute-based instance selection (exact GPU count, >= GPU memory), in the capacity
    provider's argument names."""
    requirements: dict[str, Any] = {
        "accelerator_types": ["gpu"],
        "accelerator_manufacturers": ["nvidia"],
        "accelerator_count": {"min": gpu.gpu_count, "max": gpu.gpu_count},
        "accelerator_total_memory_mib": {"min": gpu.min_gpu_memory_gib * MIB_PER_GIB},
        "vcpu_count": {"min": gpu.vcpu.min, "max": gpu.vcpu.max},
        "memory_mib": {
            "min": gpu.memory_gib.min * MIB_PER_GIB,
            "max": gpu.memory_gib.max * MIB_PER_GIB,
        },
    }
    if gpu.allowed_instance_types:
        requirements["allowed_instance_types"] = list(gpu.allowed_instance_types)
    if gpu.local_storage:
        # `useLocalStorage` puts the data volume on instance store "when available": only
        # types with NVMe SSD instance storage of at least storageGib keep it off EBS.
        requirements["local_storage"] = "required"
        requirements["local_storage_types"] = ["ssd"]
        requirements["total_local_storage_gb"] = {"min": gpu.storage_gib}
    return requirements


def ec2_instance_requirements(gpu: GpuConfig) -> dict[str, Any]:
    """The same requirements in EC2's API names (an unknown name is a KeyError, not a skip)."""
    return {
        EC2_NAMES[key]: (
            {EC2_BOUNDS[bound]: n for bound, n in value.items()}
            if isinstance(value, dict)
            else value
        )
        for key, value in instance_requirements(gpu).items()
    }
