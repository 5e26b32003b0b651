"""AuditFacts: everything the audit reads beyond the tuning facts, in ONE read-only command.

One round trip gathers, as marker-separated sections (gpunode.roles.facts.sections):

- iommu_groups, iommu_types: `ls /sys/kernel/iommu_groups`, `grep -H . .../*/type`
  (parse_iommu);
- pci_paths: `readlink -f /sys/bus/pci/devices/*`, the PCI tree (parse_pci_paths);
- nvidia_version: /proc/driver/nvidia/version (parse_nvidia_proc_version);
- nvidia_smi: `nvidia-smi -q -x` (parse_nvidia_smi_xml, parse_gpu_details);
- nvlink: `nvidia-smi nvlink -s` (parse_nvlink_status);
- modinfo: `modinfo nvidia` filename/version/license (the flavour installed for this kernel);
- persistenced: nvidia-persistenced installed, enabled, active (parse_unit_state);
- topo_m, topo_p2p_r, topo_p2p_w: `nvidia-smi topo -m`, `topo -p2p r`, `topo -p2p w`
  (gpunode.roles.facts.gpu_topology);
- nvidia_packages: `dpkg-query -W` over the NVIDIA packages (parse_dpkg_query);
- kernels: `uname -r`, kernel packages, `apt-mark showhold` (parse_installed_kernels);
- pveversion, boot_kernels: `pveversion`, `proxmox-boot-tool kernel list`;
- has_pct, pct_list: `pct list` (parse_pct_list);
- ct_config:VMID: base64 of /etc/pve/lxc/VMID.conf (parse_pve_lxc_config_fact);
- ct_exec:VMID (running GPU containers only): `pct exec VMID -- sh -c "nvidia-smi
  --query-gpu=driver_version --format=csv,noheader; grep 'Max locked memory' /proc/1/limits"`
  (parse_container_exec).

Nothing is written on the node: no redirection into files (only 2>/dev/null), no setpci, no
sysctl -w, no modprobe. `proxmox-boot-tool status` is not run here (it mounts the ESPs); the
pinned kernel comes from `kernel list`, which only reads /etc/kernel.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pydantic import BaseModel, ConfigDict, Field
from pyinfra.api import FactBase
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.roles.facts.apt import AptHolds
from gpunode.roles.facts.dpkg import InstalledPackages, parse_dpkg_query
from gpunode.roles.facts.gpu_topology import GpuTopology, parse_gpu_topology
from gpunode.roles.facts.kernels import InstalledKernels, KernelPackages, parse_installed_kernels
from gpunode.roles.facts.nvidia import (
    NvidiaDriverVersion,
    NvidiaSmi,
    NvidiaSmiReport,
    nvidia_module_is_open,
    parse_nvidia_proc_version,
    parse_nvidia_smi_xml,
)
from gpunode.roles.facts.nvidia_modules import flavour_of_license, parse_modinfo_license
from gpunode.roles.facts.pcie import normalize_bdf, parse_pci_paths
from gpunode.roles.facts.proxmox import (
    ProxmoxBootTool,
    PveVersion,
    PveVersionFact,
    parse_proxmox_kernel_list,
    parse_pveversion,
)
from gpunode.roles.facts.sections import MARKER, section_command, split_sections
from gpunode.roles.lxc_gpu.facts import parse_pct_list, parse_pve_lxc_config_fact
from gpunode.roles.lxc_gpu.numa import GPU_NUMA_COMMAND, GpuNuma, local_cpuset, parse_gpu_numa
from gpunode.roles.lxc_gpu.pve_config import (
    cgroup_v1_entries,
    get,
    get_all,
    main_options,
    parse_pve_lxc_config,
)
from gpunode.roles.lxc_gpu.takeover import dev_path, mount_target

__all__ = [
    "AUDIT_COMMAND",
    "AuditExtras",
    "AuditFacts",
    "ContainerState",
    "GpuDetails",
    "IommuState",
    "NvlinkGpu",
    "UnitState",
    "container_state",
    "is_gpu_container",
    "parse_audit_sections",
    "parse_container_exec",
    "parse_gpu_details",
    "parse_iommu",
    "parse_nvlink_status",
    "parse_pci_paths",
    "parse_unit_state",
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


class GpuDetails(BaseModel):
    """What the audit reads from `nvidia-smi -q -x` beyond gpunode.roles.facts.nvidia.NvidiaGpu."""

    model_config = ConfigDict(frozen=True)

    bdf: str
    active_clock_reasons: list[str] = Field(default_factory=list)
    """Clock event (throttle) reasons reported "Active": "gpu_idle", "sw_power_cap", ..."""
    temp_slowdown_c: int | None = None
    temp_shutdown_c: int | None = None
    ecc_pending: str | None = None
    bar1_total_mib: int | None = None
    fb_total_mib: int | None = None
    performance_state: str | None = None


class NvlinkGpu(BaseModel):
    """One GPU block of `nvidia-smi nvlink -s`."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str = ""
    active_links: int = 0
    inactive_links: int = 0
    link_speed_gbs: float | None = None
    """Speed of the first active link (all links of a GPU run at one rate)."""
    message: str | None = None
    """NVML's line when it lists no link ("Unable to retrieve NVLink information as all links
    are inActive", "Device does not have or support Nvlink")."""


