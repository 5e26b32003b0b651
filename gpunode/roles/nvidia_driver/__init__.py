"""nvidia_driver: keep the NVIDIA driver at the profile's exact version.

Changes: an apt preferences pin (/etc/apt/preferences.d/90-gpunode-nvidia.pref) and apt holds
of the installed NVIDIA packages, when the installed driver is the pinned one. A different
installed (or loaded) version is reported and changed only when nvidia_driver_change is true:
then the pin selects the version and apt installs it; the new module is live after a reboot.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server

from gpunode.roles.facts.apt import AptHolds
from gpunode.roles.facts.bundle import FactRead
from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.facts.dpkg import InstalledPackages, upstream_version
from gpunode.roles.facts.nvidia import NvidiaDriverVersion
from gpunode.roles.facts.owned import OwnedFiles
from gpunode.roles.facts.sections import fact_data
from gpunode.roles.ops.apt import apt_hold
from gpunode.roles.ops.nvidia_pin import NVIDIA_PATTERNS, PREFERENCES_FILE, nvidia_pin
from gpunode.roles.profile.node import NodeProfile


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
    def loaded_differs(self) -> bool:
        return self.loaded is not None and self.loaded != self.wanted

    def mismatch(self) -> str | None:
        if self.matches and not self.loaded_differs:
            return None
        installed = ", ".join(sorted(self.installed_versions)) or "none"
        return (f"NVIDIA driver {self.wanted} wanted; installed: {installed}; "
                f"loaded: {self.loaded or 'none'}")


def driver_plan(wanted: str) -> DriverPlan:
    installed = cached_fact(InstalledPackages, patterns=NVIDIA_PATTERNS)
    return DriverPlan(wanted=wanted, installed=dict(fact_data(installed)),
                      loaded=cached_fact(NvidiaDriverVersion))


def nvidia_driver_reads(profile: NodeProfile) -> list[FactRead]:
    """Every fact nvidia_driver reads (for prefetch); none without a driver pin."""
    if profile.nvidia_driver is None:
        return []
    return [FactRead(InstalledPackages, {"patterns": NVIDIA_PATTERNS}),
            FactRead(NvidiaDriverVersion), FactRead(OwnedFiles, {"paths": [PREFERENCES_FILE]}),
            FactRead(AptHolds)]


@deploy("gpunode: NVIDIA driver pin")
def nvidia_driver(profile: NodeProfile) -> None:
    """Pin and hold the driver; install the pinned version only when allowed."""
    if profile.nvidia_driver is None:
        return
    plan = driver_plan(profile.nvidia_driver)
    mismatch = plan.mismatch()
    if plan.matches:
        nvidia_pin(plan.wanted)
        apt_hold(name=f"Hold NVIDIA driver {plan.wanted} packages",
                 packages=sorted(plan.installed))
    elif profile.nvidia_driver_change:
        packages = sorted(plan.installed) or profile.nvidia_packages
        nvidia_pin(plan.wanted)
        apt_hold(name="Release NVIDIA holds for the change", packages=packages, held=False)
        server.shell(
            name=f"Install NVIDIA driver {plan.wanted}",
            commands=["apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                      "--allow-downgrades " + " ".join(packages)],
        )
        apt_hold(name=f"Hold NVIDIA driver {plan.wanted} packages", packages=packages)
    if mismatch:
        action = "changing it" if profile.nvidia_driver_change else (
            "set nvidia_driver_change: true to install it")
        logger.warning(f"{host.name}: {mismatch}; {action}")
