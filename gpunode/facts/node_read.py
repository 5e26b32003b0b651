"""The one read: every part a run's `Needs` name, in one remote command (`NodeRead`), each
part's own command between markers, each parsed by its own pure parser, shaped into the
`Snapshot` (gpunode.facts.snapshot). Parts that read the same source read it once: one
dpkg-query for packages, holds, kernels and headers; one module read for the driver version
and the audit's flavours; one `systemctl show` for the units and the audit's persistenced.
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase, StringCommand
from pyinfra.facts.files import FileContents

from gpunode.facts.audit import (
    NVIDIA_PACKAGE_PATTERNS,
    PERSISTENCED_UNIT,
    AuditExtras,
    AuditFacts,
    audit_text,
)
from gpunode.facts.boot_modules import HEADER_PATTERNS, BootModules, KernelModuleTrees
from gpunode.facts.cmdline import KernelCmdline
from gpunode.facts.cpu import CpuPower
from gpunode.facts.dpkg import DebianPackages, DpkgDatabase
from gpunode.facts.engine_read import EngineProcesses
from gpunode.facts.gpu_health import KernelXids, PciSysfs
from gpunode.facts.kernel_params import KernelParams
from gpunode.facts.kernels import KERNEL_PATTERNS, RunningKernel, parse_kernel_packages
from gpunode.facts.lock import NodeLock
from gpunode.facts.nvidia import NvidiaSmi
from gpunode.facts.nvidia_devices import HostNvidiaNodes
from gpunode.facts.nvidia_modules import NvidiaKernelModule, NvidiaModuleState
from gpunode.facts.nvidia_params import NvidiaModuleParams
from gpunode.facts.owned import DirEntries, KeptOriginals, OwnedFiles, RecordedState
from gpunode.facts.pcie import PcieDevices, PciPaths
from gpunode.facts.pcie_refusals import MaxReadReqRefusals
from gpunode.facts.proxmox import ProxmoxBootTool, PveVersionFact
from gpunode.facts.snapshot_model import Needs, Snapshot
from gpunode.facts.systemd import SystemdUnits, parse_units

SYSTEMD_RUNTIME = "/run/systemd/system"
"""Exists only when systemd is PID 1 (sd_booted)."""

def reads_dpkg(needs: Needs) -> bool:
    return bool(needs.packages or needs.candidates or needs.holds or needs.kernels
                or needs.audit)


def dpkg_patterns(needs: Needs) -> list[str]:
    """The package names the run's one dpkg read keeps (besides the held ones)."""
    kernels = (*KERNEL_PATTERNS, *HEADER_PATTERNS) if needs.kernels or needs.audit else ()
    audit = NVIDIA_PACKAGE_PATTERNS if needs.audit else ()
    return sorted({*needs.packages, *needs.candidates, *kernels, *audit})


