"""Hardware checks: IOMMU mode, PCIe links, MaxPayload, ACS, Resizable BAR, GPU state, NVLink.

Pure functions of a NodeSnapshot. Rules that keep people from chasing non-problems:
- an idle GPU trains its link down (LnkSta "2.5GT/s (downgraded)"): speed below capability is
  reported ok with a note while nvidia-smi's max link generation reaches the capability; only
  the width is compared hard (a narrower link is a slot, riser or seating problem);
- MaxPayload equal to the device's DevCap is the hardware's limit, not a finding;
- no NVLink is a known limit: custom allreduce stays off and NCCL uses PCIe P2P or SHM.
"""

from __future__ import annotations

import re

from gpunode.roles.audit.facts import GpuDetails
from gpunode.roles.audit.snapshot import NodeSnapshot
from gpunode.roles.facts.nvidia import NvidiaGpu
from gpunode.roles.facts.pcie import PcieDevice
from gpunode.roles.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.roles.profile.node import NodeProfile

GPU_CLASS_NAMES = ("VGA compatible controller", "3D controller", "Display controller")
SPEED_GEN = {"2.5GT/s": 1, "5GT/s": 2, "8GT/s": 3, "16GT/s": 4, "32GT/s": 5, "64GT/s": 6}
NO_REBAR_BAR1_MIB = 256
TEMP_MARGIN_C = 5
TRANSLATED_DOMAINS = frozenset({"DMA", "DMA-FQ"})
HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
               "sw_thermal_slowdown")
NOT_READ = "not read (snapshot without the audit facts)"


# --- which devices are GPUs -------------------------------------------------------------------


def is_nvidia_gpu(device: PcieDevice) -> bool:
    """An NVIDIA display/3D function; by name when lspci ran without -nn (no ids)."""
    if device.unreadable:
        return False
    if device.vendor_id:
        return device.vendor_id == "10de" and device.class_id.startswith("03")
    return device.name.startswith("NVIDIA") and device.class_name in GPU_CLASS_NAMES


def lspci_gpus(snap: NodeSnapshot) -> list[PcieDevice]:
    return [d for d in snap.pcie if is_nvidia_gpu(d)]


def smi_gpus(snap: NodeSnapshot) -> list[NvidiaGpu]:
    return list(snap.nvidia.gpus) if snap.nvidia is not None and snap.nvidia.present else []


def gpu_count(snap: NodeSnapshot) -> int:
    """GPUs seen by lspci, nvidia-smi or nvidia-smi nvlink, whichever sees most."""
    return max(len(lspci_gpus(snap)), len(smi_gpus(snap)), len(snap.nvlink or []))


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
    devices = lspci_gpus(snap)
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


# --- IOMMU -----------------------------------------------------------------------------------

_IOMMU_TOKEN_RE = re.compile(r"^(intel_iommu|amd_iommu|iommu|iommu\.passthrough|iommu\.strict)=")


def iommu_mode(snap: NodeSnapshot) -> tuple[str, str]:
    """(mode, detail): mode is "off", "passthrough", "translated", "vfio" or "unknown"."""
    iommu = snap.iommu
    assert iommu is not None
    if iommu.groups == 0:
        return "off", "0 IOMMU groups"
    gpu_groups = {d.iommu_group for d in lspci_gpus(snap) if d.iommu_group is not None}
    types = iommu.group_types
    relevant = {types[g] for g in gpu_groups if g in types} or set(types.values())
    counts = ", ".join(f"{kind} {n}" for kind, n in iommu.type_counts().items())
    detail = f"{iommu.groups} IOMMU groups" + (f" ({counts})" if counts else "")
    if relevant & TRANSLATED_DOMAINS:
        return "translated", detail
    if relevant == {"unmanaged"}:
        return "vfio", detail
    if relevant and relevant <= {"identity", "unmanaged"}:
        return "passthrough", detail
    return "unknown", detail


