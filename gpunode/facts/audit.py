"""AuditFacts: everything the audit reads beyond the tuning facts, in ONE read-only command.

One round trip gathers, as marker-separated sections (gpunode.facts.sections):

- iommu_groups, iommu_types: `ls /sys/kernel/iommu_groups`, `grep -H . .../*/type`
  (parse_iommu);
- pci_paths: `readlink -f /sys/bus/pci/devices/*`, the PCI tree (parse_pci_paths);
- nvidia_smi: `nvidia-smi -q -x` (parse_nvidia_smi_xml, parse_gpu_details);
- nvlink: `nvidia-smi nvlink -s` (parse_nvlink_status);
- persistenced: nvidia-persistenced installed; enabled and active from the snapshot's one
  `systemctl show` of the units (parse_unit_state);
- topo_m, topo_p2p_r, topo_p2p_w: `nvidia-smi topo -m`, `topo -p2p r`, `topo -p2p w`
  (gpunode.facts.gpu_topology);
- pveversion, boot_kernels: `pveversion`, `proxmox-boot-tool kernel list`;
- has_pct, pct_list: `pct list` (parse_pct_list);
- ct_config:VMID: base64 of /etc/pve/lxc/VMID.conf (parse_pve_lxc_config_fact);
- ct_exec:VMID (running GPU containers only): `pct exec VMID -- sh -c "nvidia-smi
  --query-gpu=driver_version --format=csv,noheader; grep 'Max locked memory' /proc/1/limits"`
  (parse_container_exec).

The GPU sections' models and parsers live in gpunode.facts.gpu_details, the containers'
in gpunode.facts.containers; this module holds the command, the IOMMU parser and
AuditExtras, the whole parsed output.

Nothing is written on the node: no redirection into files (only 2>/dev/null), no setpci, no
sysctl -w, no modprobe. `proxmox-boot-tool status` is not run here (it mounts the ESPs); the
pinned kernel comes from `kernel list`, which only reads /etc/kernel.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field
from pyinfra.api import FactBase

from gpunode.facts.containers import ContainerState, container_state
from gpunode.facts.gpu_details import (
    GpuDetails,
    NvlinkGpu,
    UnitState,
    parse_gpu_details,
    parse_nvlink_status,
    parse_unit_state,
)
from gpunode.facts.gpu_numa import GPU_NUMA_COMMAND, GpuNuma, parse_gpu_numa
from gpunode.facts.gpu_topology import GpuTopology, parse_gpu_topology
from gpunode.facts.lxc import parse_pct_list, parse_pve_lxc_config_fact
from gpunode.facts.nvidia import (
    NvidiaSmiReport,
    parse_nvidia_smi_xml,
)
from gpunode.facts.pcie import parse_pci_paths
from gpunode.facts.proxmox import (
    PveVersion,
    parse_proxmox_kernel_list,
    parse_pveversion,
)
from gpunode.facts.sections import (
    MARKER,
    grep_lines_command,
    ls_command,
    section_command,
    split_sections,
)

__all__ = [
    "AUDIT_COMMAND",
    "AuditExtras",
    "AuditFacts",
    "IommuState",
    "parse_audit_sections",
    "parse_iommu",
]

# Same package globs as gpunode.roles.nvidia_driver (kept literal: that module imports operations).
NVIDIA_PACKAGE_PATTERNS = ["nvidia-*", "libnvidia-*", "libcuda1", "libnvcuvid1", "cuda-drivers*",
                           "firmware-nvidia-gsp*", "xserver-xorg-video-nvidia*"]
CONTAINER_EXEC_TIMEOUT_S = 30


# --- models -------------------------------------------------------------------------------


class IommuState(BaseModel):
    """IOMMU groups and the default-domain type of each (kernel ABI: sysfs-kernel-iommu_groups:
    "identity" = passthrough, "DMA"/"DMA-FQ" = translated, "unmanaged" = owned by VFIO)."""

    model_config = ConfigDict(frozen=True)

    groups: int = 0
    group_types: dict[int, str] = Field(default_factory=dict)

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kind in self.group_types.values():
            counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items()))


class AuditExtras(BaseModel):
    """The parsed AuditFacts output."""

    model_config = ConfigDict(frozen=True)

    iommu: IommuState = Field(default_factory=IommuState)
    pci_paths: dict[str, list[str]] = Field(default_factory=dict)
    nvidia: NvidiaSmiReport = Field(default_factory=lambda: NvidiaSmiReport(present=False))
    gpu_details: dict[str, GpuDetails] = Field(default_factory=dict)
    nvlink: list[NvlinkGpu] = Field(default_factory=list)
    persistenced: UnitState = Field(default_factory=lambda: UnitState())
    topology: GpuTopology = Field(default_factory=lambda: GpuTopology())
    pve: PveVersion = Field(default_factory=lambda: PveVersion(present=False))
    boot_kernels: list[str] = Field(default_factory=list)
    boot_pinned: str | None = None
    containers: list[ContainerState] | None = None
    """None where `pct` is not installed (not a Proxmox host)."""
    gpu_numa: GpuNuma = Field(default_factory=GpuNuma)

    def snapshot_fields(self) -> dict[str, object]:
        """The fields a Snapshot takes from the audit's read."""
        return {name: getattr(self, name) for name in (
            "iommu", "pci_paths", "nvidia", "gpu_details", "nvlink", "persistenced",
            "topology", "pve", "boot_pinned", "containers", "gpu_numa")}


