"""verify_timer: drift you can watch between deploys (opt-in: profile field verify_timer).

Installs /usr/local/sbin/gpunode-verify, a read-only shell script rendered from the profile
(templates/verify/gpunode-verify.sh.j2, every value quoted), and gpunode-verify.service +
.timer, which run it every verify_interval. The script reads the same live values as the
deploy's verify (sysctls, modules, MaxReadReq, C-states, governor, cmdline, memlock, kernel
pin; persistence mode and power limits from `nvidia-smi -q -x`, ACS Control of the bridges
above the matched devices with setpci, where the profile sets them) and the GPUs' health (NVRM
Xid lines of this boot's kernel log, pending row remaps or page retirements, PCIe links below
what GPU and port support) and writes Prometheus textfile-collector metrics to
metrics_dir/gpunode.prom for node_exporter (names and HELP texts: gpunode.profile.metrics;
settings as gpunode_setting_ok, GPU health as gpunode_gpu_xid_events, gpunode_gpu_remap_pending
and gpunode_gpu_link_downtrained by GPU). What it checks and the wanted values are one list,
verify_checks() (its GPU part: verify_timer/gpu.py); the rules it reads with (the selector's
patterns, the MaxReadReq field, the C-state depth, ACS Control and its redirect mask, where
nvidia-smi's report holds each value, the Xid line pattern and what each Xid is) are the
deploy's data, through the shell library it shares with the boot script
(templates/shell/gpunode-lib.sh.j2). Without setpci, nvidia-smi, a kernel log or a GPU, the
check that needs it is skipped. The node needs no Python and no gpunode: only sh, coreutils,
grep, sed, pciutils and systemd (nvidia-smi where the driver is).

With verify_timer off, a node that still has the timer (on in an earlier run) gets it taken off
(verify_timer_off): the timer stopped and disabled, the script and units put back as gpunode
found them (removed), daemon-reload, the metrics file removed, and the metrics folder when
gpunode created it and it is empty. Undo does the same (gpunode.deploys.undo).
"""

from __future__ import annotations

from gpunode.facts.cmdline import format_param
from gpunode.facts.cpu import CpuState
from gpunode.facts.kernel_params import SYSCTL_REFUSED_DIR, normalize_sysctl_value
from gpunode.facts.nvidia import NvidiaGpu
from gpunode.facts.owned import (
    ancestors,
    original_path,
)
from gpunode.facts.pcie_refusals import REFUSED_DIR
from gpunode.facts.snapshot import Needs, node
from gpunode.ops.cpu import cpu_cmdline_params, cstate_script_variables
from gpunode.ops.files import directory_present, render_template, template_file
from gpunode.ops.modules import module_plan_for_host
from gpunode.ops.nvidia import smi_report
from gpunode.ops.pcie import pcie_script_variables
from gpunode.ops.services import (
    systemd_booted,
    unit_disabled,
    unit_enabled_and_running,
    unit_files,
)
from gpunode.ops.undo import created_folder_removed, owned_file_removed
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import deploy
from gpunode.roles.verify_timer.gpu import gpu_checks, gpu_script_variables

VERIFY_SCRIPT = "/usr/local/sbin/gpunode-verify"
VERIFY_SERVICE = "gpunode-verify.service"
VERIFY_TIMER = "gpunode-verify.timer"
UNIT_DIR = "/etc/systemd/system"
METRICS_FILE_NAME = "gpunode.prom"
OWNED_FILES = (VERIFY_SCRIPT, f"{UNIT_DIR}/{VERIFY_SERVICE}", f"{UNIT_DIR}/{VERIFY_TIMER}")


def metrics_file(profile: NodeProfile) -> str:
    return f"{profile.metrics_dir}/{METRICS_FILE_NAME}"


def removal_needs(metrics_dir: str) -> Needs:
    """What taking the timer off reads (verify_timer_off, and undo)."""
    paths = (*OWNED_FILES, f"{metrics_dir}/{METRICS_FILE_NAME}")
    return Needs(units=(VERIFY_TIMER,), files=(*paths, *(original_path(p) for p in paths)),
                 originals=(*paths, *ancestors(metrics_dir)), folders=tuple(ancestors(metrics_dir)))


def timer_installed() -> bool:
    """Any of the timer's files present, or the timer enabled or active."""
    snapshot = node()
    unit = snapshot.unit(VERIFY_TIMER)
    return (any(snapshot.file(path) for path in OWNED_FILES)
            or (systemd_booted() and (unit.active or unit.enabled)))


Check = tuple[str, str, str, str]
"""One setting the script reads back: (check function, gpunode's setting name, wanted value,
where: the /proc/sys path of a sysctl, the GPU index of a power limit, else "")."""


