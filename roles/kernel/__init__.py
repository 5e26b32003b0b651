"""kernel: boot parameters, kernel pin, and the reboot that makes them live.

Changes: the kernel cmdline (token-level edit of /etc/default/grub or /etc/kernel/cmdline),
the kernel pin (proxmox-boot-tool kernel pin, or GRUB_DEFAULT on plain Debian, plus an apt hold
of the kernel package), and a reboot when the booted state lags the configured one and the
profile allows it. Otherwise the change is reported as "pending reboot".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server

from roles.facts.cmdline import CmdlineState, KernelCmdline, missing_params
from roles.facts.cpu import CpuPower, CpuState
from roles.facts.sections import as_model
from roles.ops.cmdline import kernel_cmdline
from roles.ops.cpu import cpu_cmdline_params
from roles.profile.node import NodeProfile

REBOOT_TIMEOUT_S = 900


class BootPlan(BaseModel):
    """Wanted boot parameters and what the booted kernel still lacks."""

    model_config = ConfigDict(frozen=True)

    params: dict[str, str | None]
    pending: dict[str, str | None]


def wanted_cmdline(profile: NodeProfile, cpu: CpuState) -> dict[str, str | None]:
    """CPU parameters for this vendor, then the user's own (which win on a clash)."""
    params = cpu_cmdline_params(cpu, profile.max_cstate, profile.amd_pstate)
    params.update(profile.cmdline)
    return params


def boot_plan(profile: NodeProfile) -> BootPlan:
    """Read CPU and cmdline facts and compute the boot parameters of this host."""
    cpu = as_model(CpuState, host.get_fact(CpuPower))
    booted = as_model(CmdlineState, host.get_fact(KernelCmdline)).booted
    params = wanted_cmdline(profile, cpu)
    return BootPlan(params=params, pending=missing_params(booted, params))


def pending_reboot_reasons(profile: NodeProfile) -> list[str]:
    """Why this host needs a reboot to reach its profile (empty when it doesn't)."""
    plan = boot_plan(profile)
    reasons = []
    if plan.pending:
        tokens = " ".join(k if v is None else f"{k}={v}" for k, v in plan.pending.items())
        reasons.append(f"cmdline not active yet: {tokens}")
    return reasons


@deploy("gpunode: kernel cmdline and reboot")
def kernel_boot(profile: NodeProfile) -> None:
    """Persist boot parameters; reboot if they are not live and the profile allows it."""
    plan = boot_plan(profile)
    if plan.params:
        kernel_cmdline(
            name="Persist kernel cmdline parameters",
            params=plan.params,
            bootloader=profile.bootloader,
        )
    reasons = pending_reboot_reasons(profile)
    if reasons and profile.reboot:
        server.reboot(
            name=f"Reboot to apply: {'; '.join(reasons)}",
            delay=5,
            interval=3,
            reboot_timeout=REBOOT_TIMEOUT_S,
        )
    elif reasons:
        logger.warning(f"{host.name}: pending reboot ({'; '.join(reasons)}); "
                       "set reboot: true in the profile to let gpunode reboot")
