r"""container role defaults: the settings of one GPU container, read from its host data
``gpunode_container`` (a mapping; every key optional). Each is documented once, in the schema
below (ContainerSettings); the list is generated from it (make docs). The package names are
Debian's (non-free) and NVIDIA's CUDA repository for Debian, which uses the same names and
keeps every driver version.

<!-- gpunode:generated role:container -->
- nvidia_driver (default `null`): The host's NVIDIA driver version, e.g. '550.127.05'; None
  reads it from the host's module (visible in the container as /proc/driver/nvidia/version).
  Why: the libraries must equal the module exactly, else "NVML: Driver/library version
  mismatch".
- nvidia_packages (default `[nvidia-smi, libnvidia-ml1, libcuda1, libnvidia-ptxjitcompiler1]`):
  Userspace packages installed at exactly that version, without recommends (libcuda1 recommends
  the DKMS kernel module). Why: what inference needs: CUDA driver API, NVML, PTX JIT, the CLI;
  no kernel module, no X/GL/Vulkan stack. Now: apt pin to the host's version, `apt-get install
  --no-install-recommends PKG=VERSION-*`, apt hold.
- gpus (default `null`): How many GPUs nvidia-smi must list; None: as many as /dev/nvidiaN nodes
  in the container. Read back: `nvidia-smi -L` must list that many GPUs.
<!-- /gpunode:generated -->
"""

from __future__ import annotations

from pydantic import Field, field_validator

from gpunode.profile.allowed import UserValues
from gpunode.profile.container import checked_driver_version, checked_package_names
from gpunode.profile.docs import setting_doc

__all__ = ["CONTAINER_DATA_KEY", "DEFAULTS", "DEFAULT_PACKAGES", "READS", "SCHEMA",
           "ContainerSettings"]

CONTAINER_DATA_KEY = "gpunode_container"
DEFAULT_PACKAGES = ["nvidia-smi", "libnvidia-ml1", "libcuda1", "libnvidia-ptxjitcompiler1"]


class ContainerSettings(UserValues):
    """What the container role needs to know about one container (UserValues: one-line text,
    unknown keys refused)."""

    nvidia_driver: str | None = Field(
        default=None,
        description="The host's NVIDIA driver version, e.g. '550.127.05'; None reads it from "
        "the host's module (visible in the container as /proc/driver/nvidia/version).",
        json_schema_extra=setting_doc(
            why="the libraries must equal the module exactly, else \"NVML: Driver/library version "
                "mismatch\"",
        ),
    )
    nvidia_packages: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PACKAGES),
        min_length=1,
        max_length=64,
        description="Userspace packages installed at exactly that version, without "
        "recommends (libcuda1 recommends the DKMS kernel module).",
        json_schema_extra=setting_doc(
            why="what inference needs: CUDA driver API, NVML, PTX JIT, the CLI; no kernel module, "
                "no X/GL/Vulkan stack",
            runtime="apt pin to the host's version, `apt-get install --no-install-recommends "
                    "PKG=VERSION-*`, apt hold",
        ),
    )
    gpus: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="How many GPUs nvidia-smi must list; None: as many as /dev/nvidiaN "
        "nodes in the container.",
        json_schema_extra=setting_doc(
            readback="`nvidia-smi -L` must list that many GPUs",
        ),
    )

    @field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        return checked_driver_version(value)

    @field_validator("nvidia_packages")
    @classmethod
    def _packages(cls, value: list[str]) -> list[str]:
        return checked_package_names(value)


SCHEMA = ContainerSettings
READS = tuple(ContainerSettings.model_fields)
DEFAULTS = ContainerSettings()
