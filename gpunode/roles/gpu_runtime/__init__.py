"""gpu_runtime: the driver's runtime state a serving node needs, each with its persistence.

Changes (only where an NVIDIA driver is present; elsewhere "not applicable"):
- gpu_persistence: nvidia-persistenced installed, enabled and running, then persistence mode
  Enabled on every GPU (nvidia-smi -pm 1), read back; the boot unit runs after
  nvidia-persistenced and sets it again;
- gpu_power_limit: nvidia-smi -pl per GPU where the limit differs, read back; the boot unit
  re-applies it after nvidia-persistenced (limits reset at every driver load). A value outside
  a GPU's min..max stops the run before any change (`gpu_runtime_problems`).
- gpunode-nvidia-nodes.service: the device nodes before containers start, and
  nvidia_module_options in /etc/modprobe.d/gpunode-nvidia.conf (gpu_runtime/driver_boot.py).
Why each: gpunode/profile/node.py (the field descriptions).
"""

from __future__ import annotations

from pyinfra import host, logger

from gpunode.facts.snapshot import Needs, node
from gpunode.ops import nvidia
from gpunode.ops.apt import packages_present
from gpunode.ops.changes import log_wrapped
from gpunode.ops.services import unit_enabled_and_running
from gpunode.profile.loader import ProfileError
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import deploy
from gpunode.roles.gpu_runtime.driver_boot import (
    device_nodes_at_boot,
    driver_boot_needs,
    module_options,
)

PERSISTENCED_PACKAGE = "nvidia-persistenced"
PERSISTENCED_UNIT = "nvidia-persistenced.service"


def driver_present() -> bool:
    """An NVIDIA driver is loaded or nvidia-smi answers."""
    return nvidia.smi_report().present or node().driver_loaded is not None


def needs(profile: NodeProfile) -> Needs:
    """What gpu_runtime reads of the node."""
    boot = driver_boot_needs(profile)
    if not profile.gpu_persistence:
        return Needs(nvidia=True) | boot
    return Needs(nvidia=True, packages=(PERSISTENCED_PACKAGE,), units=(PERSISTENCED_UNIT,)) | boot


def gpu_runtime_problems(host_name: str, profile: NodeProfile) -> None:
    """Refuse, before any change, a power limit outside a GPU's range (ProfileError naming
    the host, GPU, value and range)."""
    if profile.gpu_power_limit is None:
        return
    report = nvidia.smi_report()
    if not report.present:
        return
    _, problems = nvidia.power_limit_targets(profile.gpu_power_limit, report.gpus)
    if problems:
        raise ProfileError("\n".join(f"{host_name}: gpunode.{p}" for p in problems))


@deploy("gpunode: GPU runtime")
def gpu_runtime(profile: NodeProfile) -> None:
    """Device nodes at boot, module options, persistence and power limits; see the module
    docstring."""
    module_options(profile)
    if not driver_present():
        log_wrapped(logger.info, f"{host.name}: GPU device nodes, persistence, power limits: "
                    "not applicable (no NVIDIA driver loaded, no nvidia-smi)")
        return
    device_nodes_at_boot()
    if profile.gpu_persistence:
        packages_present(name="Install nvidia-persistenced", packages=[PERSISTENCED_PACKAGE])
        unit_enabled_and_running(name=f"Enable {PERSISTENCED_UNIT}", unit=PERSISTENCED_UNIT)
        nvidia.persistence_mode(name="Persistence mode Enabled on every GPU")
    if profile.gpu_power_limit is not None:
        nvidia.power_limits(name=f"GPU power limits {profile.gpu_power_limit}",
                            setting=profile.gpu_power_limit)
