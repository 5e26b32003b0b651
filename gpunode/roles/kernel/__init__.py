"""kernel: boot parameters, kernel pin, and the reboot that makes them live.

Changes: the kernel cmdline (token-level edit of /etc/default/grub or /etc/kernel/cmdline),
the kernel pin (proxmox-boot-tool kernel pin, or GRUB_DEFAULT on plain Debian, plus an apt hold
of the kernel package), and a reboot when the booted state lags the configured one and the
profile allows it. Otherwise the change is reported as "pending reboot". A reboot is refused
(and nothing else in the reboot step done) when an NVIDIA driver is in use and the kernel it
would start has no NVIDIA module (or, on Proxmox, no headers package): ops.reboot.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger

from gpunode.facts.cmdline import GRUB_CMDLINE_VAR, CmdlineState, missing_params
from gpunode.facts.cpu import CpuState
from gpunode.facts.kernels import KernelPackages
from gpunode.facts.proxmox import (
    esp_problem_message,
)
from gpunode.facts.shell_assign import ShellValueError
from gpunode.facts.snapshot import Needs, node
from gpunode.ops import proxmox
from gpunode.ops.apt import apt_hold
from gpunode.ops.changes import log_wrapped
from gpunode.ops.cmdline import grub_dropin_note, kernel_cmdline, uses_systemd_boot
from gpunode.ops.cpu import cpu_cmdline_params
from gpunode.ops.reboot import reboot
from gpunode.profile.loader import ProfileError
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import deploy

DEBIAN_GRUB_ENTRY = "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {version}"


class KernelPin(BaseModel):
    """The kernel to keep and how: Proxmox's pin, or GRUB_DEFAULT; apt holds either way."""

    model_config = ConfigDict(frozen=True)

    version: str
    packages: list[str]
    proxmox: bool
    running: str

    @property
    def grub_entry(self) -> str | None:
        return None if self.proxmox else DEBIAN_GRUB_ENTRY.format(version=self.version)


def plan_kernel_pin(
    host_name: str, pin: str | None, kernels: KernelPackages, is_proxmox: bool
) -> KernelPin | None:
    """Resolve 'running' and check the pinned kernel is installed (else a ProfileError)."""
    if pin is None:
        return None
    version = kernels.running if pin == "running" else pin
    packages = sorted(p for p, v in kernels.packages.items() if v == version)
    if version not in kernels.installed or not packages:
        installed = ", ".join(kernels.installed) or "none found by dpkg"
        raise ProfileError(
            f"{host_name}: gpunode.kernel_pin: {version!r} is not an installed kernel "
            f"(installed: {installed}); install it first or pin one of these"
        )
    return KernelPin(version=version, packages=packages, proxmox=is_proxmox,
                     running=kernels.running)


def kernel_pin_for_host(profile: NodeProfile) -> KernelPin | None:
    if profile.kernel_pin is None:
        return None
    snapshot = node()
    kernels = snapshot.kernels or KernelPackages(running="")
    proxmox = bool((snapshot.pve and snapshot.pve.present)
                   or (snapshot.boot_tool and snapshot.boot_tool.status.present))
    return plan_kernel_pin(host.name, profile.kernel_pin, kernels, proxmox)


def kernel_problems(profile: NodeProfile) -> list[str]:
    """What can't succeed, known before any change: a pinned kernel that isn't installed, a
    GRUB assignment gpunode can't rewrite without changing its meaning (shell_assign)."""
    problems = []
    try:
        kernel_pin_for_host(profile)
    except ProfileError as exc:
        problems.append(str(exc))
    state = node().cmdline
    if state.grub_default_text is not None and not uses_systemd_boot(state, profile.bootloader):
        try:
            for var in (GRUB_CMDLINE_VAR, "GRUB_DEFAULT"):
                state.grub_value(var)
        except ShellValueError as exc:
            problems.append(str(exc))
    return problems