def verify_checks(profile: NodeProfile, cpu: CpuState, modules: list[str],
                  kernel_pin: str | None, gpus: list[NvidiaGpu] | None = None) -> list[Check]:
    """The settings the timer reads back and their wanted values on this node, then the GPU
    settings and health (verify_timer.gpu): the one list (the script only compares; pure).

    gpus: the deploy's nvidia-smi report (the GPU indexes a power limit is checked on)."""
    cmdline = cpu_cmdline_params(cpu, profile.max_cstate, profile.amd_pstate)
    cmdline.update(profile.cmdline)
    checks: list[Check] = [
        ("sysctl", f"sysctl {key}", normalize_sysctl_value(value), key.replace(".", "/"))
        for key, value in profile.sysctls.items()
    ]
    checks += [("module", f"module {name}", name, "") for name in modules]
    checks.append(("mrrs", "PCIe MaxReadReq", str(profile.max_read_request), ""))
    if profile.max_cstate is not None:
        checks.append(("cstates", "C-states (cpuidle)", str(profile.max_cstate), ""))
    if profile.cpu_governor:
        checks.append(("governor", "CPU governor", profile.cpu_governor, ""))
    checks += [("cmdline", f"cmdline {key}", format_param(key, value), "")
               for key, value in cmdline.items()]
    memlock = "infinity" if profile.memlock == "unlimited" else str(profile.memlock)
    checks.append(("memlock", "memlock (systemd default)", memlock, ""))
    if kernel_pin:
        checks.append(("kernel", "kernel pin", kernel_pin, ""))
    return checks + gpu_checks(profile, gpus or [])


SPAN_SECONDS = {"s": 1, "min": 60, "h": 3600, "d": 86400}
"""systemd.time(7)'s units that the schema's TIME_SPAN allows."""


def span_seconds(span: str) -> int:
    """A verify_interval (one number, one unit: '15min') in seconds."""
    number = span.rstrip("smhind")
    return int(number) * SPAN_SECONDS[span[len(number):]]


def script_variables(profile: NodeProfile, cpu: CpuState, modules: list[str],
                     kernel_pin: str | None, gpus: list[NvidiaGpu] | None = None) -> dict:
    """The script's data: the checks, and gpunode's rules it reads with (the selector's
    patterns, the MaxReadReq field, the C-state depth's limits, the GPU rules of
    verify_timer.gpu) (pure)."""
    return {
        "metrics_file": metrics_file(profile),
        "interval_seconds": span_seconds(profile.verify_interval),
        "checks": verify_checks(profile, cpu, modules, kernel_pin, gpus),
        "refused_dir": REFUSED_DIR,
        "sysctl_refused_dir": SYSCTL_REFUSED_DIR,
        **pcie_script_variables(profile.pcie_selector, profile.max_read_request),
        **cstate_script_variables(),
        **gpu_script_variables(),
    }


def render_script(profile: NodeProfile, cpu: CpuState, modules: list[str],
                  kernel_pin: str | None, gpus: list[NvidiaGpu] | None = None) -> str:
    return render_template("verify/gpunode-verify.sh.j2",
                           **script_variables(profile, cpu, modules, kernel_pin, gpus))


def needs(profile: NodeProfile) -> Needs:
    """What verify_timer reads; with the timer off, what tells whether an earlier run
    installed it (and what taking it off reads)."""
    if not profile.verify_timer:
        return removal_needs(profile.metrics_dir)
    return Needs(folders=(profile.metrics_dir,), units=(VERIFY_TIMER,), files=OWNED_FILES,
                 nvidia=profile.gpu_power_limit is not None)


@deploy("gpunode: verify timer")
def verify_timer(profile: NodeProfile, kernel_pin: str | None = None) -> None:
    """Install the read-only check and its timer; with profile.verify_timer off, take off a
    timer an earlier run installed (nothing when there is none).

    kernel_pin: the pinned kernel version resolved for this host (gpunode.roles.kernel)."""
    if not profile.verify_timer:
        if timer_installed():
            verify_timer_off(profile.metrics_dir)
        return
    cpu = node().cpu
    modules = module_plan_for_host(profile.modules, profile.required_modules).persist
    directory_present(name=f"Metrics directory {profile.metrics_dir}", path=profile.metrics_dir)
    template_file("verify/gpunode-verify.sh.j2", VERIFY_SCRIPT, mode="755",
                  **script_variables(profile, cpu, modules, kernel_pin, smi_report().gpus))
    unit_files(VERIFY_TIMER, [
        ("systemd/gpunode-verify.service.j2", f"{UNIT_DIR}/{VERIFY_SERVICE}",
         {"script": VERIFY_SCRIPT, "metrics_file": metrics_file(profile),
          "metrics_dir": profile.metrics_dir}),
        ("systemd/gpunode-verify.timer.j2", f"{UNIT_DIR}/{VERIFY_TIMER}",
         {"interval": profile.verify_interval})])
    unit_enabled_and_running(name=f"Enable {VERIFY_TIMER} (every {profile.verify_interval})",
                             unit=VERIFY_TIMER)


def verify_timer_off(metrics_dir: str) -> None:
    """Take the timer off: stop and disable it, put its files back as gpunode found them
    (daemon-reload after a unit file), remove the metrics file and the folder gpunode made."""
    unit_disabled(name=f"Stop and disable {VERIFY_TIMER}", unit=VERIFY_TIMER)
    for path in OWNED_FILES:
        after = "systemctl daemon-reload" if path.startswith(UNIT_DIR) else None
        owned_file_removed(name=f"Put back {path}", dest=path, after=after)
    owned_file_removed(name=f"Remove {metrics_dir}/{METRICS_FILE_NAME}",
                       dest=f"{metrics_dir}/{METRICS_FILE_NAME}")
    created_folder_removed(name=f"Remove {metrics_dir} if gpunode made it",
                           path=metrics_dir, gone=[METRICS_FILE_NAME])