class UnitState(BaseModel):
    """A systemd unit as `systemctl is-enabled` / `is-active` print it ("" = not read)."""

    model_config = ConfigDict(frozen=True)

    installed: bool = False
    """The unit's program exists (command -v)."""
    enabled: str = ""
    active: str = ""


def parse_unit_state(text: str) -> UnitState:
    """Lines 'installed=yes|no', 'enabled=<is-enabled>', 'active=<is-active>'."""
    values: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, _, value = line.strip().partition("=")
        if key in ("installed", "enabled", "active"):
            values[key] = value.strip()
    return UnitState(installed=values.get("installed") == "yes",
                     enabled=values.get("enabled", ""), active=values.get("active", ""))


class ContainerState(BaseModel):
    """One container of this Proxmox node, as far as the audit needs it."""

    model_config = ConfigDict(frozen=True)

    vmid: int
    name: str = ""
    status: str = ""
    """From `pct list`: running, stopped, ... ("" when not listed)."""
    config_read: bool = False
    """/etc/pve/lxc/VMID.conf was read (it needs root)."""
    gpu: bool = False
    """The config hands NVIDIA devices to the container."""
    memlock_config: str | None = None
    """lxc.prlimit.memlock in the main section (None = not set)."""
    exec_ran: bool = False
    """`pct exec` ran (only for running GPU containers)."""
    driver_version: str | None = None
    """`nvidia-smi --query-gpu=driver_version` inside the container."""
    driver_error: str | None = None
    """nvidia-smi's first line inside the container when it printed no version."""
    memlock_live: str | None = None
    """Soft 'Max locked memory' of the container's init (/proc/1/limits)."""
    gpus: list[int] = Field(default_factory=list)
    """GPU indices (N of /dev/nvidiaN) the config passes, by mount or devN key."""
    cpuset_cpus: str | None = None
    """lxc.cgroup2.cpuset.cpus in the main section (None = not set: pvestatd moves it)."""
    cpuset_mems: str | None = None
    local_cpus: str | None = None
    """The CPUs of its GPUs' NUMA node(s); None: nothing to pin (one node, or unknown)."""
    local_mems: str | None = None
    cgroup_v1: list[tuple[str, str]] = Field(default_factory=list)
    """The main section's lxc.cgroup.* (cgroup v1) entries: ignored on cgroup v2 hosts."""


