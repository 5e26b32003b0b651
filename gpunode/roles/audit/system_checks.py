"""Host and container checks: NVIDIA driver, kernel version, Proxmox, GPU containers.

Pure functions of a NodeProfile and a NodeSnapshot. Hosts without Proxmox get one
"not present" line for the container checks; hosts without GPUs one for the driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpunode.facts.cmdline import grub_cmdline_value
from gpunode.facts.containers import ContainerState
from gpunode.facts.dpkg import upstream_version
from gpunode.facts.gpu_numa import parse_cpulist
from gpunode.facts.kernels import KernelPackages
from gpunode.facts.nvidia import NvidiaSmiReport
from gpunode.facts.pcie import PcieDevice
from gpunode.facts.proxmox import esp_problem_message
from gpunode.facts.shell_assign import ShellValueError
from gpunode.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.gpu_checks import NOT_READ
from gpunode.roles.audit.snapshot import NodeSnapshot

CONTAINER_MEMLOCK = "unlimited"
_GRUB_KERNEL_RE = re.compile(r"with Linux (\S+)\s*$")


# --- NVIDIA driver ---------------------------------------------------------------------------


def host_driver_version(snap: NodeSnapshot) -> str | None:
    """The driver containers must match: the loaded module, else nvidia-smi's version."""
    if snap.driver_loaded:
        return snap.driver_loaded
    if snap.nvidia is not None and snap.nvidia.present:
        return snap.nvidia.driver_version
    return None


_DRIVER = "NVIDIA driver"


@dataclass(frozen=True)
class _Driver:
    """What the snapshot says about the NVIDIA driver."""

    devices: tuple[PcieDevice, ...]
    smi: NvidiaSmiReport
    loaded: str | None
    installed: set[str]

    @property
    def library(self) -> str | None:
        return self.smi.driver_version if self.smi.present else None

    @property
    def live(self) -> str:
        both = " (module = user space)" if self.loaded and self.library else ""
        return f"{self.loaded or self.library or '?'}{both}"


def _driver_not_loaded(profile: NodeProfile, d: _Driver) -> Check | None:
    """GPUs present, no nvidia module: bound elsewhere, or the driver is missing."""
    if not d.devices or d.loaded:
        return None
    drivers = sorted({x.driver or "none" for x in d.devices})
    if drivers == ["vfio-pci"]:
        return not_applicable(_DRIVER, "GPUs bound to vfio-pci (passed to VMs)", kind=_DRIVER)
    live = f"no nvidia module loaded (GPU kernel driver: {', '.join(drivers)})"
    if d.installed:
        return Check(name=_DRIVER, status="P0", live=live, want="nvidia loaded", kind=_DRIVER,
                     fix="modprobe nvidia (blacklist nouveau if it holds the GPU, then "
                     "reboot)")
    pin = profile.nvidia_driver
    return Check(name=_DRIVER, status="P1", live=live, want=pin or "a driver", kind=_DRIVER,
                 fix="install the NVIDIA driver (gpunode.nvidia_driver + "
                 "nvidia_driver_change: true lets deploy/site.py do it), then reboot",
                 deploy_fixes=bool(pin and profile.nvidia_driver_change))


def _driver_mismatch(d: _Driver) -> Check | None:
    """NVML's "Driver/library version mismatch", or module and nvidia-smi disagreeing."""
    if not d.smi.present and d.smi.error and "mismatch" in d.smi.error.lower():
        return Check(
            name=_DRIVER, status="P1",
            live=f"{d.smi.error}; module {d.loaded or '?'} loaded"
            + (f", user space {', '.join(sorted(d.installed))} installed" if d.installed
               else ""),
            want="module = user space", kind=_DRIVER,
            fix="reboot to load the installed driver's module (or stop every GPU user and "
            "reload the nvidia modules)", pending="reboot",
        )
    if d.loaded and d.library and d.loaded != d.library:
        return Check(name=_DRIVER, status="P1", live=f"module {d.loaded}, nvidia-smi "
                     f"{d.library}", want="module = user space", kind=_DRIVER,
                     fix="reboot to load the installed driver's module", pending="reboot")
    return None


