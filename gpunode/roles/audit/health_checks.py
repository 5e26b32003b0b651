"""GPU health and the boot lifecycle: Xid events since boot, remapped rows and retired pages,
PCIe errors (AER counters, replays), links trained below what GPU and port both support,
pciutils missing, containers whose GPU device nodes the host lacks, the next boot's NVIDIA
module, and the driver's module options.

Pure functions of a NodeSnapshot. A GPU is named by its BDF as the kernel log names it.
"""

from __future__ import annotations

from gpunode.facts.boot_modules import boot_module_problem
from gpunode.facts.gpu_details import GpuDetails
from gpunode.facts.gpu_health import (
    LINK_NARROW_STATUS,
    LINK_SLOW_STATUS,
    REPAIR_PENDING_STATUS,
    XID_STATUS,
    SysfsPciDevice,
    XidEvent,
)
from gpunode.facts.pcie import SPEED_GEN
from gpunode.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.profile.node import NodeProfile
from gpunode.profile.nvidia_options import live_matches, module_param_key
from gpunode.roles.audit.gpu_checks import NOT_READ, gpu_label, smi_gpus
from gpunode.roles.audit.snapshot import NodeSnapshot

XID_FIX = {
    "critical": "drain the GPU, reset it (nvidia-smi -r -i N) or reboot; if it comes back, "
                "suspect the hardware (reseat, power, RMA)",
    "error": "an application or driver fault: read the workload's log; repeated on one GPU "
             "only, suspect the hardware",
}
SEVERITY_RANK = {"critical": 2, "error": 1, "info": 0}
NODES_UNIT = "gpunode-nvidia-nodes.service"


# --- Xid ------------------------------------------------------------------------------------


def _xid_summary(events: list[XidEvent]) -> str:
    counts: dict[int, int] = {}
    for event in events:
        counts[event.xid] = counts.get(event.xid, 0) + 1
    return "; ".join(f"Xid {xid} x{n} ({XidEvent(bdf='', xid=xid).meaning})"
                     for xid, n in sorted(counts.items()))


def check_xids(snap: NodeSnapshot) -> list[Check]:
    """NVRM Xid events of this boot, one row per GPU that logged any."""
    name = kind = "GPU Xid events"
    log = snap.xids
    if log is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    if log.source == "none":
        return [not_applicable(name, "kernel log not readable (no journal, dmesg refused)",
                               kind=kind)]
    if not log.events:
        return [ok(name, f"none since boot ({log.source})", "no Xid", kind=kind)]
    checks = []
    for bdf, events in sorted(log.by_gpu().items()):
        worst = max((e.severity for e in events), key=lambda s: SEVERITY_RANK.get(s, 1))
        live = f"{len(events)} since boot: {_xid_summary(events)}"
        label = f"{gpu_label(snap, bdf)} Xid events"
        if XID_STATUS.get(worst, "P2") == "ok":
            checks.append(ok(label, live, kind=kind, note="follow-up events only"))
            continue
        checks.append(Check(name=label, status=XID_STATUS.get(worst, "P2"), live=live,
                            want="no Xid", kind=kind, fix=XID_FIX.get(worst, XID_FIX["error"]),
                            note=f"first: {events[0].detail[:120]}"))
    if log.total > len(log.events):
        checks.append(Check(name="GPU Xid events (more)", status="P2", kind=kind,
                            live=f"{log.total} Xid lines, the first {len(log.events)} read",
                            fix="journalctl -k -b | grep 'NVRM: Xid'"))
    return checks


# --- memory repair ----------------------------------------------------------------------------


def _memory_repair(label: str, details: GpuDetails) -> Check:
    name, kind = f"{label} memory repair", "GPU memory repair"
    rows, pages = details.remapped_rows, details.retired_pages
    if rows is not None:
        live = (f"remapped rows: {rows.correctable or 0} correctable, "
                f"{rows.uncorrectable or 0} uncorrectable; "
                f"pending {'yes' if rows.pending else 'no'}, "
                f"failure {'yes' if rows.failure else 'no'}")
        if rows.failure:
            return Check(name=name, status="P0", live=live, want="no remap failure", kind=kind,
                         fix="the GPU ran out of spare rows: take it out of service (RMA)")
        if rows.pending:
            return Check(name=name, status=REPAIR_PENDING_STATUS, live=live,
                         want="no pending remap", kind=kind,
                         fix="drain the GPU, then reset it (nvidia-smi -r) or reboot to apply "
                         "the remap", pending="reboot")
        return ok(name, live, kind=kind)
    if pages is not None:
        live = (f"retired pages: {pages.single_bit or 0} single-bit, {pages.double_bit or 0} "
                f"double-bit; pending {'yes' if pages.pending else 'no'}")
        if pages.pending:
            return Check(name=name, status=REPAIR_PENDING_STATUS, live=live,
                         want="no pending retirement",
                         kind=kind, fix="drain the GPU, then reboot (or reset it) to retire "
                         "the pages", pending="reboot")
        return ok(name, live, kind=kind)
    return not_applicable(name, "neither row remapping nor page retirement reported",
                          kind=kind)