def check_iommu(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """IOMMU mode from /sys/kernel/iommu_groups and the booted cmdline."""
    name = "IOMMU mode"
    if snap.iommu is None:
        return [not_applicable(name, NOT_READ, kind=name)]
    mode, detail = iommu_mode(snap)
    tokens = [t for t in snap.cmdline.booted if _IOMMU_TOKEN_RE.match(t)]
    live = f"{mode}: {detail}; cmdline: {' '.join(tokens) or 'no iommu parameter'}"
    if mode == "off":
        # Not a confirmed good value: no IOMMU is active at all (none in the machine, off in
        # the firmware or on the cmdline). Nothing slows GPU DMA, and nothing isolates it.
        return [not_applicable(name, f"{live}: no IOMMU active (GPU DMA is not translated; "
                               "VFIO passthrough to VMs is not possible)", kind=name)]
    if mode == "passthrough":
        return [ok(name, live, "passthrough (iommu=pt)", kind=name)]
    if mode == "vfio":
        return [ok(name, live, kind=name, note="GPU groups are owned by VFIO (VM passthrough)")]
    if mode == "unknown":
        return [Check(name=name, status="P2", live=live, want="passthrough (iommu=pt)",
                      kind=name, fix="look at dmesg: 'Default domain type' (this kernel, "
                      "< 5.11, does not expose the domain type in sysfs)")]
    gpus = gpu_count(snap)
    if gpus == 0:
        return [ok(name, live, kind=name, note="no GPU: translation costs nothing here")]
    in_profile = "iommu" in profile.cmdline
    heavy = gpus >= 2 or bool(snap.kernel.rdma_devices)
    return [Check(
        name=name, status="P1" if heavy else "P2", live=live, want="passthrough (iommu=pt)",
        fix="add iommu=pt to gpunode.cmdline in the profile (deploy/site.py persists it), "
        "then reboot" if not in_profile else "reboot (iommu is in the profile's cmdline)",
        deploy_fixes=in_profile and profile.reboot, kind=name,
        note="translated DMA sends GPU peer-to-peer traffic through the IOMMU (NCCL: slow or "
        "hangs); passthrough keeps VFIO working",
    )]


# --- PCIe: width, speed, MaxPayload, ACS, Resizable BAR ----------------------------------------


def _gen(speed: str | None) -> int | None:
    return SPEED_GEN.get(speed or "")


def check_unreadable_pcie(snap: NodeSnapshot) -> list[Check]:
    """Each lspci block the parser could not read, with its BDF: never dropped unsaid."""
    return [
        Check(name=f"lspci {d.bdf}", status="P2", kind="lspci block",
              live=f"block not readable ({d.unreadable})", want="a readable lspci block",
              fix=f"run `lspci -vvv -nn -D -s {d.bdf}` as root and report the output with "
              "the pciutils version; gpunode does not select or write this device")
        for d in snap.pcie if d.unreadable
    ]


def check_pcie_links(snap: NodeSnapshot) -> list[Check]:
    """Link width against the capability (hard); link speed with the idle-GPU rule."""
    devices = lspci_gpus(snap)
    seen = {d.bdf for d in devices}
    extra = [g for g in smi_gpus(snap) if g.pci_bdf not in seen]
    if not devices and not extra:
        return [_no_gpu("PCIe link", "PCIe link width")]
    checks: list[Check] = []
    for device in devices:
        label = gpu_label(snap, device.bdf)
        smi = _smi_for(snap, device.bdf)
        if device.lnkcap_width is None or device.lnksta_width is None:
            if smi is not None and smi.pcie_width_max is not None:
                checks += _smi_link_checks(label, smi, snap)
                continue
            why = ("capabilities hidden: lspci needs root" if device.caps_access_denied
                   else "no link status in the lspci output")
            checks.append(not_applicable(f"{label} PCIe link", why, kind="PCIe link width"))
            continue
        checks.append(_width_check(label, device.lnksta_width, device.lnkcap_width))
        checks.append(_speed_check(label, device, smi, snap))
    for gpu in extra:
        checks += _smi_link_checks(f"GPU{gpu.index} {gpu.pci_bdf}", gpu, snap)
    return checks


def _width_check(label: str, width: int, cap: int) -> Check:
    name, kind = f"{label} PCIe link width", "PCIe link width"
    live = f"x{width} (capability x{cap})"
    if width >= cap:
        return ok(name, live, f"x{cap}", kind=kind)
    return Check(name=name, status="P1", live=live, want=f"x{cap}", kind=kind,
                 fix="reseat the card; check riser/cable, slot wiring and BIOS bifurcation; "
                 "then reboot (the link trains at boot)",
                 note="the width does not drop at idle: this is physical")


def _speed_check(label: str, device: PcieDevice, smi: NvidiaGpu | None,
                 snap: NodeSnapshot) -> Check:
    name, kind = f"{label} PCIe link speed", "PCIe link speed"
    cap, now = device.lnkcap_speed or "?", device.lnksta_speed or "?"
    live = f"{now} (capability {cap})"
    cap_gen, now_gen = _gen(device.lnkcap_speed), _gen(device.lnksta_speed)
    if cap_gen is None or now_gen is None or now_gen >= cap_gen:
        return ok(name, live, cap, kind=kind)
    details = snap.gpu_details.get(device.bdf)
    idle = details is None or "gpu_idle" in details.active_clock_reasons
    if smi is not None and smi.pcie_gen_current is not None and smi.pcie_gen_current >= cap_gen:
        return ok(name, live, cap, kind=kind,
                  note=f"nvidia-smi reads Gen{smi.pcie_gen_current} now: lspci caught the link "
                  "trained down at an idle moment")
    if smi is not None and smi.pcie_gen_max is not None:
        if smi.pcie_gen_max < cap_gen:
            return Check(name=name, status="P2",
                         live=f"{live}; nvidia-smi max Gen{smi.pcie_gen_max}", want=cap, kind=kind,
                         fix="the platform caps this link below the GPU's capability: check the "
                         "BIOS PCIe speed setting, riser generation and slot",
                         note="nvidia-smi's max link generation is what GPU and slot can reach")
        if idle:
            return ok(name, live, cap, kind=kind,
                      note=f"idle GPU trains down; reaches Gen{smi.pcie_gen_max} under load "
                      "(nvidia-smi max link generation)")
        return Check(name=name, status="P2", live=live, want=cap, kind=kind,
                     fix="busy GPU below its link speed: check under load with "
                     "nvidia-smi -q -d PCIE; reseat or check the riser if it stays low",
                     note="nvidia-smi does not report the GPU idle")
    return Check(name=name, status="P2", live=live, want=cap, kind=kind,
                 fix="confirm under load (nvidia-smi -q -d PCIE) before chasing it",
                 note="idle GPUs train their link down to save power (LnkSta 'downgraded')")


def _smi_link_checks(label: str, gpu: NvidiaGpu, snap: NodeSnapshot) -> list[Check]:
    """Link checks from nvidia-smi alone (lspci could not read the capability)."""
    checks: list[Check] = []
    if gpu.pcie_width_current is not None and gpu.pcie_width_max is not None:
        checks.append(_width_check(label, gpu.pcie_width_current, gpu.pcie_width_max))
    if gpu.pcie_gen_current is not None and gpu.pcie_gen_max is not None:
        name, kind = f"{label} PCIe link speed", "PCIe link speed"
        live = f"Gen{gpu.pcie_gen_current} (max Gen{gpu.pcie_gen_max}, nvidia-smi)"
        details = snap.gpu_details.get(gpu.pci_bdf)
        idle = details is None or "gpu_idle" in details.active_clock_reasons
        if gpu.pcie_gen_current >= gpu.pcie_gen_max or idle:
            note = "" if gpu.pcie_gen_current >= gpu.pcie_gen_max else "idle GPU trains down"
            checks.append(ok(name, live, f"Gen{gpu.pcie_gen_max}", kind=kind, note=note))
        else:
            checks.append(Check(name=name, status="P2", live=live, want=f"Gen{gpu.pcie_gen_max}",
                                kind=kind, fix="check under load (nvidia-smi -q -d PCIE)"))
    return checks


def check_max_payload(snap: NodeSnapshot) -> list[Check]:
    """MaxPayload (DevCtl) against the device's own maximum (DevCap)."""
    kind = "PCIe MaxPayload"
    devices = lspci_gpus(snap)
    if not devices:
        return [_no_gpu(kind, kind)]
    checks = []
    for device in devices:
        name = f"{gpu_label(snap, device.bdf)} PCIe MaxPayload"
        cap, now = device.devcap_max_payload, device.devctl_max_payload
        if cap is None or now is None:
            checks.append(not_applicable(name, "not in the lspci output (lspci needs root)",
                                         kind=kind))
            continue
        live = f"{now} bytes (DevCap {cap} bytes)"
        if now < cap:
            checks.append(Check(
                name=name, status="P2", live=live, want=f"{cap} bytes", kind=kind,
                fix="the kernel set the smallest MPS of the path; pci=pcie_bus_perf on the "
                "cmdline (gpunode.cmdline) raises it where the ports allow, after a reboot",
            ))
        elif cap < 512:
            checks.append(Check(
                name=name, status="limit", live=live, kind=kind,
                fix=f"none: {cap} bytes is the device's maximum (DevCap)",
                note="MaxPayload is capped by the device itself; nothing to tune",
            ))
        else:
            checks.append(ok(name, live, f"{cap} bytes", kind=kind))
    return checks


_REDIRECT_BITS = ("ReqRedir", "CmpltRedir")


def check_acs(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """ACS P2P redirection on the bridges above the GPUs (NCCL: redirects GPU peer traffic to
    the root complex: slow or hangs)."""
    name = kind = "PCIe ACS redirect"
    gpus = lspci_gpus(snap)
    if not gpus and not smi_gpus(snap):
        return [_no_gpu(name, kind)]
    paths = snap.pci_paths or {}
    known = all(d.bdf in paths for d in gpus) and bool(gpus)
    above = {b for d in gpus for b in paths.get(d.bdf, [])} if known else set()
    bridges = [d for d in snap.pcie if d.acs_ctl is not None
               and (not known or d.bdf in above) and not is_nvidia_gpu(d)]
    redirecting = [d for d in bridges if any((d.acs_ctl or {}).get(b) for b in _REDIRECT_BITS)]
    where = "bridges above the GPUs" if known else "bridges (GPU topology unknown)"
    if not redirecting:
        return [ok(name, f"off on {len(bridges)} ACS-capable {where}", "off", kind=kind)]
    listing = ", ".join(
        f"{d.bdf} ({'+'.join(b for b in _REDIRECT_BITS if (d.acs_ctl or {}).get(b))})"
        for d in redirecting
    )
    fixed = profile.pcie_acs_redirect == "off"
    fix = (f"{DEPLOY_FIX} (pcie_acs_redirect: off clears them on the bridges above the "
           "pcie_selector devices, now and at boot)" if fixed else
           "set gpunode.pcie_acs_redirect: off (deploy/site.py clears them with a masked "
           "setpci of ECAP_ACS+0x6, now and at boot; not on hosts that pass devices to VMs)")
    if gpu_count(snap) < 2:
        return [ok(name, f"on at {listing}", kind=kind,
                   note="one GPU: no GPU-to-GPU traffic to redirect")]
    return [Check(name=name, status="P0" if known else "P2", live=f"on at {listing}",
                  want="off", fix=fix, kind=kind, deploy_fixes=fixed and known,
                  note="" if known else "position of these bridges relative to the GPUs "
                  "unknown (no sysfs topology)")]


def _size_mib(size: str) -> int | None:
    match = re.match(r"^(\d+)([KMGTP]?)B$", size)
    if not match:
        return None
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3, "": 1 / 1024**2}
    return int(int(match.group(1)) * scale[match.group(2)])


def check_rebar(snap: NodeSnapshot) -> list[Check]:
    """Resizable BAR: BAR1 maps the whole VRAM (nvidia-smi BAR1 total, else lspci sizes)."""
    kind = "Resizable BAR"
    devices = {d.bdf: d for d in lspci_gpus(snap)}
    bdfs = list(devices) + [g.pci_bdf for g in smi_gpus(snap) if g.pci_bdf not in devices]
    if not bdfs:
        return [_no_gpu(kind, kind)]
    checks = []
    for bdf in bdfs:
        name = f"{gpu_label(snap, bdf)} Resizable BAR"
        details: GpuDetails | None = snap.gpu_details.get(bdf)
        device = devices.get(bdf)
        bar1 = details.bar1_total_mib if details else None
        fb = details.fb_total_mib if details else None
        sizes = [s for s in (device.resizable_bar or [])] if device else []
        biggest = max((m for m in map(_size_mib, sizes) if m is not None), default=None)
        if bar1 is not None:
            live = f"BAR1 {bar1} MiB" + (f", VRAM {fb} MiB" if fb else "")
            large = bar1 > NO_REBAR_BAR1_MIB and (fb is None or bar1 >= fb)
        elif biggest is not None:
            live = f"BAR sizes {', '.join(sizes)}"
            large = biggest > NO_REBAR_BAR1_MIB
        else:
            checks.append(not_applicable(
                name, "no BAR1 size read (no nvidia-smi, no Resizable BAR capability in lspci)",
                kind=kind))
            continue
        if large:
            checks.append(ok(name, live, "BAR1 maps all VRAM", kind=kind))
        elif bar1 is not None and bar1 > NO_REBAR_BAR1_MIB:
            checks.append(Check(name=name, status="P2", live=live, want="BAR1 >= VRAM",
                                kind=kind, fix="raise the BAR size in the BIOS (Resizable BAR)"))
        else:
            checks.append(Check(
                name=name, status="P1", live=live, want="BAR1 >= VRAM", kind=kind,
                fix="enable Above 4G Decoding and Resizable BAR in the BIOS, then reboot",
                note="a 256 MiB BAR1 window makes every host<->GPU mapping go through it"))
    return checks


# --- GPU state from nvidia-smi -q -x --------------------------------------------------------


def _smi_missing(snap: NodeSnapshot, name: str) -> Check:
    if snap.nvidia is None:
        return not_applicable(name, NOT_READ, kind=name)
    if lspci_gpus(snap):
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


def check_nvlink(snap: NodeSnapshot) -> list[Check]:
    """NVLink present or not (`nvidia-smi nvlink -s`)."""
    name = kind = "NVLink"
    if snap.nvlink is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    count = gpu_count(snap)
    if count == 0:
        return [_no_gpu(name, kind)]
    if not snap.nvlink:
        if not smi_gpus(snap):
            return [_smi_missing(snap, name)]
        if count < 2:
            return [not_applicable(name, "one GPU: no GPU-to-GPU link", kind=kind)]
        return [Check(name=name, status="limit", live="nvidia-smi nvlink -s lists no link",
                      kind=kind, fix=f"none: {NO_NVLINK}",
                      note="the hardware has no NVLink; PCIe P2P carries GPU traffic")]
    linked = [g for g in snap.nvlink if g.active_links > 0]
    if count < 2 and len(snap.nvlink) < 2:
        return [not_applicable(name, "one GPU: no GPU-to-GPU link", kind=kind)]
    if not linked:
        message = next((g.message for g in snap.nvlink if g.message), "no active link")
        return [Check(name=name, status="limit", live=f"{len(snap.nvlink)} GPUs: {message}",
                      kind=kind, fix=f"none: {NO_NVLINK}",
                      note="the hardware has no NVLink; PCIe P2P carries GPU traffic")]
    speeds = sorted({g.link_speed_gbs for g in linked if g.link_speed_gbs})
    links = sorted({g.active_links for g in linked})
    live = (f"GPU {', '.join(str(g.index) for g in linked)}: "
            f"{'/'.join(map(str, links))} active links"
            + (f" at {'/'.join(f'{s:g}' for s in speeds)} GB/s" if speeds else ""))
    unlinked = [g for g in snap.nvlink if g.active_links == 0]
    if unlinked:
        return [Check(name=name, status="limit",
                      live=f"{live}; GPU {', '.join(str(g.index) for g in unlinked)}: none",
                      kind=kind,
                      fix="none: keep each tensor-parallel group on NVLinked GPUs; custom "
                      "allreduce needs every GPU of the group linked",
                      note="partial NVLink (bridged pairs): GPUs without a bridge use PCIe")]
    return [ok(name, live, kind=kind)]
