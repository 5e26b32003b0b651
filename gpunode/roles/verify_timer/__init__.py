"""verify_timer: drift you can watch between deploys (opt-in: profile field verify_timer).

Installs /usr/local/sbin/gpunode-verify, a read-only shell script rendered from the profile
(templates/verify/gpunode-verify.sh.j2: the wanted values are baked in, every value quoted),
and gpunode-verify.service + .timer, which run it every verify_interval. The script reads the
same live values as the deploy's verify (sysctls, modules, MaxReadReq, C-states, governor,
cmdline, memlock, kernel pin) and writes Prometheus textfile-collector metrics to
metrics_dir/gpunode.prom for node_exporter (names: gpunode.roles.audit.metrics). The node needs
no Python and no gpunode: only sh, awk, pciutils and systemd.
"""

from __future__ import annotations

from pyinfra.facts.files import Directory
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.roles.facts.bundle import FactRead
from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.facts.cmdline import format_param
from gpunode.roles.facts.cpu import CpuPower, CpuState
from gpunode.roles.facts.kernel_params import SYSCTL_REFUSED_DIR, normalize_sysctl_value
from gpunode.roles.facts.owned import OwnedFiles
from gpunode.roles.facts.pcie_refusals import REFUSED_DIR
from gpunode.roles.facts.sections import as_model
from gpunode.roles.ops.cpu import cpu_cmdline_params
from gpunode.roles.ops.files import directory_present, render_template, template_file
from gpunode.roles.ops.modules import module_plan_for_host
from gpunode.roles.ops.services import unit_enabled_and_running
from gpunode.roles.profile.node import NodeProfile
from gpunode.roles.pyinfra_adapter import deploy

VERIFY_SCRIPT = "/usr/local/sbin/gpunode-verify"
VERIFY_SERVICE = "gpunode-verify.service"
VERIFY_TIMER = "gpunode-verify.timer"
UNIT_DIR = "/etc/systemd/system"
METRICS_FILE_NAME = "gpunode.prom"
OWNED_FILES = (VERIFY_SCRIPT, f"{UNIT_DIR}/{VERIFY_SERVICE}", f"{UNIT_DIR}/{VERIFY_TIMER}")


def metrics_file(profile: NodeProfile) -> str:
    return f"{profile.metrics_dir}/{METRICS_FILE_NAME}"


def script_variables(profile: NodeProfile, cpu: CpuState, modules: list[str],
                     kernel_pin: str | None) -> dict:
    """What the script checks: the profile's wanted values for this node (pure)."""
    cmdline = cpu_cmdline_params(cpu, profile.max_cstate, profile.amd_pstate)
    cmdline.update(profile.cmdline)
    return {
        "metrics_file": metrics_file(profile),
        "sysctls": {k: normalize_sysctl_value(v) for k, v in profile.sysctls.items()},
        "modules": modules,
        "max_read_request": profile.max_read_request,
        "selector": profile.pcie_selector,
        "refused_dir": REFUSED_DIR,
        "sysctl_refused_dir": SYSCTL_REFUSED_DIR,
        "max_cstate": profile.max_cstate,
        "governor": profile.cpu_governor,
        "cmdline": {k: format_param(k, v) for k, v in cmdline.items()},
        "memlock": "infinity" if profile.memlock == "unlimited" else str(profile.memlock),
        "kernel_pin": kernel_pin,
    }


def render_script(profile: NodeProfile, cpu: CpuState, modules: list[str],
                  kernel_pin: str | None) -> str:
    return render_template("verify/gpunode-verify.sh.j2",
                           **script_variables(profile, cpu, modules, kernel_pin))


def verify_timer_reads(profile: NodeProfile) -> list[FactRead]:
    """Every fact verify_timer reads (for prefetch); none when the timer is off."""
    if not profile.verify_timer:
        return []
    units = [VERIFY_TIMER]
    return [
        FactRead(CpuPower),
        FactRead(Directory, {"path": profile.metrics_dir}),
        FactRead(SystemdStatus, {"services": units}),
        FactRead(SystemdEnabled, {"services": units}),
        FactRead(OwnedFiles, {"paths": list(OWNED_FILES)}),
    ]


@deploy("gpunode: verify timer")
def verify_timer(profile: NodeProfile, kernel_pin: str | None = None) -> None:
    """Install the read-only check and its timer (nothing when profile.verify_timer is off).

    kernel_pin: the pinned kernel version resolved for this host (gpunode.roles.kernel)."""
    if not profile.verify_timer:
        return
    cpu = as_model(CpuState, cached_fact(CpuPower))
    modules = module_plan_for_host(profile.modules, profile.required_modules).persist
    directory_present(name=f"Metrics directory {profile.metrics_dir}", path=profile.metrics_dir)
    template_file("verify/gpunode-verify.sh.j2", VERIFY_SCRIPT, mode="755",
                  **script_variables(profile, cpu, modules, kernel_pin))
    template_file("systemd/gpunode-verify.service.j2", f"{UNIT_DIR}/{VERIFY_SERVICE}",
                  after="systemctl daemon-reload", script=VERIFY_SCRIPT,
                  metrics_file=metrics_file(profile), metrics_dir=profile.metrics_dir)
    template_file("systemd/gpunode-verify.timer.j2", f"{UNIT_DIR}/{VERIFY_TIMER}",
                  after="systemctl daemon-reload", interval=profile.verify_interval)
    unit_enabled_and_running(name=f"Enable {VERIFY_TIMER} (every {profile.verify_interval})",
                             unit=VERIFY_TIMER)
