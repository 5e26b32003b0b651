"""host_tuning: the runtime settings of an inference host, each with its persistence.

Changes: sysctls (runtime + /etc/sysctl.d/90-gpunode.conf), kernel modules (modprobe +
/etc/modules-load.d/gpunode.conf), PCIe MaxReadReq (masked setpci + boot unit), ACS redirect
bits above the matched devices when pcie_acs_redirect is off (masked setpci + boot unit; the
boot unit also re-applies gpu_runtime's persistence mode and power limits), C-state cap and
cpufreq governor (sysfs + boot unit; the cmdline half is in gpunode/roles/kernel), RLIMIT_MEMLOCK
(/etc/security/limits.d + systemd DefaultLimitMEMLOCK). Why each: defaults.py.
"""

from __future__ import annotations

from pyinfra import host, logger

from gpunode.facts.memory import MEMINFO, parse_meminfo
from gpunode.facts.pcie import unreadable_note
from gpunode.facts.pcie_refusals import REFUSED_DIR
from gpunode.facts.snapshot import Needs, node
from gpunode.ops import cpu, modules, pcie, sysctl
from gpunode.ops.apt import packages_present
from gpunode.ops.changes import log_wrapped
from gpunode.ops.cpu import cstate_script_variables
from gpunode.ops.files import owned_file, render_template, sha1_text, template_file
from gpunode.ops.preflight import uninstallable
from gpunode.ops.services import DAEMON_RELOAD, unit_enabled_at_boot, unit_files
from gpunode.ops.sysctl import absent_sysctls
from gpunode.profile.danger import hugepages_above_memory
from gpunode.profile.node import NodeProfile
from gpunode.profile.sysctls import BEST_EFFORT_SYSCTLS, DEFAULT_SYSCTLS
from gpunode.pyinfra_adapter import deploy

SYSCTL_FILE = "/etc/sysctl.d/90-gpunode.conf"
MODULES_FILE = "/etc/modules-load.d/gpunode.conf"
LIMITS_FILE = "/etc/security/limits.d/90-gpunode-memlock.conf"
SYSTEMD_MEMLOCK_FILE = "/etc/systemd/system.conf.d/90-gpunode-memlock.conf"
BOOT_SCRIPT = "/usr/local/sbin/gpunode-tune"
BOOT_UNIT = "gpunode-tune.service"
BOOT_UNIT_FILE = f"/etc/systemd/system/{BOOT_UNIT}"
PACKAGES = ["pciutils", "kmod", "procps"]
OWNED_FILES = (SYSCTL_FILE, MODULES_FILE, LIMITS_FILE, SYSTEMD_MEMLOCK_FILE, BOOT_SCRIPT,
               BOOT_UNIT_FILE)


def host_tuning_problems(profile: NodeProfile) -> list[str]:
    """What can't succeed, known before any change: a tool with no installation candidate, a
    sysctl key this host's /proc/sys lacks (a typo such as vm.swapiness) that neither
    allow_absent nor the defaults list, a vm.nr_hugepages above the host's memory (unless
    i_know names it); the allowed absent keys are always noted."""
    refused, noted = absent_sysctls(profile.sysctls, [*profile.allow_absent, *DEFAULT_SYSCTLS])
    if noted:
        log_wrapped(logger.warning, f"{host.name}: sysctls not on this kernel, skipped: "
                    f"{', '.join(noted)}")
    hugepages = hugepages_above_memory(profile.sysctls, profile.i_know,
                                       parse_meminfo(node().contents.get(MEMINFO)))
    return uninstallable(PACKAGES) + [
        f"gpunode.sysctls.{key}: {key!r} is not in this host's /proc/sys (a typo, or a module "
        "not loaded). Fix: correct the key, or list it in allow_absent to skip it here"
        for key in refused] + ([hugepages] if hugepages else [])


