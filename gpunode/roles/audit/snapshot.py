"""NodeSnapshot: everything the checks read from one live node, gathered in one place.

The tuning fields (cmdline, cpu, kernel, pcie, mrrs_refused) are always read. The audit fields
(IOMMU, PCI topology, NVIDIA report, NVLink, driver, kernels, Proxmox, containers) come from
one more command (gpunode.roles.audit.facts.AuditFacts); a snapshot built without them (None) gets
"not read" for the checks that need them. Every fact is read-only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpunode.facts.bandwidth import BandwidthResults, BandwidthTests
from gpunode.facts.bundle import FactRead
from gpunode.facts.cache import cached_read
from gpunode.facts.cmdline import CmdlineState, KernelCmdline
from gpunode.facts.cpu import CpuPower, CpuState
from gpunode.facts.gpu_topology import GpuTopology
from gpunode.facts.kernel_params import KernelParams, KernelParamsState
from gpunode.facts.kernels import KernelPackages
from gpunode.facts.nvidia import NvidiaSmiReport
from gpunode.facts.pcie import PcieDevice, PcieDevices
from gpunode.facts.pcie_refusals import MaxReadReqRefusals
from gpunode.facts.proxmox import PveVersion
from gpunode.facts.sections import as_model, as_models
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.container_facts import ContainerState
from gpunode.roles.audit.facts import AuditExtras, AuditFacts, IommuState
from gpunode.roles.audit.gpu_facts import GpuDetails, NvlinkGpu, UnitState


class NodeSnapshot(BaseModel):
    """The live values of one node (read-only facts, no side effects)."""

    model_config = ConfigDict(frozen=True)

    cmdline: CmdlineState
    cpu: CpuState
    kernel: KernelParamsState
    pcie: list[PcieDevice]
    mrrs_refused: dict[str, int] = {}

    # Audit fields: None = not read (the tuning-only snapshot of older callers).
    iommu: IommuState | None = None
    pci_paths: dict[str, list[str]] | None = None
    """{bdf: upstream bridges, root first} from sysfs; None/{} when unknown."""
    nvidia: NvidiaSmiReport | None = None
    gpu_details: dict[str, GpuDetails] = {}
    nvlink: list[NvlinkGpu] | None = None
    driver_loaded: str | None = None
    """Version of the loaded nvidia kernel module (/proc/driver/nvidia/version)."""
    driver_open: bool | None = None
    """The loaded module is the open flavour (None: no module loaded)."""
    module_installed_flavour: str | None = None
    """Flavour of the module `modinfo nvidia` finds ("open"/"proprietary")."""
    driver_packages: dict[str, str] | None = None
    persistenced: UnitState | None = None
    topology: GpuTopology | None = None
    kernels: KernelPackages | None = None
    pve: PveVersion | None = None
    boot_pinned: str | None = None
    """proxmox-boot-tool's pinned kernel."""
    bandwidth: BandwidthResults | None = None
    """Measured by the audit's active mode (None: not measured)."""
    containers: list[ContainerState] | None = None
    """None where pct is missing (not Proxmox) or the audit fields were not read."""


def with_extras(snap: NodeSnapshot, extras: AuditExtras) -> NodeSnapshot:
    """The snapshot with the audit fields filled from an AuditFacts result."""
    return snap.model_copy(
        update={
            "iommu": extras.iommu,
            "pci_paths": extras.pci_paths,
            "nvidia": extras.nvidia,
            "gpu_details": extras.gpu_details,
            "nvlink": extras.nvlink,
            "driver_loaded": extras.driver_loaded,
            "driver_packages": extras.driver_packages,
            "driver_open": extras.driver_open,
            "module_installed_flavour": extras.module_installed_flavour,
            "persistenced": extras.persistenced,
            "topology": extras.topology,
            "kernels": extras.kernels,
            "pve": extras.pve,
            "boot_pinned": extras.boot_pinned,
            "containers": extras.containers,
        }
    )


def snapshot_reads(profile: NodeProfile) -> dict[str, FactRead]:
    """The tuning facts of a snapshot, by field (AuditFacts apart: AUDIT_READ)."""
    return {
        "kernel": FactRead(KernelParams, {"sysctl_keys": sorted(profile.sysctls),
                                          "modules": sorted(profile.modules)}),
        "cmdline": FactRead(KernelCmdline),
        "cpu": FactRead(CpuPower),
        "pcie": FactRead(PcieDevices),
        "mrrs_refused": FactRead(MaxReadReqRefusals),
    }


AUDIT_READ = FactRead(AuditFacts)


def verify_reads(profile: NodeProfile) -> list[FactRead]:
    """Everything gather_snapshot reads (for prefetch)."""
    return [*snapshot_reads(profile).values(), AUDIT_READ]


def gather_snapshot(profile: NodeProfile, active_timeout_s: int | None = None) -> NodeSnapshot:
    """Read the live node through the facts (the current pyinfra host): six read-only
    commands (cmdline, CPU, kernel parameters, lspci, MaxReadReq refusals, AuditFacts), or
    none when a prefetch (gpunode.facts.cache.prefetch) already read them.

    With `active_timeout_s` (the audit's active mode only) it also runs the bandwidth tests
    present on the node (BandwidthTests), each bounded by that many seconds."""
    live = {name: cached_read(read) for name, read in snapshot_reads(profile).items()}
    snap = NodeSnapshot(
        cmdline=as_model(CmdlineState, live["cmdline"]),
        cpu=as_model(CpuState, live["cpu"]),
        kernel=as_model(KernelParamsState, live["kernel"]),
        pcie=as_models(PcieDevice, live["pcie"]),
        mrrs_refused=dict(live["mrrs_refused"] or {}),
    )
    snap = with_extras(snap, as_model(AuditExtras, cached_read(AUDIT_READ)))
    if active_timeout_s is None:
        return snap
    measured = cached_read(FactRead(BandwidthTests, {"timeout_s": int(active_timeout_s)}))
    return snap.model_copy(update={"bandwidth": as_model(BandwidthResults, measured)})
