"""GPU checks: which devices are GPUs, their inventory, state (nvidia-smi) and NVLink.

Pure functions of a NodeSnapshot (the IOMMU and PCIe checks: pcie_checks). No NVLink is a
known limit, not a finding: custom allreduce stays off and NCCL uses PCIe P2P or SHM.
"""

from __future__ import annotations

from gpunode.facts.gpu_details import GpuDetails
from gpunode.facts.nvidia import NvidiaGpu
from gpunode.facts.pcie import PcieDevice
from gpunode.profile.check import Check, not_applicable, ok
from gpunode.roles.audit.snapshot import NodeSnapshot

TEMP_MARGIN_C = 5
HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
               "sw_thermal_slowdown")
NOT_READ = "not read (snapshot without the audit facts)"


# --- which devices are GPUs -------------------------------------------------------------------


def lspci_gpus(snap: NodeSnapshot) -> list[PcieDevice]:
    """The node's GPUs, the one list of the snapshot (Snapshot.gpus: lspci's, else sysfs')."""
    return list(snap.gpus)


def smi_gpus(snap: NodeSnapshot) -> list[NvidiaGpu]:
    return list(snap.nvidia.gpus) if snap.nvidia is not None and snap.nvidia.present else []


def gpu_count(snap: NodeSnapshot) -> int:
    """GPUs seen by lspci, nvidia-smi or nvidia-smi nvlink, whichever sees most."""
    return max(len(snap.gpus), len(smi_gpus(snap)), len(snap.nvlink or []))


def gpu_label(snap: NodeSnapshot, bdf: str) -> str:
    """"GPU0 0000:01:00.0" when nvidia-smi knows the BDF, else "GPU 0000:01:00.0"."""
    for gpu in smi_gpus(snap):
        if gpu.pci_bdf == bdf:
            return f"GPU{gpu.index} {bdf}"
    return f"GPU {bdf}"


def _smi_for(snap: NodeSnapshot, bdf: str) -> NvidiaGpu | None:
    return next((g for g in smi_gpus(snap) if g.pci_bdf == bdf), None)


def _no_gpu(name: str, kind: str) -> Check:
    return not_applicable(name, "not present: no NVIDIA GPU on this node", kind=kind)


def check_gpu_inventory(snap: NodeSnapshot) -> list[Check]:
    """Which GPUs the node has and which driver holds them (informational)."""
    devices = snap.gpus
    gpus = smi_gpus(snap)
    if not devices and not gpus:
        return [_no_gpu("GPUs", "GPUs")]
    names: dict[str, int] = {}
    for gpu in gpus or []:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    if not gpus:
        for device in devices:
            names[device.name] = names.get(device.name, 0) + 1
    drivers = sorted({d.driver or "none" for d in devices})
    live = ", ".join(f"{count} x {name}" for name, count in names.items())
    if drivers:
        live += f" (kernel driver: {', '.join(drivers)})"
    note = ""
    if "vfio-pci" in drivers:
        note = "vfio-pci GPUs are passed to VMs: the host cannot use them"
    return [ok("GPUs", live, kind="GPUs", note=note)]


# --- GPU state from nvidia-smi -q -x --------------------------------------------------------


def _smi_missing(snap: NodeSnapshot, name: str) -> Check:
    if snap.nvidia is None:
        return not_applicable(name, NOT_READ, kind=name)
    if snap.gpus:
        why = snap.nvidia.error or "nvidia-smi not installed or printed nothing"
        return not_applicable(name, f"nvidia-smi gave no report: {why} (see NVIDIA driver)",
                              kind=name)
    return _no_gpu(name, name)


def check_gpu_state(snap: NodeSnapshot) -> list[Check]:
    """Temperature, clocks and ECC of each GPU (power limit and persistence mode:
    gpunode.roles.audit.runtime_checks, against the profile)."""
    gpus = smi_gpus(snap)
    if not gpus:
        return [_smi_missing(snap, kind) for kind in
                ("GPU temperature", "GPU clocks", "GPU ECC")]
    checks: list[Check] = []
    for gpu in gpus:
        details = snap.gpu_details.get(gpu.pci_bdf) or GpuDetails(bdf=gpu.pci_bdf)
        label = f"GPU{gpu.index}"
        checks += [
            _temperature(label, gpu, details),
            _clocks(label, gpu, details),
            _ecc(label, gpu, details),
        ]
    return checks


def _temperature(label: str, gpu: NvidiaGpu, details: GpuDetails) -> Check:
    name, kind = f"{label} temperature", "GPU temperature"
    if gpu.temperature_c is None:
        return not_applicable(name, "not reported", kind=kind)
    slow = details.temp_slowdown_c
    live = f"{gpu.temperature_c} C" + (f" (slowdown at {slow} C)" if slow else "")
    if slow is not None and gpu.temperature_c >= slow - TEMP_MARGIN_C:
        return Check(name=name, status="P2", live=live, want=f"< {slow - TEMP_MARGIN_C} C",
                     kind=kind, fix="check cooling: airflow, fan curve, blocked intakes",
                     note="above the slowdown threshold the GPU lowers its clocks")
    return ok(name, live, kind=kind)