def memlock_values(memlock: str | int) -> tuple[str, str]:
    """(limits.conf value in KiB, systemd value in bytes) for a memlock setting."""
    if memlock == "unlimited":
        return "unlimited", "infinity"
    return str(int(memlock) // 1024), str(int(memlock))


def boot_script_variables(profile: NodeProfile) -> dict:
    """The boot script's data: the profile's values and gpunode's rules as data (the
    selector's patterns, the MaxReadReq field, the ACS register and mask where the profile
    clears ACS redirect, the C-state depth's limits)."""
    return {
        "max_read_request": profile.max_read_request,
        **pcie.pcie_script_variables(profile.pcie_selector, profile.max_read_request),
        "refused_dir": REFUSED_DIR,
        "max_cstate": profile.max_cstate,
        **cstate_script_variables(),
        "governor": profile.cpu_governor,
        "acs_redirect_off": profile.pcie_acs_redirect == "off",
        **(pcie.acs_script_variables() if profile.pcie_acs_redirect == "off" else {}),
        "persistence": profile.gpu_persistence,
        "power_limits": power_limit_lines(profile.gpu_power_limit),
    }


def power_limit_lines(setting: int | str | dict | None) -> list[tuple[int | None, str]]:
    """(GPU index or None for every GPU, value) pairs for the boot script."""
    if setting is None:
        return []
    if isinstance(setting, dict):
        return [(index, str(value)) for index, value in sorted(setting.items())]
    return [(None, str(setting))]


def tune_sysctls(profile: NodeProfile) -> None:
    best_effort = BEST_EFFORT_SYSCTLS & set(profile.sysctls)
    template_file(
        "sysctl/90-gpunode.conf.j2", SYSCTL_FILE, sysctls=profile.sysctls, best_effort=best_effort
    )
    sysctl.sysctl_values(
        name="Set sysctl values now", values=profile.sysctls, best_effort=frozenset(best_effort),
        persisted_in=SYSCTL_FILE,
    )


def tune_modules(profile: NodeProfile) -> None:
    plan = modules.module_plan_for_host(profile.modules, profile.required_modules)
    template_file("modules-load/gpunode.conf.j2", MODULES_FILE, modules=plan.persist)
    modules.kernel_modules(
        name="Load kernel modules now", modules=profile.modules, required=profile.required_modules
    )


def pciutils_note() -> str | None:
    """Why PCIe capabilities are unknown before this run installs pciutils."""
    if "pciutils" in node().packages:
        return None
    return ("pciutils is not installed: PCIe capabilities (MaxReadReq, ACS, link) can't be "
            "read with lspci until this run installs it; until then only sysfs is read "
            "(vendor, device, class, NUMA node, link speed/width)")


def tune_devices_and_cpu(profile: NodeProfile, reload_follows: bool = False) -> None:
    missing = pciutils_note()
    if missing:
        log_wrapped(logger.warning, f"{host.name}: {missing}")
    unreadable = unreadable_note(node().pcie)
    if unreadable:
        log_wrapped(logger.warning, f"{host.name}: {unreadable}")
    pcie.max_read_request(
        name=f"Set PCIe MaxReadReq={profile.max_read_request} on matched devices",
        selector=profile.pcie_selector,
        size=profile.max_read_request,
    )
    if profile.pcie_acs_redirect == "off":
        pcie.acs_redirect_off(
            name="Clear ACS redirect bits above matched devices",
            selector=profile.pcie_selector,
        )
    if profile.max_cstate is not None:
        cpu.cstate_cap(name=f"Cap C-states at C{profile.max_cstate}", max_cstate=profile.max_cstate)
    if profile.cpu_governor:
        cpu.cpu_governor(name=f"Set governor {profile.cpu_governor}", governor=profile.cpu_governor)
    template_file("boot/gpunode-tune.sh.j2", BOOT_SCRIPT, mode="755",
                  **boot_script_variables(profile))
    unit_files(BOOT_UNIT, [("systemd/gpunode-tune.service.j2", BOOT_UNIT_FILE,
                            {"script": BOOT_SCRIPT, "persistence": profile.gpu_persistence})],
               reload_follows=reload_follows)


def needs(profile: NodeProfile) -> Needs:
    """What host_tuning reads beyond the snapshot's core (cmdline, CPU, lspci, refusals)."""
    memory = "vm.nr_hugepages" in profile.sysctls and "vm.nr_hugepages" not in profile.i_know
    return Needs(packages=tuple(PACKAGES), candidates=tuple(PACKAGES),
                 sysctl_keys=tuple(profile.sysctls), modules=tuple(profile.modules),
                 units=(BOOT_UNIT,), files=OWNED_FILES, contents=(MEMINFO,) if memory else ())


def memlock_text(profile: NodeProfile) -> str:
    """The manager's memlock drop-in as gpunode writes it."""
    return render_template("systemd/90-gpunode-memlock.conf.j2",
                           memlock_systemd=memlock_values(profile.memlock)[1])


def reload_planned(profile: NodeProfile) -> bool:
    """Does this run rewrite the manager's memlock drop-in (so reload systemd)? Planned
    from the snapshot, like the write itself."""
    state = node().file(SYSTEMD_MEMLOCK_FILE)
    return state is None or state.sha1 != sha1_text(memlock_text(profile))


def tune_memlock(profile: NodeProfile) -> None:
    kib, _ = memlock_values(profile.memlock)
    template_file("limits/90-gpunode-memlock.conf.j2", LIMITS_FILE, memlock_kib=kib)
    owned_file(name=f"Write {SYSTEMD_MEMLOCK_FILE}", dest=SYSTEMD_MEMLOCK_FILE,
               text=memlock_text(profile), after=DAEMON_RELOAD)


@deploy("gpunode: tuning")
def host_tuning(profile: NodeProfile) -> None:
    """All runtime settings with their persistence; see the module docstring."""
    packages_present(name="Install the tools gpunode reads and writes with", packages=PACKAGES)
    tune_sysctls(profile)
    tune_modules(profile)
    # The boot unit's files go before the memlock drop-in: its daemon-reload re-reads them,
    # so neither a daemon-reload after them nor `enable`'s own reload is needed.
    reload = reload_planned(profile)
    tune_devices_and_cpu(profile, reload_follows=reload)
    tune_memlock(profile)
    unit_enabled_at_boot(BOOT_UNIT, "re-applies at boot", reloaded=reload)