class AuditExtras(BaseModel):
    """The parsed AuditFacts output."""

    model_config = ConfigDict(frozen=True)

    iommu: IommuState = Field(default_factory=IommuState)
    pci_paths: dict[str, list[str]] = Field(default_factory=dict)
    nvidia: NvidiaSmiReport = Field(default_factory=lambda: NvidiaSmiReport(present=False))
    gpu_details: dict[str, GpuDetails] = Field(default_factory=dict)
    nvlink: list[NvlinkGpu] = Field(default_factory=list)
    driver_loaded: str | None = None
    driver_open: bool | None = None
    module_installed_flavour: str | None = None
    driver_packages: dict[str, str] = Field(default_factory=dict)
    persistenced: UnitState = Field(default_factory=lambda: UnitState())
    topology: GpuTopology = Field(default_factory=lambda: GpuTopology())
    kernels: KernelPackages = Field(default_factory=lambda: KernelPackages(running=""))
    pve: PveVersion = Field(default_factory=lambda: PveVersion(present=False))
    boot_kernels: list[str] = Field(default_factory=list)
    boot_pinned: str | None = None
    containers: list[ContainerState] | None = None
    """None where `pct` is not installed (not a Proxmox host)."""


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


_GPU_LINE_RE = re.compile(r"^GPU\s+(\d+):\s*(?P<body>.*)$")
_UUID_RE = re.compile(r"\s*\(UUID:[^)]*\)\s*")
_LINK_RE = re.compile(r"^Link\s+\d+:\s*(?P<state>.*)$")
_SPEED_RE = re.compile(r"(\d+(?:\.\d+)?)\s*GB/s")


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """`nvidia-smi nvlink -s` -> one NvlinkGpu per "GPU N:" block; [] for other text."""
    gpus: list[dict] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        gpu = _GPU_LINE_RE.match(line)
        if gpu:
            body = gpu.group("body")
            uuid = _UUID_RE.search(body)
            name, rest = ((body[: uuid.start()], body[uuid.end():]) if uuid else (body, ""))
            gpus.append({"index": int(gpu.group(1)), "name": name.strip(), "active_links": 0,
                         "inactive_links": 0, "link_speed_gbs": None,
                         "message": rest.strip() or None})
            continue
        if not gpus:
            continue
        current = gpus[-1]
        link = _LINK_RE.match(line)
        if link:
            speed = _SPEED_RE.search(link.group("state"))
            if speed and float(speed.group(1)) > 0:
                current["active_links"] += 1
                if current["link_speed_gbs"] is None:
                    current["link_speed_gbs"] = float(speed.group(1))
            else:
                current["inactive_links"] += 1
        elif current["message"] is None:
            current["message"] = line
    return [NvlinkGpu(**gpu) for gpu in gpus]


_NUMBER_RE = re.compile(r"\d+")


def _int_text(node: ET.Element | None, path: str) -> int | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or not found.text:
        return None
    match = _NUMBER_RE.search(found.text)
    return int(match.group(0)) if match else None


def _plain_text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = " ".join(found.text.split())
    return None if value in ("", "N/A", "[N/A]") else value


def parse_gpu_details(text: str) -> dict[str, GpuDetails]:
    """Clock event reasons, temperature thresholds, pending ECC mode and BAR1/framebuffer
    sizes from `nvidia-smi -q -x`, by normalized BDF; {} for anything but the XML report."""
    start = (text or "").find("<nvidia_smi_log")
    if start < 0:
        return {}
    head = text.rfind("<?xml", 0, start)
    try:
        root = ET.fromstring(text[head if head >= 0 else start:].strip())
    except ET.ParseError:
        return {}
    details: dict[str, GpuDetails] = {}
    for gpu in root.findall("gpu"):
        bus_id = gpu.get("id") or _plain_text(gpu, "pci/pci_bus_id")
        if not bus_id:
            continue
        reasons_node = gpu.find("clocks_event_reasons")
        if reasons_node is None:
            reasons_node = gpu.find("clocks_throttle_reasons")
        active = []
        for child in list(reasons_node) if reasons_node is not None else []:
            if " ".join((child.text or "").split()) == "Active":
                active.append(re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag))
        bdf = normalize_bdf(bus_id)
        details[bdf] = GpuDetails(
            bdf=bdf,
            active_clock_reasons=active,
            temp_slowdown_c=_int_text(gpu, "temperature/gpu_temp_slow_threshold"),
            temp_shutdown_c=_int_text(gpu, "temperature/gpu_temp_max_threshold"),
            ecc_pending=_plain_text(gpu, "ecc_mode/pending_ecc"),
            bar1_total_mib=_int_text(gpu, "bar1_memory_usage/total"),
            fb_total_mib=_int_text(gpu, "fb_memory_usage/total"),
            performance_state=_plain_text(gpu, "performance_state"),
        )
    return details