def _clocks(label: str, gpu: NvidiaGpu, details: GpuDetails) -> Check:
    name, kind = f"{label} clocks", "GPU clocks"
    if gpu.sm_clock_mhz is None:
        return not_applicable(name, "not reported", kind=kind)
    live = f"SM {gpu.sm_clock_mhz}" + (f"/{gpu.sm_clock_max_mhz}" if gpu.sm_clock_max_mhz else "")
    live += " MHz"
    reasons = [r for r in details.active_clock_reasons if r != "gpu_idle"]
    if reasons:
        live += f"; active: {', '.join(reasons)}"
    if "applications_clocks_setting" in reasons:
        return Check(name=name, status="P0", live=live, want="no clock cap", kind=kind,
                     fix=f"nvidia-smi -i {gpu.index} -rac (reset application clocks; "
                     "not applied by deploy/site.py)")
    throttled = [r for r in reasons if r in HW_THROTTLE]
    if throttled and "gpu_idle" in details.active_clock_reasons:
        return Check(name=name, status="P1", live=live + " at idle", want="no slowdown",
                     kind=kind, fix="slowdown with no load: check cooling, the PSU and power "
                     "cabling (power brake: the board's power-brake signal); reseat, then "
                     "reboot", note="an idle GPU has no reason to slow down")
    if throttled:
        return Check(name=name, status="P2", live=live, want="no slowdown", kind=kind,
                     fix="thermal/power slowdown: check cooling and the PSU/power cabling",
                     note="clocks below max under load come from the listed reasons")
    note = "idle: clocks rise under load" if "gpu_idle" in details.active_clock_reasons else ""
    return ok(name, live, kind=kind, note=note)


def _ecc(label: str, gpu: NvidiaGpu, details: GpuDetails) -> Check:
    name, kind = f"{label} ECC", "GPU ECC"
    if gpu.ecc_mode is None:
        return not_applicable(name, "ECC not supported on this GPU", kind=kind)
    errors = gpu.ecc_errors_uncorrected
    live = f"{gpu.ecc_mode}" + (f", pending {details.ecc_pending}"
                                if details.ecc_pending and details.ecc_pending != gpu.ecc_mode
                                else "")
    live += (f", {errors} volatile uncorrectable errors" if errors is not None
             else ", volatile error counters not reported")
    if errors:
        return Check(name=name, status="P1", live=live, want="0 uncorrectable errors", kind=kind,
                     fix=f"drain GPU{gpu.index}, then reset it (nvidia-smi -r -i {gpu.index}) or "
                     "reboot; check retired pages / remapped rows (nvidia-smi -q -d "
                     "PAGE_RETIREMENT,ROW_REMAPPER)")
    if details.ecc_pending and details.ecc_pending != gpu.ecc_mode:
        return Check(name=name, status="P1", live=live, want=details.ecc_pending, kind=kind,
                     fix="reboot (or reset the idle GPU) to apply the pending ECC mode",
                     pending="reboot")
    return ok(name, live, kind=kind)


# --- NVLink ---------------------------------------------------------------------------------

NO_NVLINK = "no NVLink, custom allreduce off; NCCL over PCIe P2P/SHM"


def _no_active_link(name: str, kind: str, live: str) -> Check:
    return Check(name=name, status="limit", live=live, kind=kind, fix=f"none: {NO_NVLINK}",
                 note="the hardware has no NVLink; PCIe P2P carries GPU traffic")


def _without_nvlink(snap: NodeSnapshot, name: str, kind: str, count: int) -> Check:
    """What an empty `nvidia-smi nvlink -s` means."""
    if not smi_gpus(snap):
        return _smi_missing(snap, name)
    if count < 2:
        return not_applicable(name, "one GPU: no GPU-to-GPU link", kind=kind)
    return _no_active_link(name, kind, "nvidia-smi nvlink -s lists no link")


def _linked_live(linked: list) -> str:
    speeds = sorted({g.link_speed_gbs for g in linked if g.link_speed_gbs})
    links = sorted({g.active_links for g in linked})
    return (f"GPU {', '.join(str(g.index) for g in linked)}: "
            f"{'/'.join(map(str, links))} active links"
            + (f" at {'/'.join(f'{s:g}' for s in speeds)} GB/s" if speeds else ""))


def check_nvlink(snap: NodeSnapshot) -> list[Check]:
    """NVLink present or not (`nvidia-smi nvlink -s`)."""
    name = kind = "NVLink"
    if snap.nvlink is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    count = gpu_count(snap)
    if count == 0:
        return [_no_gpu(name, kind)]
    if not snap.nvlink:
        return [_without_nvlink(snap, name, kind, count)]
    linked = [g for g in snap.nvlink if g.active_links > 0]
    if count < 2 and len(snap.nvlink) < 2:
        return [not_applicable(name, "one GPU: no GPU-to-GPU link", kind=kind)]
    if not linked:
        message = next((g.message for g in snap.nvlink if g.message), "no active link")
        return [_no_active_link(name, kind, f"{len(snap.nvlink)} GPUs: {message}")]
    live = _linked_live(linked)
    unlinked = [g for g in snap.nvlink if g.active_links == 0]
    if unlinked:
        return [Check(name=name, status="limit",
                      live=f"{live}; GPU {', '.join(str(g.index) for g in unlinked)}: none",
                      kind=kind,
                      fix="none: keep each tensor-parallel group on NVLinked GPUs; custom "
                      "allreduce needs every GPU of the group linked",
                      note="partial NVLink (bridged pairs): GPUs without a bridge use PCIe")]
    return [ok(name, live, kind=kind)]