def check_memory_repair(snap: NodeSnapshot) -> list[Check]:
    """Remapped rows (Ampere and newer) or retired pages (older) of each GPU."""
    return [_memory_repair(f"GPU{gpu.index}",
                           snap.gpu_details.get(gpu.pci_bdf) or GpuDetails(bdf=gpu.pci_bdf))
            for gpu in smi_gpus(snap)]


# --- PCIe errors and links (sysfs) ----------------------------------------------------------


def _upstream_port(snap: NodeSnapshot, bdf: str) -> SysfsPciDevice | None:
    sysfs = snap.pci_sysfs
    path = (snap.pci_paths or {}).get(bdf) or []
    return sysfs.devices.get(path[-1]) if sysfs is not None and path else None


def _aer_check(snap: NodeSnapshot, gpu: SysfsPciDevice) -> Check:
    label = gpu_label(snap, gpu.bdf)
    name, kind = f"{label} PCIe errors", "GPU PCIe errors"
    port = _upstream_port(snap, gpu.bdf)
    parts, worst = [], 0
    for device, who in ((gpu, "GPU"), (port, f"port {port.bdf}" if port else "")):
        if device is None:
            continue
        for file, rank in (("aer_dev_fatal", 3), ("aer_dev_nonfatal", 2),
                           ("aer_dev_correctable", 1)):
            total = device.aer_total(file)
            if total:
                parts.append(f"{who} {file.removeprefix('aer_dev_')} {total}")
                worst = max(worst, rank)
    replays = (snap.gpu_details.get(gpu.bdf) or GpuDetails(bdf=gpu.bdf)).replay_counter
    if replays:
        parts.append(f"{replays} replays (nvidia-smi)")
        worst = max(worst, 1)
    if not parts:
        return ok(name, "no AER error counted, no replays", kind=kind)
    return Check(name=name, status="P1" if worst >= 2 else "P2", live="; ".join(parts),
                 want="0", kind=kind,
                 fix="uncorrectable errors: reseat the card and riser, check the slot; "
                 "correctable ones growing between audits point at signal integrity (riser, "
                 "cable, Gen speed in the BIOS)" if worst >= 2 else
                 "watch whether they grow between audits; if so reseat or lower the link "
                 "generation in the BIOS")


def check_pcie_errors(snap: NodeSnapshot) -> list[Check]:
    """AER counters of each GPU and its upstream port (sysfs), and the GPU's replay count."""
    if snap.pci_sysfs is None:
        return [not_applicable("GPU PCIe errors", NOT_READ, kind="GPU PCIe errors")]
    return [_aer_check(snap, gpu) for gpu in snap.pci_sysfs.gpus()]


def _gen(speed: str | None) -> int | None:
    return SPEED_GEN.get(speed or "")


def _link_check(snap: NodeSnapshot, gpu: SysfsPciDevice) -> Check | None:
    port = _upstream_port(snap, gpu.bdf)
    label = gpu_label(snap, gpu.bdf)
    name, kind = f"{label} PCIe link vs port", "GPU PCIe link vs port"
    if port is None or gpu.link_width is None or gpu.max_link_width is None:
        return None
    widths = [w for w in (gpu.max_link_width, port.max_link_width) if w]
    gens = [g for g in (_gen(gpu.max_link_speed), _gen(port.max_link_speed)) if g]
    width_both, gen_both = min(widths), min(gens) if gens else None
    now_gen = _gen(gpu.link_speed)
    live = (f"{gpu.link_speed or '?'} x{gpu.link_width}; both ends support "
            f"Gen{gen_both or '?'} x{width_both} (GPU {gpu.max_link_speed} x{gpu.max_link_width}"
            f", port {port.bdf} {port.max_link_speed} x{port.max_link_width})")
    if gpu.link_width < width_both:
        return Check(name=name, status=LINK_NARROW_STATUS, live=live, want=f"x{width_both}",
                     kind=kind,
                     fix="reseat the card; check riser/cable, slot wiring and BIOS "
                     "bifurcation; then reboot (the link trains at boot)",
                     note="a narrower link is physical: it does not drop at idle")
    if gen_both and now_gen and now_gen < gen_both:
        details = snap.gpu_details.get(gpu.bdf)
        if details is None or "gpu_idle" in details.active_clock_reasons:
            return ok(name, live, kind=kind, note="idle GPUs train their speed down")
        return Check(name=name, status=LINK_SLOW_STATUS, live=live, want=f"Gen{gen_both}",
                     kind=kind,
                     fix="busy GPU below the speed both ends support: check under load "
                     "(nvidia-smi -q -d PCIE), the BIOS link speed and the riser")
    return ok(name, live, kind=kind)


