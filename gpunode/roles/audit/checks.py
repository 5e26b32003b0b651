"""Checks: profile vs live node, each with a status, the live value and the exact fix.

Status ranks follow the node report (gpunode.profile.check): P0 fixable at runtime, P1 needs a
reboot, P2 minor; "limit" is the hardware's own limit (nobody should chase it), "n/a" is not
applicable or not present here.

- `tuning_checks(profile, snap)`: every setting of the profile against the live node (what
  deploy/site.py converges);
- `audit_checks(profile, snap)`: those plus the hardware, GPU, driver, kernel and container
  checks of the readiness audit (gpunode.roles.audit.gpu_checks, pcie_checks, system_checks, ...).
"""

from __future__ import annotations

from gpunode.facts.cmdline import format_param, missing_params
from gpunode.facts.kernel_params import normalize_sysctl_value
from gpunode.facts.shell_assign import ShellValueError
from gpunode.ops.cpu import cpu_cmdline_params, states_to_disable
from gpunode.ops.modules import plan_modules
from gpunode.ops.pcie import (
    devices_to_write,
    refusal_note,
    selected_devices,
    setpci_mrrs_argument,
)
from gpunode.ops.sysctl import sysctl_changes
from gpunode.profile.check import DEPLOY_FIX, STATUSES, Check, Status, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.bandwidth_checks import check_measured_bandwidth
from gpunode.roles.audit.engine_checks import check_engines
from gpunode.roles.audit.gpu_checks import check_gpu_inventory, check_gpu_state, check_nvlink
from gpunode.roles.audit.health_checks import (
    check_container_device_nodes,
    check_links_vs_port,
    check_memory_repair,
    check_module_options,
    check_next_boot_module,
    check_pcie_errors,
    check_pciutils,
    check_xids,
)
from gpunode.roles.audit.p2p_checks import check_p2p_paths
from gpunode.roles.audit.pcie_checks import (
    check_acs,
    check_iommu,
    check_max_payload,
    check_pcie_links,
    check_rebar,
    check_unreadable_pcie,
)
from gpunode.roles.audit.runtime_checks import (
    check_module_flavour,
    check_persistence,
    check_power_limits,
)
from gpunode.roles.audit.snapshot import NodeSnapshot
from gpunode.roles.audit.system_checks import (
    check_boot_esps,
    check_containers,
    check_driver,
    check_kernel,
    check_proxmox,
    grub_default_kernel,
)

__all__ = [
    "DEPLOY_FIX",
    "STATUSES",
    "Check",
    "Status",
    "audit_checks",
    "ok",
    "tuning_checks",
]


