"""IOMMU and PCIe checks: IOMMU mode, link width and speed, MaxPayload, ACS redirect,
Resizable BAR.

Pure functions of a NodeSnapshot. Rules that keep people from chasing non-problems:
- an idle GPU trains its link down (LnkSta "2.5GT/s (downgraded)"): speed below capability is
  reported ok with a note while nvidia-smi's max link generation reaches the capability; only
  the width is compared hard (a narrower link is a slot, riser or seating problem);
- MaxPayload equal to the device's DevCap is the hardware's limit, not a finding.
"""

from __future__ import annotations

import re

from gpunode.facts.gpu_details import GpuDetails
from gpunode.facts.nvidia import NvidiaGpu
from gpunode.facts.pcie import SPEED_GEN, PcieDevice, is_nvidia_gpu
from gpunode.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.gpu_checks import (
    NOT_READ,
    _no_gpu,
    _smi_for,
    gpu_count,
    gpu_label,
    smi_gpus,
)
from gpunode.roles.audit.snapshot import NodeSnapshot

NO_REBAR_BAR1_MIB = 256
TRANSLATED_DOMAINS = frozenset({"DMA", "DMA-FQ"})

# --- IOMMU -----------------------------------------------------------------------------------

_IOMMU_TOKEN_RE = re.compile(r"^(intel_iommu|amd_iommu|iommu|iommu\.passthrough|iommu\.strict)=")


def iommu_mode(snap: NodeSnapshot) -> tuple[str, str]:
    """(mode, detail): mode is "off", "passthrough", "translated", "vfio" or "unknown"."""
    iommu = snap.iommu
    assert iommu is not None
    if iommu.groups == 0:
        return "off", "0 IOMMU groups"
    gpu_groups = {d.iommu_group for d in snap.gpus if d.iommu_group is not None}
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
    devices = snap.gpus
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
    devices = snap.gpus
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


def _acs_bridges(snap: NodeSnapshot, gpus: tuple[PcieDevice, ...]) -> tuple[list[PcieDevice], bool]:
    """(the ACS-capable bridges above the GPUs, or every one when the topology is unknown;
    whether it is known)."""
    paths = snap.pci_paths or {}
    known = all(d.bdf in paths for d in gpus) and bool(gpus)
    above = {b for d in gpus for b in paths.get(d.bdf, [])} if known else set()
    bridges = [d for d in snap.pcie if d.acs_ctl is not None
               and (not known or d.bdf in above) and not is_nvidia_gpu(d)]
    return bridges, known


def _redirect_bits(device: PcieDevice) -> list[str]:
    return [b for b in _REDIRECT_BITS if (device.acs_ctl or {}).get(b)]


def _acs_fix(fixed: bool) -> str:
    if fixed:
        return (f"{DEPLOY_FIX} (pcie_acs_redirect: off clears them on the bridges above the "
                "pcie_selector devices, now and at boot)")
    return ("set gpunode.pcie_acs_redirect: off (deploy/site.py clears them with a masked "
            "setpci of ECAP_ACS+0x6, now and at boot; not on hosts that pass devices to VMs)")


def check_acs(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """ACS P2P redirection on the bridges above the GPUs (NCCL: redirects GPU peer traffic to
    the root complex: slow or hangs)."""
    name = kind = "PCIe ACS redirect"
    gpus = snap.gpus
    if not gpus and not smi_gpus(snap):
        return [_no_gpu(name, kind)]
    bridges, known = _acs_bridges(snap, gpus)
    unreadable = not snap.pcie or any(d.caps_access_denied for d in snap.pcie)
    if not bridges and unreadable:
        why = ("lspci not installed" if not snap.pcie else
               "lspci could not read the capabilities (not root)")
        return [not_applicable(name, f"unknown: {why}", kind=kind)]
    redirecting = [d for d in bridges if _redirect_bits(d)]
    where = "bridges above the GPUs" if known else "bridges (GPU topology unknown)"
    if not redirecting:
        return [ok(name, f"off on {len(bridges)} ACS-capable {where}", "off", kind=kind)]
    listing = ", ".join(f"{d.bdf} ({'+'.join(_redirect_bits(d))})" for d in redirecting)
    if gpu_count(snap) < 2:
        return [ok(name, f"on at {listing}", kind=kind,
                   note="one GPU: no GPU-to-GPU traffic to redirect")]
    fixed = profile.pcie_acs_redirect == "off"
    return [Check(name=name, status="P0" if known else "P2", live=f"on at {listing}",
                  want="off", fix=_acs_fix(fixed), kind=kind, deploy_fixes=fixed and known,
                  note="" if known else "position of these bridges relative to the GPUs "
                  "unknown (no sysfs topology)")]


def _size_mib(size: str) -> int | None:
    match = re.match(r"^(\d+)([KMGTP]?)B$", size)
    if not match:
        return None
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3, "": 1 / 1024**2}
    return int(int(match.group(1)) * scale[match.group(2)])


def _bar_reading(details: GpuDetails | None, device: PcieDevice | None
                 ) -> tuple[str, bool, int | None] | None:
    """(what was read, BAR1 maps all VRAM, BAR1 MiB) from nvidia-smi, else lspci's sizes;
    None when neither says."""
    bar1 = details.bar1_total_mib if details else None
    fb = details.fb_total_mib if details else None
    if bar1 is not None:
        live = f"BAR1 {bar1} MiB" + (f", VRAM {fb} MiB" if fb else "")
        return live, bar1 > NO_REBAR_BAR1_MIB and (fb is None or bar1 >= fb), bar1
    sizes = list(device.resizable_bar or []) if device else []
    biggest = max((m for m in map(_size_mib, sizes) if m is not None), default=None)
    if biggest is None:
        return None
    return f"BAR sizes {', '.join(sizes)}", biggest > NO_REBAR_BAR1_MIB, None


def _rebar_check(name: str, kind: str, reading: tuple[str, bool, int | None] | None) -> Check:
    if reading is None:
        return not_applicable(
            name, "no BAR1 size read (no nvidia-smi, no Resizable BAR capability in lspci)",
            kind=kind)
    live, large, bar1 = reading
    if large:
        return ok(name, live, "BAR1 maps all VRAM", kind=kind)
    if bar1 is not None and bar1 > NO_REBAR_BAR1_MIB:
        return Check(name=name, status="P2", live=live, want="BAR1 >= VRAM", kind=kind,
                     fix="raise the BAR size in the BIOS (Resizable BAR)")
    return Check(name=name, status="P1", live=live, want="BAR1 >= VRAM", kind=kind,
                 fix="enable Above 4G Decoding and Resizable BAR in the BIOS, then reboot",
                 note="a 256 MiB BAR1 window makes every host<->GPU mapping go through it")


def check_rebar(snap: NodeSnapshot) -> list[Check]:
    """Resizable BAR: BAR1 maps the whole VRAM (nvidia-smi BAR1 total, else lspci sizes)."""
    kind = "Resizable BAR"
    devices = {d.bdf: d for d in snap.gpus}
    bdfs = list(devices) + [g.pci_bdf for g in smi_gpus(snap) if g.pci_bdf not in devices]
    if not bdfs:
        return [_no_gpu(kind, kind)]
    return [_rebar_check(f"{gpu_label(snap, bdf)} Resizable BAR", kind,
                         _bar_reading(snap.gpu_details.get(bdf), devices.get(bdf)))
            for bdf in bdfs]
