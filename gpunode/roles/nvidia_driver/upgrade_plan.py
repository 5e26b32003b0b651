"""The driver upgrade, planned from the one read (pure: inputs in, plan out).

A change of `nvidia_driver` with `nvidia_driver_change: true` switches the host's driver
release packages and, in the same run, the user-space packages of each container named in
`nvidia_driver_containers`, all from OLD to NEW or none of them. The plan says, value by
value, what the run will do (the --dry output and the apply's script come from it):

- host packages old -> new (the apt version of the new release; apt must offer the old one
  too, or there is no way back: refused);
- the module for the running and the next kernel: shipped by a package, or built by DKMS
  (then the next kernel's headers must be there); the script checks the .ko for the next
  kernel after the install and before the holds are set again;
- each container's packages old -> new from the container's own apt;
- holds released and set again on the same names;
- the GPU processes: none, or drained (`nvidia_driver_drain: stop-containers`: the
  containers holding /dev/nvidia* stopped in reverse start order, started again after), else
  refused;
- the loaded module: reloaded when no process holds it, else a reboot (done only where
  `reboot: true`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpunode.facts.boot_modules import BootModules
from gpunode.facts.dpkg import upstream_version
from gpunode.facts.driver_upgrade import DriverUpgradeState
from gpunode.roles.nvidia_driver.packages import driver_release_packages

__all__ = ["ContainerSwitch", "ModuleCheck", "PackageSwitch", "UpgradePlan", "plan_upgrade",
           "new_version_of"]

ModuleAction = Literal["reload", "reboot", "pending reboot", "none"]
DKMS_PACKAGES = ("nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-dkms-", "nvidia-open",
                 "cuda-drivers")
"""Names whose module is built by DKMS on the node (Debian's *-kernel-dkms; the CUDA
repository's nvidia-open / cuda-drivers pull nvidia-kernel-open-dkms / nvidia-kernel-dkms)."""


class PackageSwitch(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    old: str
    new: str | None
    """None: apt offers no version of the new release for it."""


class ContainerSwitch(BaseModel):
    model_config = ConfigDict(frozen=True)

    vmid: int
    status: str
    packages: list[PackageSwitch]
    holds_gpu: bool = False


class ModuleCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    kernel: str
    role: str
    """"running" or "next" (both when they are one kernel)."""
    source: Literal["shipped", "dkms"]
    ready: bool
    why: str = ""


class UpgradePlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    old: str
    new: str
    packages: list[PackageSwitch]
    modules: list[ModuleCheck]
    containers: list[ContainerSwitch]
    stop: list[int]
    """Containers to stop before the switch (reverse start order), started again after."""
    host_holders: list[str]
    module_action: ModuleAction
    refusals: list[str]

    @property
    def changes(self) -> bool:
        return any(p.old != p.new for p in self.packages) or any(
            p.old != p.new for c in self.containers for p in c.packages)

    def lines(self) -> list[str]:
        """The plan as --dry prints it, one value a line."""
        out = [f"driver {self.old} -> {self.new}"]
        out += [f"host {p.name} {p.old} -> {p.new}" for p in self.packages]
        out += [f"module for {m.role} kernel {m.kernel}: {m.source}"
                + ("" if m.ready else f" (not ready: {m.why})") for m in self.modules]
        for c in self.containers:
            out += [f"container {c.vmid} {p.name} {p.old} -> {p.new}" for p in c.packages]
        names = sorted({p.name for p in self.packages})
        out.append(f"holds released then set: {' '.join(names)}")
        if self.stop:
            out.append("stop then start again: " + " ".join(str(v) for v in self.stop))
        out.append(f"loaded module: {self.module_action}")
        return out


def new_version_of(old: str, offered: list[str], new: str) -> str | None:
    """The offered version of the new upstream release for a package at `old`: the one with
    the same Debian revision suffix style when there are several (apt lists newest first)."""
    matches = [v for v in offered if upstream_version(v) == new]
    if not matches:
        return None
    same = [v for v in matches if _revision_style(v) == _revision_style(old)]
    return (same or matches)[0]


def _revision_style(version: str) -> str:
    """'1~deb12u1' -> '~debu', '1' -> '': the revision without its digits."""
    revision = version.rsplit("-", 1)[-1] if "-" in version else ""
    return "".join(ch for ch in revision if not ch.isdigit())


def _switches(installed: Mapping[str, str], offered: Mapping[str, list[str]], new: str
              ) -> list[PackageSwitch]:
    return [PackageSwitch(name=n, old=v, new=new_version_of(v, offered.get(n.split(":")[0],
                                                                       offered.get(n, [])), new))
            for n, v in sorted(driver_release_packages(installed).items())]


def _module_checks(packages: Mapping[str, str], running: str, next_kernel: str,
                   trees: BootModules | None) -> list[ModuleCheck]:
    dkms = any(n.startswith(DKMS_PACKAGES) for n in packages)
    source: Literal["shipped", "dkms"] = "dkms" if dkms else "shipped"
    kernels = [(running, "running")] if running == next_kernel else [
        (running, "running"), (next_kernel, "next")]
    if running == next_kernel:
        kernels = [(running, "running and next")]
    out = []
    for kernel, role in kernels:
        tree = (trees.kernels.get(kernel) if trees else None)
        ready, why = True, ""
        if dkms and not (tree and tree.build):
            ready, why = False, (f"no /lib/modules/{kernel}/build: install its headers "
                                 f"(linux-headers-{kernel} or proxmox-headers-{kernel})")
        out.append(ModuleCheck(kernel=kernel, role=role, source=source, ready=ready, why=why))
    return out


def _offered(versions: Mapping[str, list[str]], name: str) -> list[str]:
    return versions.get(name.split(":")[0], versions.get(name, []))


def _package_refusals(where: str, switches: list[PackageSwitch], versions: Mapping[str, list[str]],
                      new: str, update: str) -> list[str]:
    """No new version offered, or the old one no longer (no way back)."""
    out = [f"{where}: apt offers no {new} for {p.name}; fix: {update}"
           for p in switches if p.new is None]
    out += [f"{where}: apt does not offer {p.name} {p.old} (no way back); fix: keep a source "
            "that carries it (e.g. snapshot.debian.org)"
            for p in switches if p.old not in _offered(versions, p.name)]
    return out


def _container_switches(host: str, new: str, state: DriverUpgradeState, containers: list[int],
                        holder_cts: set[int]) -> tuple[list[ContainerSwitch], list[str]]:
    switches, refusals = [], []
    for vmid in containers:
        ct = state.containers.get(vmid)
        if ct is None or ct.status != "running" or not ct.read:
            status = ct.status if ct and ct.status else "not found"
            refusals.append(f"{host}: container {vmid} is {status}: its libraries can't be read "
                            f"or switched; fix: pct start {vmid}, or leave it out of "
                            "nvidia_driver_containers")
            continue
        switch = _switches(ct.packages, ct.versions, new)
        refusals += _package_refusals(f"{host}: container {vmid}", switch, ct.versions, new,
                                      f"pct exec {vmid} -- apt-get update, or add the repository")
        switches.append(ContainerSwitch(vmid=vmid, status=ct.status, packages=switch,
                                        holds_gpu=vmid in holder_cts))
    return switches, refusals


def _drain(host: str, state: DriverUpgradeState, containers: list[int], drain: str
           ) -> tuple[list[int], list[str], list[str]]:
    """(containers to stop, host holders, refusals) for the GPU processes."""
    holder_cts = {h.container for h in state.holders if h.container is not None}
    host_holders = [f"{h.pid} ({h.command})" for h in state.holders if h.container is None]
    if not state.holders:
        return [], host_holders, []
    if drain != "stop-containers":
        who = ", ".join([*host_holders, *(f"container {v}" for v in sorted(holder_cts))])
        return [], host_holders, [f"{host}: GPU processes run ({who}); fix: stop them, or set "
                                  "nvidia_driver_drain: stop-containers"]
    refusals = []
    others = sorted(holder_cts - set(containers))
    if others:
        refusals.append(f"{host}: containers {' '.join(map(str, others))} hold GPU devices "
                        "and do not follow the driver; fix: add them to "
                        "nvidia_driver_containers or stop them")
    if host_holders:
        refusals.append(f"{host}: host processes hold /dev/nvidia*: {', '.join(host_holders)}"
                        "; fix: stop them (only containers are drained)")
    return [v for v in reversed(containers) if v in holder_cts], host_holders, refusals


def plan_upgrade(*, host: str, new: str, installed: Mapping[str, str], state: DriverUpgradeState,
                 containers: list[int], drain: str, reboot: bool, loaded: str | None,
                 running_kernel: str, next_kernel: str | None,
                 trees: BootModules | None) -> UpgradePlan:
    """The upgrade of the host's driver release packages to `new` and the containers' with it.
    `containers` in start order; `drain` is nvidia_driver_drain."""
    packages = _switches(installed, state.versions, new)
    olds = sorted({upstream_version(p.old) for p in packages})
    old = ",".join(olds)
    refusals = [] if len(olds) <= 1 else [
        f"{host}: the driver packages are at several releases ({old}); fix: install one "
        "release by hand first (apt-get install PKG=VER ...)"]
    refusals += _package_refusals(host, packages, state.versions, new,
                                  "apt-get update, or add the repository that carries it "
                                  "(nvidia_repository)")
    modules = _module_checks(installed, running_kernel, next_kernel or running_kernel, trees)
    refusals += [f"{host}: module for kernel {m.kernel}: {m.why}" for m in modules if not m.ready]
    holder_cts = {h.container for h in state.holders if h.container is not None}
    switches, ct_refusals = _container_switches(host, new, state, containers, holder_cts)
    stop, host_holders, drain_refusals = _drain(host, state, containers, drain)
    action: ModuleAction = "none"
    if loaded is not None and loaded != new:
        drained = not host_holders and (not holder_cts or drain == "stop-containers")
        action = "reload" if drained else ("reboot" if reboot else "pending reboot")
    return UpgradePlan(host=host, old=old, new=new, packages=packages, modules=modules,
                       containers=switches, stop=stop, host_holders=host_holders,
                       module_action=action, refusals=[*refusals, *ct_refusals, *drain_refusals])
