"""The floor under a no-op (bench only): the least a read of the same node could cost.

gpunode's no-op reads the node in one remote command (gpunode.facts.node_read.NodeRead: each
part a fact's own command between markers). The floor is a minimal read of the same sources:
each tool run once, in one shell, over one ssh connection:

    tail -v -n +1 <every small /proc, /sys and /etc file>   sysctls, cmdline, CPU power,
                                                            owned files' text, state.json ...
    ls -la <folders, owned files, /sys/module, /sys/bus/pci/devices ...>   names, modes, owners,
                                                            the PCI tree (link targets)
    lspci -vvv -nn -D                                       PCIe devices
    dpkg-query -W (all packages, once)                      packages, holds, kernels, headers
    systemctl show -p Id -p SubState -p UnitFileState UNITS units
    modinfo -F name MODULES                                 modules available (+ nvidia's)
    find /lib/modules (kernel/ pruned) -name 'nvidia.ko*'   each kernel's NVIDIA module (as
                                                            KernelModuleTrees; its two in-tree
                                                            globs are the shell's, no process)
    journalctl -k -b                                        the kernel log (the audit's Xids)
    nvidia-smi, pveversion, proxmox-boot-tool, pct list     only where installed (the shell's
                                                            `command -v` decides, no process)

What varies with the run is derived from the Needs the run's one read was built with (the
site deploy's, captured by bench/pyinfra_counted.py from the no-op run itself; `needs_record`):
sysctl keys, modules, owned files and their originals, folders, units, packages, module
parameters, and the flags (kernels, nvidia, record, audit: a `-y` run's read holds the
verify's audit parts). The files and folders behind the sections every NodeRead holds
whatever the needs (kernel cmdline, CPU power, PCIe, memlock, /run/gpunode's refusal records)
and behind the audit's are written out here by hand, from gpunode.facts.node_read.sections()
and the facts' own commands: FIXED_*, AUDIT_*.

Left out, on purpose: the node lock (a write, not a read: its cost shows in the one read's
own time), systemd's DefaultLimitMEMLOCK (a second `systemctl show`, of the manager: "each
tool once"), apt's candidates (`apt-cache policy`, run only when a wanted package is missing:
never on a converged node; the one dpkg-query covers what decides it), nvidia-smi's topology
and NVLink runs and `pct exec` into GPU containers (GPU and Proxmox hosts only: not on the
lab node) and the roles' own parts (Needs.parts): `uncovered()` names them.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from gpunode.facts.boot_modules import FIND_OUTSIDE_TREE
from gpunode.facts.kernel_params import sysctl_path
from gpunode.facts.node_read import BEGIN
from gpunode.facts.owned import ABSENT_SUFFIX, STATE_FILE, original_path

# Read by every NodeRead whatever the needs (sections(): cmdline, cpu, kernel, mrrs_refused):
# globs are left to the remote shell (an unmatched one is a missing file: tail says so on
# stderr, which the floor drops, as NodeRead does).
FIXED_FILES = (
    "/proc/cmdline", "/etc/default/grub", "/etc/default/grub.d/*.cfg", "/etc/kernel/cmdline",
    "/proc/cpuinfo", "/sys/devices/system/cpu/cpuidle/current_driver",
    "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/name",
    "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/latency",
    "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/disable",
    "/sys/module/processor/parameters/max_cstate", "/sys/module/intel_idle/parameters/max_cstate",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver",
    "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors",
    "/sys/devices/system/cpu/amd_pstate/status",
    "/proc/modules", "/proc/1/limits",
    "/run/gpunode/sysctl-refused/*", "/run/gpunode/mrrs-refused/*",
)  # fmt: skip
# Folders every NodeRead lists (modules loaded or built in, RDMA devices, the PCI tree, the
# systemd runtime folder that tells systemd is PID 1).
FIXED_LISTINGS = ("/sys/module", "/sys/class/infiniband", "/sys/bus/pci/devices",
                  "/run/systemd/system")
# The audit's (Needs.audit: AuditFacts, KernelXids, PciSysfs, HostNvidiaNodes, EngineProcesses):
# every PCI function's ids, NUMA node, link and AER counters (the read keeps GPUs and bridges:
# the floor reads them all, one process either way), IOMMU groups, NUMA nodes' CPUs, GPU
# minors, Proxmox's container configs and every process's cmdline (the serving engines).
PCI_FILES = ("vendor", "device", "class", "numa_node", "current_link_speed",
             "current_link_width", "max_link_speed", "max_link_width", "aer_dev_correctable",
             "aer_dev_nonfatal", "aer_dev_fatal")
AUDIT_FILES = (
    *(f"/sys/bus/pci/devices/*/{name}" for name in PCI_FILES),
    "/sys/kernel/iommu_groups/*/type", "/sys/devices/system/node/node*/cpulist",
    "/proc/driver/nvidia/gpus/*/information", "/etc/pve/lxc/*.conf", "/proc/[0-9]*/cmdline",
)
AUDIT_LISTINGS = ("/sys/kernel/iommu_groups", "/dev/nvidia*", "/dev/nvidia-caps")
GLOBS = frozenset((*FIXED_FILES, *AUDIT_FILES, *AUDIT_LISTINGS))
FIND = f"/lib/modules {FIND_OUTSIDE_TREE}"  # each kernel's NVIDIA module, as KernelModuleTrees
DPKG_FORMAT = "${db:Status-Want} ${db:Status-Abbrev} ${binary:Package} ${Version}\\n"


def needs_record(needs: Any) -> dict[str, Any]:
    """A Needs as JSON-able data (what pyinfra_counted.py writes): its roles' own parts (fact
    classes) by name only."""
    data = needs.model_dump(mode="json", exclude={"parts"})
    data["parts"] = [part.name for part in needs.parts]
    return dict(data)


def _words(paths: list[str]) -> str:
    """Paths as shell words: globs (ours, FIXED_*) left to the shell, the rest quoted."""
    return " ".join(p if p in GLOBS else shlex.quote(p) for p in paths)


def _unique(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def floor_sources(needs: dict[str, Any]) -> dict[str, list[str]]:
    """What the floor reads for these needs (a needs_record), by tool."""
    files = [*FIXED_FILES, *(sysctl_path(key) for key in needs.get("sysctl_keys", ())),
             *needs.get("files", ()), *needs.get("contents", ())]
    listings = [*FIXED_LISTINGS, *needs.get("folders", ()), *needs.get("files", ())]
    for path in needs.get("originals", ()):
        listings += [original_path(path), original_path(path) + ABSENT_SUFFIX]
    modules = list(needs.get("modules", ()))
    for name in needs.get("module_params", ()):
        module, _, param = name.partition("/")
        files.append(f"/sys/module/{module}/parameters/{param}")
    if needs.get("module_params"):
        files.append("/proc/driver/nvidia/params")
    if needs.get("record"):
        files.append(STATE_FILE)
    if needs.get("nvidia") or needs.get("nvidia_module"):
        files.append("/proc/driver/nvidia/version")
    if needs.get("nvidia_module"):
        modules.append("nvidia")
    audit = bool(needs.get("audit"))
    kernels = bool(needs.get("kernels")) or audit
    if kernels:
        files.append("/proc/sys/kernel/osrelease")  # uname -r
        listings.append("/lib/modules")
    if audit:
        files += AUDIT_FILES
        listings += AUDIT_LISTINGS
        modules.append("nvidia")
    guarded = [*(["nvidia-smi -q -x"] if needs.get("nvidia") or audit else []),
               *(["pveversion", "proxmox-boot-tool status",
                  "proxmox-boot-tool kernel list"] if kernels else []),
               *(["pct list"] if audit else [])]
    return {
        "tail": _unique(files),
        "ls": _unique(listings),
        "lspci": ["-vvv -nn -D"],
        "dpkg-query": ["all packages"] if (needs.get("packages") or needs.get("holds")
                                           or kernels) else [],
        "systemctl": list(needs.get("units", ())),
        "modinfo": _unique(modules),
        "find": [FIND] if kernels else [],
        "journalctl": ["-k -b -q --no-pager -o short-monotonic"] if audit else [],
        "where installed": guarded,
    }


def floor_command(needs: dict[str, Any]) -> str:
    """One shell command: the minimal read of what these needs (a needs_record) name, each
    tool once (stderr dropped, as NodeRead drops it; exit status 0)."""
    src = floor_sources(needs)
    parts = [f"tail -v -n +1 -- {_words(src['tail'])}",
             f"ls -la -- {_words(src['ls'])}",
             "command -v lspci >/dev/null && lspci -vvv -nn -D"]
    if src["dpkg-query"]:
        parts.append(f"dpkg-query -W -f={shlex.quote(DPKG_FORMAT)}")
    if src["systemctl"]:
        parts.append("systemctl show -p Id -p SubState -p UnitFileState -p ActiveState -- "
                     + _words(src["systemctl"]))
    if src["modinfo"]:
        parts.append(f"modinfo -F name -- {_words(src['modinfo'])}")
    if src["find"]:
        parts.append(f"find {FIND}")
    if src["journalctl"]:
        parts.append(f"journalctl {src['journalctl'][0]}")
    for command in src["where installed"]:
        tool = command.split()[0]
        parts.append(f"command -v {tool} >/dev/null && {command}")
    return "; ".join(f"{{ {part}; }} 2>/dev/null" for part in parts) + "; true"


def uncovered(needs: dict[str, Any]) -> list[str]:
    """What these needs ask the one read for that the floor does not read (see the module
    docstring): say so next to the figure."""
    out = ["the node lock (Needs.lock: a write)"] if needs.get("lock") else []
    out.append("systemd's DefaultLimitMEMLOCK (a second systemctl show)")
    if needs.get("candidates"):
        out.append("apt-cache policy (only when a wanted package is missing)")
    if needs.get("audit"):
        out.append("nvidia-smi's topology and NVLink runs, pct exec into GPU containers "
                   "(GPU / Proxmox hosts only)")
    out += [f"the role part {name}" for name in needs.get("parts", ())]
    return out


SECTION_BEGIN = re.compile(rf"echo {re.escape(BEGIN)}([a-z_]+);")  # node_read.section_command
STAMP = "@@gpunode-stamp"


def stamped(one_read: str) -> str:
    """The one read's command with the guest's clock (/proc/uptime, read by the shell's own
    `read`: no process) printed before each section and at the end, for `section_seconds`.
    The stamps hold no quote, so they stay inside the command's quoting as they are."""
    stamp = f"read -r up _ < /proc/uptime; echo {STAMP} %s $up;"
    body = SECTION_BEGIN.sub(lambda m: stamp % m.group(1) + " " + m.group(0), one_read)
    end = body.rstrip().rfind("'")  # the end of sh -c '...'
    if not body.lstrip().startswith("sh -c '") or end <= 0:
        return body
    return body[:end] + "; " + stamp % "end" + body[end:]


def section_seconds(output: str) -> dict[str, float]:
    """Each section's seconds on the guest, from a `stamped` read's output."""
    marks = [line.split() for line in output.splitlines() if line.startswith(STAMP + " ")]
    marks = [m for m in marks if len(m) == 3]
    return {name: round(float(after[2]) - float(up), 3)
            for (_, name, up), after in zip(marks, marks[1:], strict=False)}