# --- parsers -------------------------------------------------------------------------------

_TYPE_LINE_RE = re.compile(r"/iommu_groups/(\d+)/type:\s*(\S+)\s*$")


def parse_iommu(groups_text: str, types_text: str) -> IommuState:
    """`ls /sys/kernel/iommu_groups` (one group number a line) and `grep -H . .../type`."""
    groups = {int(word) for word in (groups_text or "").split() if word.isdigit()}
    types: dict[int, str] = {}
    for line in (types_text or "").splitlines():
        match = _TYPE_LINE_RE.search(line.strip())
        if match:
            types[int(match.group(1))] = match.group(2)
            groups.add(int(match.group(1)))
    return IommuState(groups=len(groups), group_types=dict(sorted(types.items())))


def unit_block(show_text: str, unit: str) -> list[str]:
    """The lines of one unit's block in a `systemctl show` of several (blocks start at Id=)."""
    block: list[str] = []
    for line in show_text.splitlines():
        if line.startswith("Id="):
            if block:
                break
            if line == f"Id={unit}":
                block = [line]
        elif block and line.strip():
            block.append(line)
    return block


def parse_audit_sections(text: str) -> AuditExtras:
    """Parse the output of AUDIT_COMMAND; never raises on odd or missing sections."""
    sections = split_sections(text or "")
    smi_text = sections.get("nvidia_smi", "")
    boot_kernels, boot_pinned = parse_proxmox_kernel_list(sections.get("boot_kernels", ""))
    containers: list[ContainerState] | None = None
    if "pct_list" in sections and sections.get("has_pct", "").strip() == "yes":
        listed = parse_pct_list(sections.get("pct_list", ""))
        configs: dict[int, str | None] = {}
        for name, body in sections.items():
            if name.startswith("ct_config:") and name.split(":", 1)[1].isdigit():
                vmid = int(name.split(":", 1)[1])
                try:
                    configs[vmid] = parse_pve_lxc_config_fact(body) if body.strip() else None
                except ValueError:
                    configs[vmid] = None
        vmids = sorted(set(configs) | set(listed))
        numa = parse_gpu_numa(text or "")
        containers = [
            container_state(vmid, configs.get(vmid), listed.get(vmid),
                            sections.get(f"ct_exec:{vmid}"), numa)
            for vmid in vmids
        ]
    return AuditExtras(
        iommu=parse_iommu(sections.get("iommu_groups", ""), sections.get("iommu_types", "")),
        pci_paths=parse_pci_paths(sections.get("pci_paths", "")),
        nvidia=parse_nvidia_smi_xml(smi_text),
        gpu_details=parse_gpu_details(smi_text),
        nvlink=parse_nvlink_status(sections.get("nvlink", "")),
        persistenced=parse_unit_state("\n".join([
            sections.get("persistenced", ""),
            *unit_block(sections.get("units", ""), PERSISTENCED_UNIT)])),
        topology=parse_gpu_topology(sections.get("topo_m", ""), sections.get("topo_p2p_r", ""),
                                    sections.get("topo_p2p_w", "")),
        pve=parse_pveversion(sections.get("pveversion", "")),
        boot_kernels=boot_kernels,
        boot_pinned=boot_pinned,
        containers=containers,
        gpu_numa=parse_gpu_numa(text or ""),
    )


