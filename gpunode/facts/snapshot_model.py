"""The snapshot's models: what a deploy needs read (`Needs`, its `Part`s) and what the one
read returned (`Snapshot`). gpunode.facts.node_read builds the read from them and
gpunode.facts.snapshot keeps each host's snapshot for the run; both import this module, and
it imports neither."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict
from pyinfra.api import FactBase

from gpunode.facts.audit import IommuState
from gpunode.facts.bandwidth import BandwidthResults
from gpunode.facts.boot_modules import BootModules
from gpunode.facts.cmdline import CmdlineState
from gpunode.facts.containers import ContainerState
from gpunode.facts.cpu import CpuState
from gpunode.facts.engine_read import EngineReadState
from gpunode.facts.gpu_details import GpuDetails, NvlinkGpu, UnitState
from gpunode.facts.gpu_health import PciSysfsState, XidLog
from gpunode.facts.gpu_numa import GpuNuma
from gpunode.facts.gpu_topology import GpuTopology
from gpunode.facts.kernel_params import KernelParamsState
from gpunode.facts.kernels import KernelPackages
from gpunode.facts.lock import LockState
from gpunode.facts.nvidia import NvidiaSmiReport
from gpunode.facts.nvidia_modules import NvidiaModuleState
from gpunode.facts.owned import FileState, NodeState
from gpunode.facts.pcie import PcieDevice, is_nvidia_gpu
from gpunode.facts.proxmox import ProxmoxBootInfo, PveVersion
from gpunode.facts.systemd import Unit

Paths = tuple[str, ...]


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(sorted({*a, *b}, key=repr))


class Part(BaseModel):
    """A role's own read (a fact only that role knows: Proxmox's container configs, ...):
    its value is the Snapshot's parts[name]."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    fact: type[FactBase]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __repr__(self) -> str:
        return f"Part({self.name})"


class Needs(BaseModel):
    """What a run reads: the union of what its roles need (a role's `needs(profile)`)."""

    model_config = ConfigDict(frozen=True)

    sysctl_keys: Paths = ()
    modules: Paths = ()
    files: Paths = ()
    """Hash, mode and owner of each path (the files gpunode owns, their originals)."""
    contents: Paths = ()
    """Whole text of each path (undo's edited files; every owned file under --diff)."""
    originals: Paths = ()
    """Whether the original of each path was kept (or recorded as absent)."""
    folders: Paths = ()
    """The names in each folder (None: not a folder)."""
    units: Paths = ()
    packages: Paths = ()
    """dpkg-query patterns: installed package -> version."""
    candidates: Paths = ()
    """Packages whose installation candidate apt is asked for (when one is missing)."""
    holds: bool = False
    kernels: bool = False
    """Running and installed kernels, pveversion, proxmox-boot-tool."""
    nvidia: bool = False
    """nvidia-smi -q -x and the loaded driver's version."""
    nvidia_module: bool = False
    module_params: Paths = ()
    """"module/param" names whose live value is read (/proc/driver/nvidia/params, sysfs)."""
    record: bool = False
    """gpunode's state.json (what the node was before its first apply)."""
    audit: bool = False
    """Everything the audit checks beyond the tuning (AuditFacts)."""
    lock: bool = False
    """Take the node lock for the run first (gpunode.facts.lock): every deploy that changes."""
    parts: tuple[Part, ...] = ()

    def __repr__(self) -> str:  # pyinfra logs a fact's arguments: short, and one per needs
        counts = [f"{name}={len(value)}" for name, value in self if isinstance(value, tuple)
                  and value]
        flags = [name for name, value in self if value is True]
        digest = hashlib.sha1(str(tuple(self)).encode()).hexdigest()[:8]
        return f"Needs({', '.join([*counts, *flags])}; {digest})"

    __str__ = __repr__

    def __or__(self, other: Needs) -> Needs:
        merged: dict[str, Any] = {}
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            merged[name] = (mine or theirs) if isinstance(mine, bool) else _union(mine, theirs)
        return Needs(**merged)


def combined(needs: list[Needs]) -> Needs:
    total = Needs()
    for part in needs:
        total = total | part
    return total