def check_links_vs_port(snap: NodeSnapshot) -> list[Check]:
    """Each GPU's link (sysfs) against the lower of its own and its upstream port's maximum."""
    if snap.pci_sysfs is None:
        return []
    return [c for gpu in snap.pci_sysfs.gpus() if (c := _link_check(snap, gpu)) is not None]


def check_pciutils(snap: NodeSnapshot) -> list[Check]:
    """lspci missing: PCIe capabilities can't be read; the GPUs come from sysfs."""
    sysfs = snap.pci_sysfs
    if sysfs is None or sysfs.lspci:
        return []
    gpus = ", ".join(g.bdf for g in sysfs.gpus()) or "none"
    return [Check(name="pciutils (lspci)", status="P2", kind="pciutils",
                  live=f"not installed: MaxReadReq, MaxPayload, ACS and link capabilities "
                  f"can't be read; GPUs from sysfs: {gpus}", want="installed",
                  fix=f"apt install pciutils ({DEPLOY_FIX})", deploy_fixes=True)]


# --- device nodes, next boot, module options --------------------------------------------------


def check_container_device_nodes(snap: NodeSnapshot) -> list[Check]:
    """Containers configured with GPU lines whose device nodes the host lacks."""
    if snap.containers is None or snap.nvidia_nodes is None:
        return []
    host_nodes = set(snap.nvidia_nodes)
    checks = []
    for ct in snap.containers:
        if not ct.device_paths:
            continue
        name, kind = f"CT {ct.vmid} GPU device nodes", "container GPU device nodes"
        missing = [p for p in ct.device_paths if p not in host_nodes]
        if not missing:
            checks.append(ok(name, f"{len(ct.device_paths)} on the host", kind=kind))
            continue
        checks.append(Check(
            name=name, status="P0", live=f"missing on the host: {', '.join(missing)}",
            want="present before the container starts", kind=kind,
            fix=f"nvidia-modprobe -u -c=0 now; at boot {NODES_UNIT} (deploy/site.py) makes "
            "them before pve-guests.service", deploy_fixes=True))
    return checks


def next_boot_kernel(snap: NodeSnapshot, grub_default: str | None) -> str | None:
    """The kernel the next boot starts: Proxmox's pin, GRUB_DEFAULT's, else the newest."""
    kernels = snap.kernels
    return snap.boot_pinned or grub_default or (kernels.newest if kernels else None) or (
        kernels.running if kernels else None)


def check_next_boot_module(snap: NodeSnapshot, grub_default: str | None) -> list[Check]:
    """The default boot kernel has the NVIDIA module (and on Proxmox its headers)."""
    name = kind = "next boot NVIDIA module"
    if snap.boot_modules is None or snap.kernels is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    if snap.driver_loaded is None:
        return [not_applicable(name, "no NVIDIA driver loaded", kind=kind)]
    version = next_boot_kernel(snap, grub_default)
    if not version:
        return [not_applicable(name, "next boot kernel unknown", kind=kind)]
    proxmox = bool(snap.pve and snap.pve.present)
    problem = boot_module_problem(version, snap.boot_modules, proxmox)
    if problem is None:
        return [ok(name, f"{version} has the NVIDIA module", kind=kind)]
    live, _, fix = problem.partition(" Fix: ")
    return [Check(name=name, status="P1", live=f"next boot has no NVIDIA module: {live}",
                  want="module built for the next kernel", fix=fix, kind=kind)]


def check_module_options(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Each nvidia_module_options value against the loaded module's."""
    checks = []
    for option, want in profile.nvidia_module_options.items():
        name, kind = f"NVIDIA option {option}", "NVIDIA module option"
        live = snap.module_params.get(module_param_key(option))
        if live_matches(option, want, live):
            checks.append(ok(name, str(live), str(want), kind=kind))
        else:
            checks.append(Check(name=name, status="P1", live=live or "not loaded / not read",
                                want=str(want), kind=kind, pending="reboot",
                                fix="pending driver reload / reboot (the option is read when "
                                f"the module loads; {DEPLOY_FIX} writes modprobe.d)",
                                deploy_fixes=profile.reboot))
    return checks
