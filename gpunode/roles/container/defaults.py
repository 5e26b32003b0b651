"""container role defaults: the settings of one GPU container, read from its host data
``gpunode_container`` (a mapping; every key optional).

| field           | default                               | why                                   |
|-----------------|---------------------------------------|---------------------------------------|
| nvidia_driver   | None: the host's module version       | the libraries must equal the module   |
|                 | (/proc/driver/nvidia/version, or the  | exactly, else "NVML: Driver/library   |
|                 | spec's nvidia_driver on the host)     | version mismatch"                     |
| nvidia_packages | nvidia-smi, libnvidia-ml1, libcuda1,  | what inference needs: CUDA driver     |
|                 | libnvidia-ptxjitcompiler1             | API, NVML, PTX JIT, the CLI; no       |
|                 |                                       | kernel module, no X/GL/Vulkan stack   |
| gpus            | None: the /dev/nvidiaN nodes passed   | nvidia-smi must list every GPU passed |
|                 | in (or len(gpus) of the host's spec)  |                                       |

The package names are Debian's (bookworm non-free) and NVIDIA's CUDA repository for Debian,
which uses the same names and keeps every driver version.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpunode.roles.profile.container import checked_driver_version, checked_package_names

__all__ = ["CONTAINER_DATA_KEY", "DEFAULTS", "DEFAULT_PACKAGES", "ContainerSettings"]

CONTAINER_DATA_KEY = "gpunode_container"
DEFAULT_PACKAGES = ["nvidia-smi", "libnvidia-ml1", "libcuda1", "libnvidia-ptxjitcompiler1"]


class ContainerSettings(BaseModel):
    """What the container role needs to know about one container."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvidia_driver: str | None = Field(
        default=None,
        description="The host's NVIDIA driver version, e.g. '550.127.05'; None reads it from "
        "the host's module (visible in the container as /proc/driver/nvidia/version).",
    )
    nvidia_packages: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PACKAGES),
        min_length=1,
        max_length=64,
        description="Userspace packages installed at exactly that version, without "
        "recommends (libcuda1 recommends the DKMS kernel module).",
    )
    gpus: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="How many GPUs nvidia-smi must list; None: as many as /dev/nvidiaN "
        "nodes in the container.",
    )

    @field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        return checked_driver_version(value)

    @field_validator("nvidia_packages")
    @classmethod
    def _packages(cls, value: list[str]) -> list[str]:
        return checked_package_names(value)


DEFAULTS = ContainerSettings()