def _driver_against_pin(profile: NodeProfile, d: _Driver, pin: str) -> Check:
    by_deploy = profile.nvidia_driver_change
    if d.installed and d.installed != {pin}:
        return Check(
            name=_DRIVER, status="P1",
            live=f"{d.live}; installed {', '.join(sorted(d.installed))}", want=pin,
            kind=_DRIVER,
            fix=f"set nvidia_driver_change: true so deploy/site.py installs {pin}, then "
            "reboot" if not by_deploy else f"{DEPLOY_FIX} (installs {pin}), reboot",
            deploy_fixes=by_deploy,
        )
    if d.loaded and d.loaded != pin:
        return Check(name=_DRIVER, status="P1", live=d.live, want=pin, kind=_DRIVER,
                     fix=f"reboot to load the installed {pin} module", pending="reboot")
    return ok(_DRIVER, d.live, pin, kind=_DRIVER)


def check_driver(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Loaded module vs user-space library (NVML mismatch) vs the profile's pinned version."""
    if snap.nvidia is None:
        return [not_applicable(_DRIVER, NOT_READ, kind=_DRIVER)]
    installed = {upstream_version(v) for v in (snap.driver_packages or {}).values()
                 if v and v[0].isdigit()}
    d = _Driver(snap.gpus, snap.nvidia, snap.driver_loaded, installed)
    if not d.devices and not d.smi.present and not d.loaded:
        return [not_applicable(_DRIVER, "not present: no NVIDIA GPU or driver", kind=_DRIVER)]
    for found in (_driver_not_loaded(profile, d), _driver_mismatch(d)):
        if found is not None:
            return [found]
    if profile.nvidia_driver:
        return [_driver_against_pin(profile, d, profile.nvidia_driver)]
    if not d.smi.present:
        return [Check(name=_DRIVER, status="P2", live=f"{d.live}; nvidia-smi: "
                      f"{d.smi.error or 'not installed'}", want="nvidia-smi works",
                      kind=_DRIVER,
                      fix="install the NVIDIA user space (nvidia-smi) matching the module")]
    return [ok(_DRIVER, d.live, kind=_DRIVER)]


# --- kernel ------------------------------------------------------------------------------------


def grub_default_kernel(snap: NodeSnapshot) -> str | None:
    """Kernel named by GRUB_DEFAULT ("...>Debian GNU/Linux, with Linux 6.1.0-31-amd64")."""
    text = snap.cmdline.grub_default_text
    if not text:
        return None
    try:
        match = _GRUB_KERNEL_RE.search(grub_cmdline_value(text, "GRUB_DEFAULT"))
    except ShellValueError:  # not literal words: no kernel named (check_cmdline reports it)
        return None
    return match.group(1) if match else None


def kernel_package(release: str) -> str:
    """The package that installs a kernel release: Proxmox's signed image for '-pve'
    ('6.17.2-1-pve'), Debian's linux-image otherwise ('6.12.69+deb13-amd64')."""
    if release.endswith("-pve"):
        return f"proxmox-kernel-{release}-signed"
    return f"linux-image-{release}"


def _kernel_pin_not_kept(running: str, wanted: str, host_pin: str | None,
                         unheld: list[str]) -> Check:
    """The profile's kernel is installed but not pinned on the host, or not held."""
    live = f"running {running}; boot pin: {host_pin or 'none'}"
    if unheld:
        live += f"; not held: {', '.join(unheld)}"
    if running == wanted:
        return Check(name="kernel", status="P0", live=live, want=wanted, kind="kernel",
                     fix=f"{DEPLOY_FIX} (pins and holds {wanted})", deploy_fixes=True,
                     note="the next boot or apt upgrade may pick another kernel")
    return Check(name="kernel", status="P1", live=live, want=wanted, kind="kernel",
                 fix=f"{DEPLOY_FIX} (pins {wanted}), then reboot", deploy_fixes=True)


def _kernel_profile_pin(profile: NodeProfile, kernels: KernelPackages, running: str,
                        host_pin: str | None, wanted: str) -> Check:
    name = kind = "kernel"
    if wanted not in kernels.installed:
        return Check(name=name, status="P1", live=f"running {running}; {wanted} not "
                     f"installed (installed: {', '.join(kernels.installed)})",
                     want=wanted, kind=kind,
                     fix=f"install {kernel_package(wanted)} or pin an installed "
                     "kernel in gpunode.kernel_pin")
    packages = sorted(p for p, v in kernels.packages.items() if v == wanted)
    unheld = [p for p in packages if p not in kernels.held_packages]
    if host_pin != wanted or unheld:
        return _kernel_pin_not_kept(running, wanted, host_pin, unheld)
    if running != wanted:
        return Check(name=name, status="P1", live=f"running {running}", want=wanted,
                     kind=kind, fix=f"reboot into {wanted}"
                     + (f" ({DEPLOY_FIX}: reboot: true)" if profile.reboot else ""),
                     deploy_fixes=profile.reboot, pending="reboot")
    return ok(name, f"{running} (pinned)", wanted, kind=kind)


def _kernel_unpinned(kernels: KernelPackages, running: str, host_pin: str | None) -> Check:
    """No pin in the profile: the host's own pin, else the newest installed kernel."""
    name = kind = "kernel"
    if host_pin:
        if running != host_pin:
            return Check(name=name, status="P1", live=f"running {running}", want=host_pin,
                         kind=kind, fix=f"reboot into the pinned kernel {host_pin}",
                         note="pinned on the host, not by the profile", pending="reboot")
        newer = kernels.newest != host_pin
        return ok(name, f"{running} (pinned on the host)", host_pin, kind=kind,
                  note=f"newer installed: {kernels.newest}" if newer else "")
    if running != kernels.newest:
        return Check(name=name, status="P1", live=f"running {running}",
                     want=f"{kernels.newest} (newest installed)", kind=kind,
                     fix=f"reboot into {kernels.newest}, or keep {running} with "
                     "gpunode.kernel_pin: running",
                     note="Proxmox writes no /var/run/reboot-required", pending="reboot")
    return ok(name, f"{running} (newest installed)", kernels.newest or "", kind=kind)


def check_kernel(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Running kernel vs the profile's pin, the host's pin, or the newest installed."""
    name = kind = "kernel"
    kernels = snap.kernels
    if kernels is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    running = kernels.running or "?"
    if not kernels.installed:
        return [not_applicable(name, f"running {running}; no kernel package installed "
                               "(container or custom kernel)", kind=kind)]
    host_pin = snap.boot_pinned or grub_default_kernel(snap)
    wanted_pin = running if profile.kernel_pin == "running" else profile.kernel_pin
    if wanted_pin:
        return [_kernel_profile_pin(profile, kernels, running, host_pin, wanted_pin)]
    return [_kernel_unpinned(kernels, running, host_pin)]


# --- Proxmox and containers ----------------------------------------------------------------


def check_proxmox(snap: NodeSnapshot) -> list[Check]:
    name = kind = "Proxmox VE"
    if snap.pve is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    if not snap.pve.present:
        return [not_applicable(name, "not present", kind=kind)]
    live = f"pve-manager {snap.pve.manager_version or '?'}"
    if snap.pve.running_kernel:
        live += f", running kernel {snap.pve.running_kernel}"
    return [ok(name, live, kind=kind)]


def check_boot_esps(snap: NodeSnapshot) -> list[Check]:
    """ESPs of /etc/kernel/proxmox-boot-uuids that `proxmox-boot-tool status` skipped (stale
    UUID, unreadable FAT): one row each; none on a host where every ESP was read."""
    checks = []
    for problem in snap.cmdline.esp_problems:
        message = esp_problem_message(problem)
        live, _, fix = message.partition(" Fix: ")
        checks.append(Check(name=f"ESP {problem.uuid}", status="P0", kind="boot ESP",
                            live=f"{problem.problem}: {live.split(': ', 1)[1]}",
                            want="mounted by proxmox-boot-tool", fix=fix,
                            note="a disk booting from it starts an old kernel or command line"))
    return checks


def _memlock_value(value: str | None) -> str | None:
    """lxc.prlimit.memlock 'unlimited' | '-1' | N | 'soft:hard' -> the soft value."""
    if value is None:
        return None
    soft = value.split(":", 1)[0].strip()
    return "unlimited" if soft in ("unlimited", "-1", "infinity") else soft


def check_containers(snap: NodeSnapshot,
                     memlock: dict[int, str | int] | None = None) -> list[Check]:
    """memlock and driver match for every GPU container of this Proxmox node.

    `memlock` maps vmid -> the declared memlock (ContainerSpec.memlock); others want
    'unlimited'.
    """
    name = "GPU containers"
    if snap.pve is None and snap.containers is None:
        return [not_applicable(name, NOT_READ, kind=name)]
    if snap.containers is None:
        return [not_applicable(name, "not present: no Proxmox VE (pct)", kind=name)]
    if not snap.containers:
        return [not_applicable(name, "no container on this node", kind=name)]
    unread = [c for c in snap.containers if not c.config_read]
    gpu = [c for c in snap.containers if c.gpu]
    checks = [_container_cgroup_v1(ct) for ct in snap.containers if ct.cgroup_v1]
    if not gpu:
        why = "no container has NVIDIA devices"
        if unread:
            why += f" ({len(unread)} configs unreadable: the audit needs root)"
        return [not_applicable(name, why, kind=name), *checks]
    host_driver = host_driver_version(snap)
    for ct in gpu:
        want = str((memlock or {}).get(ct.vmid, CONTAINER_MEMLOCK))
        checks.append(_container_memlock(ct, want))
        checks.append(_container_driver(ct, host_driver))
        if ct.local_cpus is not None:
            checks.append(_container_numa(ct))
    return checks


def _container_numa(ct: ContainerState) -> Check:
    """The container's cpuset against its GPUs' NUMA node(s). Without
    lxc.cgroup2.cpuset.cpus pvestatd spreads it over the whole host; a cpuset elsewhere
    puts every host-to-GPU copy across the socket link."""
    name, kind = f"{_ct_label(ct)} NUMA placement", "container NUMA placement"
    gpus = ", ".join(str(g) for g in ct.gpus)
    want = f"cpus {ct.local_cpus}, mems {ct.local_mems} (GPU {gpus})"
    live = f"cpus {ct.cpuset_cpus or 'not set'}, mems {ct.cpuset_mems or 'not set'}"
    local = _within(ct.cpuset_cpus, ct.local_cpus) and _within(ct.cpuset_mems, ct.local_mems)
    if local:
        return ok(name, live, want, kind=kind)
    return Check(
        name=name, status="P1", live=live, want=want, kind=kind,
        fix=f"lxc.cgroup2.cpuset.cpus: {ct.local_cpus} and lxc.cgroup2.cpuset.mems: "
        f"{ct.local_mems} in /etc/pve/lxc/{ct.vmid}.conf (the lxc_gpu role writes them for "
        f"declared containers: cpuset_cpus/cpuset_mems 'auto'), then pct reboot {ct.vmid}",
        note="not local to its GPUs: host-to-GPU copies and the server's threads cross "
        "the socket link" + ("" if ct.cpuset_cpus else "; pvestatd moves an unpinned "
        "container's CPUs around the whole host"),
        pending="restart",
    )


def _within(declared: str | None, local: str | None) -> bool:
    """A cpu/node list inside another (both in the kernel's list format)."""
    if declared is None or local is None:
        return False
    try:
        return set(parse_cpulist(declared)) <= set(parse_cpulist(local))
    except ValueError:
        return False


def _ct_label(ct: ContainerState) -> str:
    return f"CT {ct.vmid}" + (f" ({ct.name})" if ct.name else "")


def _container_cgroup_v1(ct: ContainerState) -> Check:
    """lxc.cgroup.* lines: LXC ignores them on a cgroup v2 host ("Ignoring legacy cgroup
    limits on pure cgroup2 system"), so a device allow there grants nothing."""
    from gpunode.profile.container import cgroup_v1_fix  # only here: a node with such lines

    lines = "; ".join(f"{k}: {v}" for k, v in ct.cgroup_v1)
    fixes = "; ".join(cgroup_v1_fix(k, v) for k, v in ct.cgroup_v1)
    return Check(name=f"{_ct_label(ct)} cgroup v1 lines", status="P1", live=lines,
                 want="lxc.cgroup2.* only", kind="container cgroup v1 lines",
                 fix=f"in /etc/pve/lxc/{ct.vmid}.conf {fixes}; then pct reboot {ct.vmid}",
                 note="cgroup v2 only: Proxmox VE 7+ boots no cgroup v1, VE 9 can't")


def _container_memlock(ct: ContainerState, want: str) -> Check:
    name, kind = f"{_ct_label(ct)} memlock", "container memlock"
    configured = _memlock_value(ct.memlock_config)
    live_value = _memlock_value(ct.memlock_live)
    conf = f"/etc/pve/lxc/{ct.vmid}.conf"
    if configured != want:
        return Check(
            name=name, status="P1",
            live=f"lxc.prlimit.memlock: {ct.memlock_config or 'not set'}"
            + (f"; live {live_value}" if live_value else ""),
            want=want, kind=kind,
            fix=f"add 'lxc.prlimit.memlock: {want}' to {conf} (the lxc_gpu role writes it for "
            f"declared containers), then pct reboot {ct.vmid}",
            note="CUDA pins host memory; the limit can't be raised from inside the container",
        )
    if ct.status == "running" and live_value is not None and live_value != want:
        return Check(name=name, status="P1", live=f"configured {want}; live {live_value}",
                     want=want, kind=kind, fix=f"pct reboot {ct.vmid} (pending restart)",
                     pending="restart")
    live = f"{want}" + (" (live)" if live_value == want else " (config)")
    return ok(name, live, want, kind=kind)


def _container_driver(ct: ContainerState, host_driver: str | None) -> Check:
    name, kind = f"{_ct_label(ct)} NVIDIA driver", "container NVIDIA driver"
    if ct.status and ct.status != "running":
        return not_applicable(name, f"{ct.status}: start it to compare its driver", kind=kind)
    if not ct.exec_ran:
        return not_applicable(name, "pct exec not run (the audit needs root on the host)",
                              kind=kind)
    if host_driver is None:
        return not_applicable(name, "host driver version unknown", kind=kind)
    fix = (f"install NVIDIA user space {host_driver} in CT {ct.vmid} (exactly the host module's "
           "version: the .run with --no-kernel-module, or the distro packages at "
           f"{host_driver}); not applied by deploy/site.py")
    if ct.driver_version == host_driver:
        return ok(name, f"{ct.driver_version} (= host)", host_driver, kind=kind)
    if ct.driver_version:
        return Check(name=name, status="P0", live=f"{ct.driver_version} (host {host_driver})",
                     want=host_driver, kind=kind, fix=fix,
                     note="a different user space fails with 'NVML: Driver/library version "
                     "mismatch'")
    error = ct.driver_error or "no output"
    if "mismatch" in error.lower():
        return Check(name=name, status="P0", live=error, want=host_driver, kind=kind, fix=fix)
    return Check(name=name, status="P2", live=f"nvidia-smi: {error}", want=host_driver,
                 kind=kind, fix=f"{fix} (nvidia-smi missing or failing in the container)")