def sections(needs: Needs) -> dict[str, tuple[type[FactBase], dict[str, Any]]]:
    """Each part the read holds: name -> (the fact whose command and parser it uses, its
    arguments). Always the node's tuning state; the rest as the needs say."""
    parts: dict[str, tuple[type[FactBase], dict[str, Any]]] = {
        **({"lock": (NodeLock, {})} if needs.lock else {}),
        "cmdline": (KernelCmdline, {}),
        "cpu": (CpuPower, {}),
        "kernel": (KernelParams, {"sysctl_keys": list(needs.sysctl_keys),
                                  "modules": list(needs.modules)}),
        "pcie": (PcieDevices, {}),
        "mrrs_refused": (MaxReadReqRefusals, {}),
        "pci_paths": (PciPaths, {}),
        "folders": (DirEntries, {"paths": [SYSTEMD_RUNTIME, *needs.folders]}),
    }
    optional: list[tuple[bool, str, type[FactBase], dict[str, Any]]] = [
        (bool(needs.files), "files", OwnedFiles, {"paths": list(needs.files)}),
        (bool(needs.originals), "originals", KeptOriginals, {"paths": list(needs.originals)}),
        (bool(needs.units) or needs.audit, "units", SystemdUnits,
         {"services": sorted({*needs.units, *((PERSISTENCED_UNIT,) if needs.audit else ())})}),
        (reads_dpkg(needs), "dpkg", DebianPackages,
         {"patterns": dpkg_patterns(needs), "wanted": list(needs.candidates)}),
        (needs.record, "recorded", RecordedState, {}),
        (needs.nvidia or needs.audit, "nvidia", NvidiaSmi, {}),
        (needs.nvidia or needs.nvidia_module or needs.audit, "nvidia_module",
         NvidiaKernelModule, {}),
        (needs.kernels or needs.audit, "running_kernel", RunningKernel, {}),
        (needs.kernels or needs.audit, "pve", PveVersionFact, {}),
        (needs.kernels, "boot_tool", ProxmoxBootTool, {}),
        (needs.kernels or needs.audit, "boot_modules", KernelModuleTrees, {}),
        (bool(needs.module_params), "module_params", NvidiaModuleParams,
         {"params": list(needs.module_params)}),
        (needs.audit, "xids", KernelXids, {}),
        (needs.audit, "pci_sysfs", PciSysfs, {}),
        (needs.audit, "nvidia_nodes", HostNvidiaNodes, {}),
        (needs.audit, "audit", AuditFacts, {}),
        (needs.audit, "engines", EngineProcesses, {}),
    ]
    parts.update({name: (fact, kwargs) for wanted, name, fact, kwargs in optional if wanted})
    parts.update({f"contents:{path}": (FileContents, {"path": path}) for path in needs.contents})
    parts.update({f"part:{part.name}": (part.fact, dict(part.kwargs)) for part in needs.parts})
    return parts


BEGIN = "@@gpunode-read:begin:"
END = "@@gpunode-read:end:"
MISSING_COMMAND = "@@gpunode-read:missing-command"


def _call(attribute: Any, kwargs: dict[str, Any]) -> Any:
    return attribute(**kwargs) if callable(attribute) else attribute


def section_command(name: str, fact: type[FactBase], kwargs: dict[str, Any]) -> StringCommand:
    """Begin marker, the fact's own command (guarded by its requires_command as pyinfra guards
    it; stderr dropped), then an end marker with its exit status. The command runs in the
    read's own shell, not a subshell (a process each under TCG): a fact whose command ends its
    shell (`exit`) or must not share its variables wraps itself in `( )` (NodeLock)."""
    instance = fact()
    command = _call(instance.command, kwargs)
    required = _call(instance.requires_command, kwargs)
    body = StringCommand("{", command, "\n}") if not required else StringCommand(
        "if", "command", "-v", required, ">/dev/null", "2>&1;", "then", "{", command, "\n};",
        "else", "echo", f"'{MISSING_COMMAND}';", "fi")
    return StringCommand(f"echo {shlex.quote(BEGIN + name)};", "{", body, "2>/dev/null;", "}",
                         f"; s=$?; printf '\\n{END}%s\\n' \"$s\"")


def split_sections(lines: list[str]) -> dict[str, tuple[int, list[str]]]:
    """Output lines of NodeRead -> name -> (exit status, lines); unterminated parts dropped."""
    found: dict[str, tuple[int, list[str]]] = {}
    name: str | None = None
    body: list[str] = []
    for line in lines:
        if line.startswith(BEGIN):
            name, body = line[len(BEGIN):], []
        elif line.startswith(END) and name is not None:
            if body and body[-1] == "":  # the printf's newline
                body = body[:-1]
            found[name] = (int(line[len(END):] or 1), body)
            name = None
        elif name is not None:
            body.append(line)
    return found


_NO_VALUE = object()


def section_value(fact: type[FactBase], kwargs: dict[str, Any], status: int,
                  lines: list[str]) -> Any:
    """What host.get_fact(fact, **kwargs) returns for this output (_NO_VALUE: it failed)."""
    instance = fact()
    if status != 0:
        return _NO_VALUE
    if not lines or lines == [MISSING_COMMAND]:
        return instance.default()
    _call(instance.command, kwargs)  # some facts keep their arguments for process()
    try:
        return instance.process(lines)
    except Exception:  # noqa: BLE001 - a part that can't be parsed is a part not read
        return _NO_VALUE