_VERSION_RE = re.compile(r"^\d+(?:\.\d+)+$")


def parse_container_exec(text: str) -> tuple[str | None, str | None, str | None]:
    """Output of the in-container probe -> (driver version, nvidia-smi error line, memlock).

    The probe prints nvidia-smi's first line (a version such as "550.54.15", or an error such
    as "Failed to initialize NVML: Driver/library version mismatch"), then the
    "Max locked memory" line of /proc/1/limits.
    """
    version = error = memlock = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            memlock = fields[0] if fields else None
        elif version is None and error is None:
            if _VERSION_RE.match(line.split(",")[0].strip()):
                version = line.split(",")[0].strip()
            else:
                error = line
    return version, error, memlock


def is_gpu_container(config_text: str) -> bool:
    """The main section hands NVIDIA devices over: devN: /dev/nvidia..., an lxc.mount.entry of
    /dev/nvidia..., or an lxc.cgroup2.devices.allow for major 195."""
    config = parse_pve_lxc_config(config_text)
    for key, value in main_options(config).items():
        if re.match(r"^dev\d+$", key) and value.startswith("/dev/nvidia"):
            return True
    for value in get_all(config, "lxc.mount.entry"):
        if value.split(" ", 1)[0].startswith("/dev/nvidia"):
            return True
    return any(re.match(r"^c 195:", value.strip())
               for value in get_all(config, "lxc.cgroup2.devices.allow"))


_GPU_NODE_RE = re.compile(r"^dev/nvidia(\d+)$")


def passed_gpus(config_text: str) -> list[int]:
    """GPU indices a config hands to its container: mounts at dev/nvidiaN (any spelling of
    the target) and devN keys for /dev/nvidiaN."""
    config = parse_pve_lxc_config(config_text)
    gpus = set()
    for line in config.main.lines:
        if line.kind != "key" or line.key is None:
            continue
        if line.key == "lxc.mount.entry":
            target = mount_target(line.value or "") or ""
        elif re.match(r"^dev\d+$", line.key):
            target = dev_path(line.value or "").lstrip("/")
        else:
            continue
        match = _GPU_NODE_RE.match(target)
        if match:
            gpus.add(int(match.group(1)))
    return sorted(gpus)


def container_state(vmid: int, config_text: str | None, listed: dict[str, str] | None,
                    exec_text: str | None, numa: GpuNuma | None = None) -> ContainerState:
    """One container from its config text, its `pct list` row and the in-container probe;
    ``numa`` (the host's GPU placement) gives the cpuset local to its GPUs."""
    listed = listed or {}
    gpu = bool(config_text) and is_gpu_container(config_text or "")
    config = parse_pve_lxc_config(config_text) if config_text else None
    memlock = get(config, "lxc.prlimit.memlock") if config else None
    version = error = memlock_live = None
    if exec_text is not None:
        version, error, memlock_live = parse_container_exec(exec_text)
    gpus = passed_gpus(config_text) if config_text else []
    local = local_cpuset(numa, gpus)
    return ContainerState(
        vmid=vmid, name=listed.get("name", ""), status=listed.get("status", ""),
        config_read=config_text is not None, gpu=gpu,
        memlock_config=memlock, exec_ran=exec_text is not None, driver_version=version,
        driver_error=error, memlock_live=memlock_live,
        cgroup_v1=cgroup_v1_entries(config) if config else [],
        gpus=gpus,
        cpuset_cpus=get(config, "lxc.cgroup2.cpuset.cpus") if config else None,
        cpuset_mems=get(config, "lxc.cgroup2.cpuset.mems") if config else None,
        local_cpus=local[0] if local else None,
        local_mems=local[1] if local else None,
    )