def check_sysctls(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """A P0 exactly where the sysctl operation would write (ops.sysctl.sysctl_changes)."""
    live_values, refused = snap.kernel.sysctls, snap.kernel.sysctl_refused
    writes = sysctl_changes(live_values, profile.sysctls, refused)
    checks = []
    for key, want in profile.sysctls.items():
        want = normalize_sysctl_value(want)
        live = live_values.get(key)
        name = f"sysctl {key}"
        if live is None:
            checks.append(Check(name=name, status="n/a", live="not on this kernel", want=want))
        elif live == want:
            checks.append(ok(name, live, want))
        elif key not in writes:
            checks.append(Check(name=name, status="limit", want=want,
                                live=f"{live} (the kernel refused {want} in this boot: "
                                     "not supported here)"))
        else:
            checks.append(Check(name=name, status="P0", live=live, want=want,
                                fix=f"sysctl -w {key}='{want}' ({DEPLOY_FIX})",
                                deploy_fixes=True))
    return checks


def check_modules(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    plan = plan_modules(snap.kernel, profile.modules, profile.required_modules)
    checks = [ok(f"module {m}", "loaded") for m in plan.loaded]
    checks += [Check(name=f"module {m}", status="P0", live="not loaded", want="loaded",
                     fix=f"modprobe {m} ({DEPLOY_FIX})", deploy_fixes=True) for m in plan.load]
    checks += [Check(name=f"module {m}", status="n/a", live=why)
               for m, why in plan.not_applicable.items()]
    checks += [Check(name=f"module {m}", status="P0", live=why, want="loaded",
                     fix="install the driver/RDMA stack that provides it")
               for m, why in plan.missing_required.items()]
    return checks


def check_max_read_request(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """A P0 exactly where the MaxReadReq operation would write (ops.pcie.devices_to_write)."""
    size = profile.max_read_request
    devices = selected_devices(snap.pcie, profile.pcie_selector)
    if not devices:
        return [Check(name="PCIe MaxReadReq", status="n/a",
                      live="no device matches the selector")]
    _, refusing = devices_to_write(snap.pcie, profile.pcie_selector, size,
                                   dict(snap.mrrs_refused))
    checks = []
    for d in devices:
        name = f"PCIe MaxReadReq {d.bdf} [{d.vendor_id}:{d.device_id}]"
        live = f"{d.devctl_max_read_req} bytes"
        if d.devctl_max_read_req == size:
            checks.append(ok(name, live, f"{size} bytes"))
        elif d in refusing:
            checks.append(Check(name=name, status="limit", live=live, want=f"{size} bytes",
                                fix=refusal_note([d], size)))
        else:
            checks.append(Check(name=name, status="P0", live=live, want=f"{size} bytes",
                                fix=f"setpci -s {d.bdf} {setpci_mrrs_argument(size)} "
                                f"({DEPLOY_FIX})", deploy_fixes=True))
    return checks


def check_cstates(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    cap = profile.max_cstate
    if cap is None:
        return []
    if not snap.cpu.idle_states:
        return [Check(name="C-states (cpuidle)", status="n/a", live="no cpuidle states")]
    deeper = states_to_disable(snap.cpu.idle_states, cap)
    if not deeper:
        return [ok("C-states (cpuidle)", f"none deeper than C{cap} enabled", f"<= C{cap}")]
    names = sorted({f"{s.name} ({s.latency_us} us)" for s in deeper})
    return [Check(name="C-states (cpuidle)", status="P0", live=f"enabled: {', '.join(names)}",
                  want=f"<= C{cap}", fix=f"disable in cpuidle sysfs ({DEPLOY_FIX})",
                  deploy_fixes=True)]


def check_governor(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    want = profile.cpu_governor
    if not want:
        return []
    governors = snap.cpu.governors
    if not governors:
        return [Check(name="CPU governor", status="n/a", live="no cpufreq")]
    others = sorted({g for g in governors.values() if g != want})
    driver = snap.cpu.cpufreq_driver or "?"
    if not others:
        return [ok("CPU governor", f"{want} on {len(governors)} CPUs ({driver})", want)]
    return [Check(name="CPU governor", status="P0", live=", ".join(others), want=want,
                  fix=f"echo {want} > scaling_governor ({DEPLOY_FIX})", deploy_fixes=True)]


def check_cmdline(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    wanted = cpu_cmdline_params(snap.cpu, profile.max_cstate, profile.amd_pstate)
    wanted.update(profile.cmdline)
    checks = []
    try:
        not_configured = missing_params(snap.cmdline.configured, wanted)
    except ShellValueError as exc:  # the audit reports it; the deploy refuses it
        return [Check(name="cmdline (bootloader config)", status="P1", live=str(exc)[:200],
                      fix="make the assignment literal words (see the deploy's refusal)")]
    not_booted = missing_params(snap.cmdline.booted, wanted)
    no_config = (snap.cmdline.grub_default_text is None
                 and snap.cmdline.kernel_cmdline_text is None)
    for key, value in wanted.items():
        token = format_param(key, value)
        name = f"cmdline {key}"
        if no_config and key not in not_booted:
            checks.append(ok(name, token, token))
        elif no_config:
            if profile.bootloader == "auto":
                checks.append(Check(name=name, status="n/a", want=token,
                                    live="no bootloader config here (/etc/default/grub, "
                                    "/etc/kernel/cmdline): the cmdline is not managed on "
                                    "this node"))
            else:
                checks.append(Check(name=name, status="P1", live="no bootloader config",
                                    want=token, fix=f"bootloader: {profile.bootloader} but "
                                    "its config file is missing: fix the profile or the node"))
        elif key in not_configured:
            checks.append(Check(name=name, status="P1", live="not configured", want=token,
                                fix=f"add {token} to the bootloader config, reboot "
                                f"({DEPLOY_FIX})", deploy_fixes=True))
        elif key in not_booted:
            checks.append(Check(name=name, status="P1", live="configured, pending reboot",
                                want=token, fix="reboot", deploy_fixes=profile.reboot,
                                pending="reboot"))
        else:
            checks.append(ok(name, token, token))
    return checks


def check_memlock(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    want = "infinity" if profile.memlock == "unlimited" else str(profile.memlock)
    live = snap.kernel.memlock_default
    if live is None:
        return [Check(name="memlock (systemd default)", status="n/a", live="no systemd")]
    if live == want:
        return [ok("memlock (systemd default)", live, want)]
    return [Check(name="memlock (systemd default)", status="P0", live=live, want=want,
                  fix=f"DefaultLimitMEMLOCK={want} + systemctl daemon-reload ({DEPLOY_FIX})",
                  deploy_fixes=True)]


def tuning_checks(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Every profile setting compared with the live node."""
    return [
        *check_sysctls(profile, snap),
        *check_modules(profile, snap),
        *check_max_read_request(profile, snap),
        *check_cstates(profile, snap),
        *check_governor(profile, snap),
        *check_cmdline(profile, snap),
        *check_memlock(profile, snap),
    ]


def audit_checks(
    profile: NodeProfile,
    snap: NodeSnapshot,
    container_memlock: dict[int, str | int] | None = None,
) -> list[Check]:
    """The readiness audit: the profile's settings, then the node's hardware, GPUs, driver,
    kernel and containers. Pure: the same snapshot always gives the same report.

    `container_memlock` maps vmid -> declared memlock (ContainerSpec.memlock); GPU containers
    not listed want 'unlimited'.
    """
    return [
        *tuning_checks(profile, snap),
        *check_iommu(profile, snap),
        *check_gpu_inventory(snap),
        *check_unreadable_pcie(snap),
        *check_pcie_links(snap),
        *check_max_payload(snap),
        *check_acs(profile, snap),
        *check_p2p_paths(profile, snap),
        *check_measured_bandwidth(snap),
        *check_rebar(snap),
        *check_gpu_state(snap),
        *check_xids(snap),
        *check_memory_repair(snap),
        *check_pcie_errors(snap),
        *check_links_vs_port(snap),
        *check_pciutils(snap),
        *check_persistence(profile, snap),
        *check_power_limits(profile, snap),
        *check_nvlink(snap),
        *check_driver(profile, snap),
        *check_module_flavour(profile, snap),
        *check_kernel(profile, snap),
        *check_next_boot_module(snap, grub_default_kernel(snap)),
        *check_module_options(profile, snap),
        *check_proxmox(snap),
        *check_boot_esps(snap),
        *check_containers(snap, container_memlock),
        *check_container_device_nodes(snap),
        *check_engines(snap),
    ]