class BootPlan(BaseModel):
    """Wanted boot parameters and what the booted kernel still lacks."""

    model_config = ConfigDict(frozen=True)

    params: dict[str, str | None]
    pending: dict[str, str | None]
    esp_warnings: list[str] = []
    """ESPs proxmox-boot-tool skips: a refresh or pin never reaches them."""


def wanted_cmdline(profile: NodeProfile, cpu: CpuState) -> dict[str, str | None]:
    """CPU parameters for this vendor, then the user's own (which win on a clash)."""
    params = cpu_cmdline_params(cpu, profile.max_cstate, profile.amd_pstate)
    params.update(profile.cmdline)
    return params


def cmdline_managed(state: CmdlineState, bootloader: str) -> bool:
    """Whether gpunode persists the cmdline here: a forced bootloader, or one found (a
    container or a boot gpunode does not manage has neither file: nothing to reboot for)."""
    return bootloader != "auto" or state.grub_default_text is not None or state.systemd_boot


def boot_plan(profile: NodeProfile) -> BootPlan:
    """Read CPU and cmdline facts and compute the boot parameters of this host."""
    state = node().cmdline
    params = wanted_cmdline(profile, node().cpu)
    pending = missing_params(state.booted, params) if cmdline_managed(
        state, profile.bootloader) else {}
    return BootPlan(params=params, pending=pending,
                    esp_warnings=[esp_problem_message(p) for p in state.esp_problems])


def pending_reboot_reasons(plan: BootPlan, pin: KernelPin | None) -> list[str]:
    """Why this host needs a reboot to reach its profile (empty when it doesn't)."""
    reasons = []
    if plan.pending:
        tokens = " ".join(k if v is None else f"{k}={v}" for k, v in plan.pending.items())
        reasons.append(f"cmdline not active yet: {tokens}")
    if pin and pin.version != pin.running:
        reasons.append(f"kernel {pin.version} pinned, {pin.running} running")
    return reasons


def needs(profile: NodeProfile) -> Needs:
    """What the kernel role reads beyond the snapshot's core (cmdline, CPU): the kernels,
    Proxmox's boot tool and the holds when a pin is set; the kernels, their NVIDIA modules and
    the driver when it may reboot (a reboot that would lose the GPU driver is refused)."""
    gpu = Needs(kernels=True, nvidia=True) if profile.reboot else Needs()
    if profile.kernel_pin is None:
        return gpu
    return Needs(kernels=True, holds=True) | gpu


@deploy("gpunode: kernel")
def kernel_boot(profile: NodeProfile) -> None:
    """Persist boot parameters; reboot if they are not live and the profile allows it."""
    plan = boot_plan(profile)
    for warning in plan.esp_warnings:
        log_wrapped(logger.warning, f"{host.name}: {warning}")
    pin = kernel_pin_for_host(profile)
    if pin:
        apt_hold(name=f"Hold kernel {pin.version} packages", packages=pin.packages)
        if pin.proxmox:
            proxmox.kernel_pin(name=f"Pin kernel {pin.version}", version=pin.version)
    grub_entry = pin.grub_entry if pin else None
    state = node().cmdline
    if state.grub_default_text is not None and not uses_systemd_boot(state, profile.bootloader):
        note = grub_dropin_note(state, grub_entry)
        if note:
            log_wrapped(logger.info, f"{host.name}: {note}")
    if plan.params or grub_entry:
        kernel_cmdline(
            name="Persist kernel cmdline" + (" and default kernel" if grub_entry else ""),
            params=plan.params,
            bootloader=profile.bootloader,
            grub_default_entry=grub_entry,
        )
    reasons = pending_reboot_reasons(plan, pin)
    if reasons and profile.reboot:
        reboot(
            name="Reboot (" + " and ".join(r.split(":")[0] for r in reasons) + ")",
            delay=5,
            interval=3,
            reboot_timeout=profile.reboot_timeout,
            keep_gpu=True,
            boot_kernel=pin.version if pin else None,
        )
    elif reasons:
        log_wrapped(logger.warning, f"{host.name}: pending reboot ({'; '.join(reasons)}); "
                    "set reboot: true in the profile to let gpunode reboot")