def snapshot_values(needs: Needs, lines: list[str]) -> dict[str, Any]:
    """The NodeRead output as the Snapshot's fields."""
    parts = sections(needs)
    raw = split_sections(lines)
    values: dict[str, Any] = {}
    for name, (fact, kwargs) in parts.items():
        status, body = raw.get(name, (1, []))
        if name == "audit":
            body = audit_text(body, {other: raw.get(other, (1, []))[1] for other in raw})
        value = section_value(fact, kwargs, status, body)
        if value is not _NO_VALUE and value is not None:  # None: the Snapshot's default
            values[name] = value
    return shaped(values, needs)


def from_dpkg(db: DpkgDatabase, needs: Needs, values: dict[str, Any]) -> dict[str, Any]:
    """The Snapshot's fields the one dpkg read gives: packages, candidates, holds, kernels,
    kernel headers, NVIDIA packages."""
    out: dict[str, Any] = {"packages": db.installed(needs.packages),
                           "candidates": db.candidates, "holds": db.holds()}
    if needs.kernels or needs.audit:
        out["kernels"] = parse_kernel_packages(values.get("running_kernel", ""),
                                               db.query_lines(KERNEL_PATTERNS),
                                               "\n".join(db.holds()))
        trees = values.get("boot_modules", BootModules())
        out["boot_modules"] = trees.model_copy(
            update={"headers": sorted(db.installed(HEADER_PATTERNS))})
    if needs.audit:
        out["driver_packages"] = db.installed(NVIDIA_PACKAGE_PATTERNS)
    return out


def from_module(module: NvidiaModuleState, needs: Needs) -> dict[str, Any]:
    """The loaded driver's version and the audit's module flavours, from the one module read."""
    out: dict[str, Any] = {"driver_loaded": module.loaded_version}
    if not needs.nvidia_module:
        out["nvidia_module"] = None  # read for driver_loaded and the audit only
    if needs.audit:
        out["driver_open"] = (None if module.loaded_flavour is None
                              else module.loaded_flavour == "open")
        out["module_installed_flavour"] = module.installed_flavour
    return out


def shaped(values: dict[str, Any], needs: Needs) -> dict[str, Any]:
    """The parts' values under the Snapshot's field names."""
    out = {name: value for name, value in values.items()
           if name not in ("audit", "units", "dpkg", "running_kernel") and ":" not in name}
    if "dpkg" in values:
        out.update(from_dpkg(values["dpkg"], needs, values))
    if "nvidia_module" in values:
        out.update(from_module(values["nvidia_module"], needs))
    for prefix in ("contents", "part"):
        out["parts" if prefix == "part" else prefix] = {
            name.split(":", 1)[1]: value for name, value in values.items()
            if name.startswith(f"{prefix}:")}
    if "units" in values:
        out["units"] = parse_units(values["units"])
    recorded = values.get("recorded")
    if isinstance(recorded, dict) and "damaged" in recorded:
        out["record_damaged"] = str(recorded["damaged"])
        del out["recorded"]
    if "audit" in values:
        extras: AuditExtras = values["audit"]
        out.update(extras.snapshot_fields())
    return out


class NodeRead(FactBase):
    """Everything the needs name, in one command (see sections()); a `Snapshot`."""

    @staticmethod
    def default() -> Snapshot:
        return Snapshot()

    def command(self, needs: Needs | None = None) -> StringCommand:
        # pyinfra calls command() then process() on one instance (as its Sha1File does)
        self.needs = needs or Needs()
        parts = sections(self.needs)
        return StringCommand(*[piece for name, (fact, kwargs) in parts.items()
                               for piece in (section_command(name, fact, kwargs), ";")], "true")

    def process(self, output: list[str]) -> Snapshot:
        return Snapshot.model_validate(snapshot_values(getattr(self, "needs", Needs()), output))