class Snapshot(BaseModel):
    """The live values of one node. Parts a run did not need keep their empty default (the
    audit's parts: None = not read)."""

    model_config = ConfigDict(frozen=True)

    cmdline: CmdlineState = CmdlineState()
    cpu: CpuState = CpuState()
    kernel: KernelParamsState = KernelParamsState()
    pcie: list[PcieDevice] = []
    mrrs_refused: dict[str, int] = {}
    pci_paths: dict[str, list[str]] | None = None
    """{bdf: upstream bridges, root first} from sysfs."""
    files: dict[str, FileState | None] = {}
    contents: dict[str, list[str] | None] = {}
    originals: dict[str, str | None] = {}
    folders: dict[str, list[str]] = {}
    units: dict[str, Unit] = {}
    packages: dict[str, str] = {}
    candidates: dict[str, str | None] = {}
    holds: list[str] = []
    recorded: NodeState | None = None
    record_damaged: str | None = None
    """Why state.json is there but not a valid record (refused: never "never applied")."""
    lock: LockState | None = None
    """The node lock (None: not taken: not asked for, or it could not be)."""
    nvidia: NvidiaSmiReport | None = None
    driver_loaded: str | None = None
    """Version of the loaded nvidia kernel module (/proc/driver/nvidia/version)."""
    nvidia_module: NvidiaModuleState | None = None
    kernels: KernelPackages | None = None
    pve: PveVersion | None = None
    boot_tool: ProxmoxBootInfo | None = None
    boot_modules: BootModules | None = None
    """Each installed kernel's NVIDIA module and the headers packages (with the kernels)."""
    module_params: dict[str, str] = {}
    """Live values of Needs.module_params ("nvidia/NVreg_DynamicPowerManagement": "3")."""

    # The audit's parts (AuditFacts).
    iommu: IommuState | None = None
    gpu_details: dict[str, GpuDetails] = {}
    nvlink: list[NvlinkGpu] | None = None
    driver_open: bool | None = None
    """The loaded module is the open flavour (None: no module loaded)."""
    module_installed_flavour: str | None = None
    """Flavour of the module `modinfo nvidia` finds ("open"/"proprietary")."""
    driver_packages: dict[str, str] | None = None
    persistenced: UnitState | None = None
    topology: GpuTopology | None = None
    boot_pinned: str | None = None
    """proxmox-boot-tool's pinned kernel."""
    bandwidth: BandwidthResults | None = None
    """Measured by the audit's active mode (None: not measured)."""
    xids: XidLog | None = None
    """NVRM Xid lines of this boot's kernel log."""
    pci_sysfs: PciSysfsState | None = None
    """GPUs and bridges from sysfs (ids, NUMA, links, AER), and whether lspci is installed."""
    nvidia_nodes: list[str] | None = None
    """The host's /dev/nvidia* device nodes."""
    containers: list[ContainerState] | None = None
    """None where pct is missing (not Proxmox) or the audit's parts were not read."""
    gpu_numa: GpuNuma | None = None
    """The host's NUMA nodes and where its GPUs sit (the audit's read)."""
    engines: EngineReadState | None = None
    """The serving engines running on the node (facts.engine_read; the audit's read)."""
    parts: dict[str, Any] = {}
    """The roles' own reads (Needs.parts) by name; a part that could not be read is absent."""

    def folder_exists(self, path: str) -> bool:
        return path in self.folders

    def unit(self, name: str) -> Unit:
        return self.units.get(name) or Unit()

    def file(self, path: str) -> FileState | None:
        return self.files.get(path)

    @cached_property
    def gpus(self) -> tuple[PcieDevice, ...]:
        """The node's NVIDIA GPUs, found once per snapshot for every check family: those
        lspci lists; where lspci is missing (or listed none), those sysfs shows."""
        found = tuple(d for d in self.pcie if is_nvidia_gpu(d))
        if found or self.pci_sysfs is None:
            return found
        return tuple(d.as_pcie_device() for d in self.pci_sysfs.gpus())

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Snapshot:
        """A copy whose GPU list is found again (pydantic copies the cached one as it is)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("gpus", None)
        return copy
