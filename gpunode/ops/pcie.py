"""PCIe MaxReadReq: a masked write of Device Control bits 14:12 on selected devices only.

Device Control is CAP_EXP+0x08; bits 14:12 encode 128 << n bytes. The write goes through
setpci's value:mask form, so no other bit changes (bit 15 would start a Function Level Reset).
A device that keeps its old value is recorded under /run/gpunode and reported, not retried on
every run; the boot unit retries once per boot.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpunode.facts.pcie import (
    PcieDevice,
    id_patterns,
    matches,
    unreadable_note,
)
from gpunode.facts.pcie_refusals import REFUSED_DIR
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.shell import script_text
from gpunode.profile.node import MAX_READ_REQUEST_SIZES, PcieSelector

MRRS_MASK = 0x7000
PCI_DEVICES_DIR = "/sys/bus/pci/devices"


def mrrs_bits(size: int) -> int:
    """Device Control bits 14:12 for a MaxReadReq size (4096 -> 0x5000)."""
    if size not in MAX_READ_REQUEST_SIZES:
        raise ValueError(f"{size} is not a MaxReadReq size; allowed: {MAX_READ_REQUEST_SIZES}")
    return MAX_READ_REQUEST_SIZES.index(size) << 12


def setpci_mrrs_argument(size: int) -> str:
    """setpci's masked write of MaxReadReq: 'CAP_EXP+8.w=5000:7000' for 4096."""
    return f"CAP_EXP+8.w={mrrs_bits(size):04x}:{MRRS_MASK:04x}"


def mrrs_sizes_text() -> str:
    """Device Control's MaxReadReq field (bits 14:12, hex) -> bytes, as the scripts look it up:
    '0000=128 1000=256 ... 5000=4096'."""
    return " ".join(f"{mrrs_bits(size):04x}={size}" for size in MAX_READ_REQUEST_SIZES)


def mrrs_script_variables(size: int) -> dict[str, str]:
    """What a shell script needs to write and read MaxReadReq (the shared shell library,
    templates/shell/gpunode-lib.sh.j2): the field's mask, the wanted field, the size table and
    setpci's masked write."""
    return {
        "mrrs_mask": f"0x{MRRS_MASK:04x}",
        "mrrs_want": f"0x{mrrs_bits(size):04x}",
        "mrrs_sizes": mrrs_sizes_text(),
        "setpci_argument": setpci_mrrs_argument(size),
    }


def pcie_script_variables(selector: PcieSelector, size: int) -> dict:
    """The PCIe rules of the boot and verify scripts, as data: the selector's id patterns
    (gpunode.facts.pcie.id_patterns) and the MaxReadReq field; the scripts only iterate."""
    return {
        "pcie_patterns": id_patterns(selector.vendor, selector.device, selector.classes),
        **mrrs_script_variables(size),
    }


def selected_devices(devices: list[PcieDevice], selector: PcieSelector) -> list[PcieDevice]:
    """Devices the selector matches that have a PCI Express capability."""
    return [
        d
        for d in devices
        if d.has_pcie_cap
        and not d.unreadable
        and matches(d, selector.vendor, selector.device, selector.classes)
    ]


def devices_to_write(
    devices: list[PcieDevice], selector: PcieSelector, size: int, refused: dict[str, int]
) -> tuple[list[PcieDevice], list[PcieDevice]]:
    """(devices whose MaxReadReq differs and may be written, devices that refused `size`)."""
    todo: list[PcieDevice] = []
    refusing: list[PcieDevice] = []
    for device in selected_devices(devices, selector):
        if device.devctl_max_read_req == size:
            continue
        (refusing if refused.get(device.bdf) == size else todo).append(device)
    return todo, refusing


def write_and_verify_command(
    bdf: str, size: int, refused_dir: str = REFUSED_DIR, devices_dir: str = PCI_DEVICES_DIR
) -> str:
    """Masked write, read-back, and a per-boot record when the device keeps its value
    (templates/shell/mrrs-write.sh.j2)."""
    return script_text(
        "mrrs-write.sh.j2",
        bdf=bdf,
        size=size,
        refused_dir=refused_dir,
        devices_dir=devices_dir,
        **mrrs_script_variables(size),
    )


def short_bdf(bdf: str) -> str:
    """'0000:41:00.0' -> '41:00.0' (the domain only when it is not 0000)."""
    return bdf[5:] if bdf.startswith("0000:") else bdf


def refusal_note(devices: list[PcieDevice], size: int) -> str:
    return "; ".join(
        f"device {d.bdf} did not accept MaxReadReq={size} (reads {d.devctl_max_read_req})"
        for d in devices
    )