# --- the command ---------------------------------------------------------------------------

PERSISTENCED_UNIT = "nvidia-persistenced.service"
"""Its UnitFileState and ActiveState come from the snapshot's `systemctl show` of the units."""
_PERSISTENCED = ("if command -v nvidia-persistenced >/dev/null; then echo installed=yes; "
                 "else echo installed=no; fi")
_CONTAINER_PROBE = (
    "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1; "
    "grep 'Max locked memory' /proc/1/limits"
)
_CONTAINERS_LOOP = (
    "for f in /etc/pve/lxc/*.conf; do "
    '[ -f "$f" ] || continue; '
    'id=$(basename "$f" .conf); '
    f"echo \"{MARKER}ct_config:$id\"; "
    'base64 -w0 "$f"; echo; '
    "if grep -q '/dev/nvidia' \"$f\" && pct status \"$id\" 2>/dev/null | grep -q running; then "
    f"echo \"{MARKER}ct_exec:$id\"; "
    f"timeout {CONTAINER_EXEC_TIMEOUT_S} pct exec \"$id\" -- sh -c \"{_CONTAINER_PROBE}\" "
    "</dev/null 2>&1; echo; "
    "fi; "
    "done"
)

# Sections whose command is another part of the snapshot's: the snapshot runs those once and
# gives their output to the audit's parser (audit_text), by the audit's section name.
SHARED_PARTS: dict[str, str] = {
    "pci_paths": "pci_paths",
    "nvidia_smi": "nvidia",
    "pveversion": "pve",
    "units": "units",
}

AUDIT_SECTIONS: list[tuple[str, str]] = [
    ("iommu_groups", ls_command("/sys/kernel/iommu_groups")),
    ("iommu_types", grep_lines_command("/sys/kernel/iommu_groups/*/type")),
    ("nvlink", "command -v nvidia-smi >/dev/null && nvidia-smi nvlink -s 2>&1"),
    ("persistenced", _PERSISTENCED),
    ("topo_m", "command -v nvidia-smi >/dev/null && nvidia-smi topo -m"),
    ("topo_p2p_r", "command -v nvidia-smi >/dev/null && nvidia-smi topo -p2p r"),
    ("topo_p2p_w", "command -v nvidia-smi >/dev/null && nvidia-smi topo -p2p w"),
    ("boot_kernels", "command -v proxmox-boot-tool >/dev/null && proxmox-boot-tool kernel list"),
    ("has_pct", "command -v pct >/dev/null && echo yes"),
    ("pct_list", "command -v pct >/dev/null && pct list"),
    ("containers", "command -v pct >/dev/null && " + _CONTAINERS_LOOP),
]


def audit_command() -> str:
    """The audit's one command (the SHARED_PARTS run as parts of the snapshot)."""
    return "; ".join([*(section_command(name, command) for name, command in AUDIT_SECTIONS),
                      GPU_NUMA_COMMAND])


AUDIT_COMMAND = audit_command()


def audit_text(lines: list[str], parts: dict[str, list[str]]) -> list[str]:
    """The audit's output with the shared parts' output added as its own sections."""
    shared = [line for name, part in SHARED_PARTS.items()
              for line in (f"{MARKER}{name}", *parts.get(part, []), "")]
    return [*lines, *shared]


class AuditFacts(FactBase):
    """IOMMU, NVLink, topology, Proxmox's containers ... read in one command (see the module
    docstring); parsed, with the snapshot's shared parts, into AuditExtras."""

    @staticmethod
    def default() -> AuditExtras:
        return AuditExtras()

    def command(self) -> str:
        return AUDIT_COMMAND

    def process(self, output: list[str]) -> AuditExtras:
        return parse_audit_sections("\n".join(output))