def parse_audit_sections(text: str) -> AuditExtras:
    """Parse the output of AUDIT_COMMAND; never raises on odd or missing sections."""
    sections = split_sections(text or "")
    smi_text = sections.get("nvidia_smi", "")
    proc_version = sections.get("nvidia_version", "")
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
        driver_loaded=parse_nvidia_proc_version(proc_version),
        driver_open=nvidia_module_is_open(proc_version),
        module_installed_flavour=flavour_of_license(
            parse_modinfo_license(sections.get("modinfo", ""))),
        persistenced=parse_unit_state(sections.get("persistenced", "")),
        topology=parse_gpu_topology(sections.get("topo_m", ""), sections.get("topo_p2p_r", ""),
                                    sections.get("topo_p2p_w", "")),
        driver_packages=parse_dpkg_query(sections.get("nvidia_packages", "")),
        kernels=parse_installed_kernels(sections.get("kernels", "")),
        pve=parse_pveversion(sections.get("pveversion", "")),
        boot_kernels=boot_kernels,
        boot_pinned=boot_pinned,
        containers=containers,
    )


# --- the command ---------------------------------------------------------------------------

_PACKAGES = " ".join(f"'{p}'" for p in NVIDIA_PACKAGE_PATTERNS)
_PERSISTENCED = (
    "echo installed=$(command -v nvidia-persistenced >/dev/null && echo yes || echo no); "
    "echo enabled=$(systemctl is-enabled nvidia-persistenced.service 2>/dev/null); "
    "echo active=$(systemctl is-active nvidia-persistenced.service 2>/dev/null)"
)
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

AUDIT_COMMAND = "; ".join(
    [
        section_command("iommu_groups", "ls /sys/kernel/iommu_groups"),
        section_command("iommu_types", "grep -H . /sys/kernel/iommu_groups/*/type"),
        section_command("pci_paths", "readlink -f /sys/bus/pci/devices/*"),
        section_command("nvidia_version", "cat /proc/driver/nvidia/version"),
        section_command(
            "nvidia_smi", "command -v nvidia-smi >/dev/null && nvidia-smi -q -x 2>&1"
        ),
        section_command(
            "nvlink", "command -v nvidia-smi >/dev/null && nvidia-smi nvlink -s 2>&1"
        ),
        section_command(
            "modinfo", "modinfo nvidia | grep -E '^(filename|version|license):'"
        ),
        section_command("persistenced", _PERSISTENCED),
        section_command("topo_m", "command -v nvidia-smi >/dev/null && nvidia-smi topo -m"),
        section_command(
            "topo_p2p_r", "command -v nvidia-smi >/dev/null && nvidia-smi topo -p2p r"
        ),
        section_command(
            "topo_p2p_w", "command -v nvidia-smi >/dev/null && nvidia-smi topo -p2p w"
        ),
        section_command(
            "nvidia_packages",
            "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' " + _PACKAGES,
        ),
        section_command("kernels", InstalledKernels().command()),
        section_command("pveversion", "command -v pveversion >/dev/null && pveversion"),
        section_command(
            "boot_kernels",
            "command -v proxmox-boot-tool >/dev/null && proxmox-boot-tool kernel list",
        ),
        section_command("has_pct", "command -v pct >/dev/null && echo yes"),
        section_command("pct_list", "command -v pct >/dev/null && pct list"),
        section_command("containers", "command -v pct >/dev/null && " + _CONTAINERS_LOOP),
        GPU_NUMA_COMMAND,
    ]
)


class AuditFacts(FactBase):
    """IOMMU, PCI topology, NVIDIA driver/GPUs/NVLink, kernels, Proxmox and its containers,
    read in one command (see the module docstring); parsed into AuditExtras."""

    # What it reads that other facts read too: an operation that changes one of these
    # changes this fact (gpunode.roles.facts.cache.FactChange).
    includes = (AptHolds, InstalledKernels, InstalledPackages, NvidiaDriverVersion, NvidiaSmi,
                PveVersionFact, ProxmoxBootTool, SystemdStatus, SystemdEnabled)

    @staticmethod
    def default() -> AuditExtras:
        return AuditExtras()

    def command(self) -> str:
        return AUDIT_COMMAND

    def process(self, output: list[str]) -> AuditExtras:
        return parse_audit_sections("\n".join(output))