@operation()
def max_read_request(selector: PcieSelector, size: int = 4096):
    """
    Set PCIe MaxReadReq on the devices the selector matches, touching no other bit.

    + selector: vendor / device / classes of the devices to tune
    + size: bytes, one of 128 ... 4096
    """
    selector = PcieSelector.model_validate(selector)
    snapshot = node()
    devices = snapshot.pcie
    todo, refusing = devices_to_write(devices, selector, size, dict(snapshot.mrrs_refused))
    for device in todo:
        report_change(f"setpci {short_bdf(device.bdf)} MaxReadReq",
                      str(device.devctl_max_read_req), str(size), where="runtime; boot unit")
    for device in todo:
        yield StringCommand(write_and_verify_command(device.bdf, size))
    if not todo:
        matched = len(selected_devices(devices, selector))
        note = f"MaxReadReq={size} on {matched} matched device(s)"
        if refusing:
            note = f"{refusal_note(refusing, size)}; nothing else to change"
        unreadable = unreadable_note(devices)
        host.noop(f"{note}; {unreadable}" if unreadable else note)


# --- ACS redirect ------------------------------------------------------------------------

# ACS Control (ECAP_ACS+0x6) bits cleared by pcie_acs_redirect: off. Linux enables SrcValid,
# ReqRedir, CmpltRedir and UpstreamFwd on every ACS-capable port (pci_std_enable_acs); the
# redirect ones send peer-to-peer requests/completions up to the root complex, UpstreamFwd
# forwards them upstream too, and EgressCtrl (never set by Linux, set by some firmware) blocks
# them per port. TransBlk (ATS) and DirectTrans (which *allows* direct P2P) are left alone.
ACS_BITS = {"SrcValid": 0x01, "TransBlk": 0x02, "ReqRedir": 0x04, "CmpltRedir": 0x08,
            "UpstreamFwd": 0x10, "EgressCtrl": 0x20, "DirectTrans": 0x40}
ACS_REDIRECT_BITS = ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl")
ACS_REDIRECT_MASK = sum(ACS_BITS[name] for name in ACS_REDIRECT_BITS)
ACS_P2P_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
"""The bits that divert or block peer traffic (what the audit reports)."""
ACS_CONTROL = "ECAP_ACS+0x6.w"
"""ACS Control, the word setpci reads (the ACS capability's register at offset 6)."""
ACS_SETPCI_ARGUMENT = f"{ACS_CONTROL}=0000:{ACS_REDIRECT_MASK:04x}"


def acs_script_variables() -> dict:
    """What a shell script needs to read and clear the redirect bits: their names, mask, the
    register and setpci's masked write (acs-write.sh.j2, the boot and the verify script)."""
    return {"acs_bits": list(ACS_REDIRECT_BITS), "acs_mask": f"0x{ACS_REDIRECT_MASK:04x}",
            "acs_control": ACS_CONTROL, "acs_setpci_argument": ACS_SETPCI_ARGUMENT}


def acs_redirecting(device: PcieDevice, bits: tuple[str, ...] = ACS_REDIRECT_BITS) -> list[str]:
    """The given ACSCtl bits set on a device ([] without an ACS capability)."""
    return [b for b in bits if (device.acs_ctl or {}).get(b)]


def bridges_above(devices: list[PcieDevice], paths: dict[str, list[str]],
                  selector: PcieSelector) -> list[PcieDevice]:
    """The bridges (switch ports, root ports) between the selected devices and their root
    complex, in lspci order; none for a selected device whose path is unknown."""
    above = {b for d in selected_devices(devices, selector) for b in paths.get(d.bdf, [])}
    return [d for d in devices if d.bdf in above]


def acs_write_command(bdf: str, devices_dir: str = PCI_DEVICES_DIR) -> str:
    """Masked write of the redirect bits of ACS Control, read back; fails naming the bridge
    when a bit stays set (templates/shell/acs-write.sh.j2)."""
    return script_text("acs-write.sh.j2", bdf=bdf, devices_dir=devices_dir,
                       **acs_script_variables())


@operation()
def acs_redirect_off(selector: PcieSelector):
    """
    Clear the ACS redirect bits on the bridges above the selected devices (masked write of
    ECAP_ACS+0x6, read back); no other bridge and no other bit is written.

    + selector: vendor / device / classes of the devices whose upstream bridges are changed
    """
    selector = PcieSelector.model_validate(selector)
    snapshot = node()
    devices = snapshot.pcie
    paths = dict(snapshot.pci_paths or {})
    bridges = [b for b in bridges_above(devices, paths, selector) if b.acs_ctl is not None]
    todo = [b for b in bridges if acs_redirecting(b)]
    for bridge in todo:
        report_change(f"ACS {bridge.bdf}", "+".join(acs_redirecting(bridge)), "redirect off",
                      where="runtime; cleared again at boot by gpunode-tune")
        yield StringCommand(acs_write_command(bridge.bdf))
    if not todo:
        host.noop(f"ACS redirect off on {len(bridges)} ACS-capable bridge(s) above "
                  f"{len(selected_devices(devices, selector))} matched device(s)")
