"""nvidia_driver: keep the NVIDIA driver at the profile's exact version and module flavour.

Changes: an apt preferences pin (/etc/apt/preferences.d/90-gpunode-nvidia.pref) and apt holds
of the installed NVIDIA packages, when the installed driver is the pinned one. A different
installed (or loaded) version is reported and changed only when nvidia_driver_change is true:
then the pin selects the version and the upgrade (upgrade.py, docs/upgrade.md) switches host
and the nvidia_driver_containers together, or puts both back.

Flavour (nvidia_kernel_modules): the loaded and installed module's flavour (open or
proprietary) is compared with the one the GPUs want (gpunode.facts.nvidia_modules); a
mismatch is reported, and only with nvidia_driver_change the flavour's packages are installed
(Debian or CUDA repository names, nvidia_repository), live after a reboot.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger
from pyinfra.operations import server

from gpunode.facts.dpkg import upstream_version
from gpunode.facts.nvidia import NvidiaSmiReport
from gpunode.facts.nvidia_modules import (
    Flavour,
    NvidiaModuleState,
    flavour_of_packages,
    flavour_packages,
    gpu_architectures,
    wanted_flavour,
)
from gpunode.facts.snapshot import Needs, node
from gpunode.ops.apt import apt_hold, apt_update
from gpunode.ops.changes import log_wrapped, report_change
from gpunode.ops.nvidia_pin import NVIDIA_PATTERNS, PREFERENCES_FILE, nvidia_pin
from gpunode.ops.shell import argv_text
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import deploy
from gpunode.roles.nvidia_driver.packages import driver_release_packages
from gpunode.roles.nvidia_driver.upgrade import current_plan, driver_upgrade, upgrade_needs


class DriverPlan(BaseModel):
    """Installed vs loaded vs wanted driver, and what to do."""

    model_config = ConfigDict(frozen=True)

    wanted: str
    installed: dict[str, str]
    loaded: str | None

    @property
    def installed_versions(self) -> set[str]:
        return {upstream_version(v) for v in self.installed.values()}

    @property
    def matches(self) -> bool:
        return bool(self.installed) and self.installed_versions == {self.wanted}

    @property
    def none_installed(self) -> bool:
        return not self.installed

    @property
    def loaded_differs(self) -> bool:
        return self.loaded is not None and self.loaded != self.wanted

    def mismatch(self) -> str | None:
        if self.matches and not self.loaded_differs:
            return None
        if self.none_installed:
            return (f"NVIDIA driver {self.wanted} wanted; no NVIDIA driver package is "
                    f"installed (none of nvidia-driver, cuda-drivers, libcuda1, "
                    f"libnvidia-*); loaded: {self.loaded or 'none'}")
        installed = ", ".join(sorted(self.installed_versions))
        return (f"NVIDIA driver {self.wanted} wanted; installed: {installed}; "
                f"loaded: {self.loaded or 'none'}")


def driver_plan(wanted: str) -> DriverPlan:
    """The driver release's packages only: the container and CUDA toolkits, Debian's helper
    packages and other NVIDIA tools have versions of their own (see packages.py)."""
    return DriverPlan(wanted=wanted, installed=driver_release_packages(node().packages),
                      loaded=node().driver_loaded)


def node_flavour_plan(profile: NodeProfile) -> tuple[Flavour | None, str, Flavour | None]:
    """(wanted flavour, why, flavour on the node: loaded, else installed module, else
    packages) from the live facts."""
    snapshot = node()
    smi = snapshot.nvidia or NvidiaSmiReport(present=False)
    devices = snapshot.pcie
    archs = gpu_architectures([g.architecture for g in smi.gpus] if smi.present else [],
                              [d.name for d in devices if d.vendor_id == "10de"
                               and d.class_id.startswith("03")])
    wanted, why = wanted_flavour(profile.nvidia_kernel_modules, archs)
    module = snapshot.nvidia_module or NvidiaModuleState()
    installed = dict(snapshot.packages)
    have = module.loaded_flavour or module.installed_flavour or flavour_of_packages(installed)
    return wanted, why, have


def packages_to_install(profile: NodeProfile, wanted: Flavour | None) -> list[str]:
    """The profile's nvidia_packages, else the flavour's packages for its repository."""
    if profile.nvidia_packages:
        return list(profile.nvidia_packages)
    fallback: Flavour = "proprietary" if profile.nvidia_kernel_modules == "proprietary" else "open"
    return flavour_packages(wanted or fallback, profile.nvidia_repository)


def needs(profile: NodeProfile) -> Needs:
    """What nvidia_driver reads: the NVIDIA packages, module and GPUs; with a pin, its
    preferences file and the holds too."""
    base = Needs(packages=tuple(NVIDIA_PATTERNS), nvidia=True, nvidia_module=True)
    if profile.nvidia_driver is None:
        return base
    pinned = base | Needs(files=(PREFERENCES_FILE,), holds=True)
    return pinned | upgrade_needs(profile) if profile.nvidia_driver_change else pinned


@deploy("gpunode: driver")
def nvidia_driver(profile: NodeProfile) -> None:
    """Pin and hold the driver, check its module flavour; install only when allowed."""
    wanted, why, have = node_flavour_plan(profile)
    if have is not None and wanted is not None and have != wanted:
        packages = packages_to_install(profile, wanted)
        if profile.nvidia_driver_change:
            version = f"={profile.nvidia_driver}-*" if profile.nvidia_driver else ""
            apt_hold(name="Release NVIDIA holds for the flavour change",
                     packages=sorted(set(packages)), held=False)
            apt_update(name="apt-get update")
            report_change("NVIDIA kernel modules", have, wanted, where=f"apt: {' '.join(packages)}")
            server.shell(
                name=f"Install the {wanted} NVIDIA kernel modules",
                commands=["DEBIAN_FRONTEND=noninteractive "
                          + argv_text("apt-get", "install", "-y",
                                      *(f"{p}{version}" for p in packages))],
            )
        else:
            log_wrapped(logger.warning, f"{host.name}: NVIDIA kernel modules are {have}, "
                        f"{wanted} wanted ({why}); set nvidia_driver_change: true to install "
                        f"{' '.join(packages)}")
    elif wanted is None and have is not None:
        log_wrapped(logger.warning, f"{host.name}: NVIDIA kernel modules: {why}")
    if profile.nvidia_driver is None:
        return
    plan = driver_plan(profile.nvidia_driver)
    mismatch = plan.mismatch()
    if plan.matches:
        nvidia_pin(plan.wanted)
        apt_hold(name=f"Hold NVIDIA driver {plan.wanted} packages",
                 packages=sorted(plan.installed))
    elif profile.nvidia_driver_change and not plan.none_installed:
        driver_upgrade(profile, current_plan(profile))
        return
    elif profile.nvidia_driver_change:
        packages = packages_to_install(profile, wanted)
        nvidia_pin(plan.wanted)
        apt_hold(name="Release NVIDIA holds for the change", packages=packages, held=False)
        apt_update(name="apt-get update")
        server.shell(
            name=f"Install NVIDIA driver {plan.wanted}",
            commands=["DEBIAN_FRONTEND=noninteractive "
                      + argv_text("apt-get", "install", "-y", "--allow-downgrades", *packages)],
        )
        apt_hold(name=f"Hold NVIDIA driver {plan.wanted} packages", packages=packages)
    if mismatch:
        log_wrapped(logger.warning,
                    f"{host.name}: {mismatch}; {mismatch_action(profile, plan, wanted)}")


def mismatch_action(profile: NodeProfile, plan: DriverPlan, wanted: Flavour | None) -> str:
    """What this run does about a driver that is not the pinned one, or what to set."""
    packages = " ".join(packages_to_install(profile, wanted))
    if profile.nvidia_driver_change:
        return f"installing {packages} at {plan.wanted}" if plan.none_installed else "changing it"
    if plan.none_installed:
        return (f"set nvidia_driver_change: true to let gpunode install {packages} at "
                f"{plan.wanted} (nvidia_packages / nvidia_repository choose the packages), "
                "or install the driver yourself")
    return "set nvidia_driver_change: true to install it"
