"""GPU health the audit reads: NVIDIA Xid events since boot and the PCI devices' sysfs (ids,
NUMA node, link speed/width, AER counters); their models and pure parsers.

- `KernelXids`: the kernel log of this boot (`journalctl -k -b`; `dmesg` where journald holds
  no kernel log), NVRM Xid lines only, the first XID_LINES_KEPT of them and their total.
  Only the NVIDIA driver's "NVRM: Xid (PCI:0000:3b:00): 79, ..." lines count: other drivers
  print "XID" too (r8169: "unknown chip XID 6c0").
- `PciSysfs`: for every display controller (class 0x03) and PCI bridge (0x0604): vendor,
  device, class, numa_node, current/max link speed and width, and the AER counters that are
  not 0; and whether lspci (pciutils) is installed. sysfs needs neither root nor pciutils, so
  the audit still sees the GPUs where lspci is missing.
"""

from __future__ import annotations

import re

from pydantic import Field
from pyinfra.api import FactBase

from gpunode.facts.pcie import PcieDevice, normalize_bdf
from gpunode.facts.sections import FactModel, grep_lines_command
from gpunode.profile.check import Status

XID_LINES_KEPT = 200
NVIDIA_VENDOR = "10de"
GPU_CLASS = "03"
"""An NVIDIA GPU: vendor 10de, base class 03 (display: VGA, 3D, other)."""

#: Xid -> (meaning, severity). Severity: "critical" (drain the GPU, reset or reboot; hardware
#: suspect), "error" (a fault of one application or context, look if it repeats), "info".
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (application fault or GPU memory error)", "error"),
    31: ("GPU memory page fault (MMU fault: application bug or driver)", "error"),
    43: ("GPU stopped processing: a channel was reset (application fault)", "error"),
    45: ("preemptive cleanup after an earlier error (follows another Xid)", "info"),
    48: ("double-bit ECC error (uncorrectable memory error)", "critical"),
    61: ("internal micro-controller breakpoint/warning (PMU)", "critical"),
    62: ("internal micro-controller halt (PMU)", "critical"),
    63: ("ECC page retirement or row remap recorded", "critical"),
    64: ("ECC page retirement or row remap failure", "critical"),
    74: ("NVLink error", "critical"),
    79: ("GPU has fallen off the bus", "critical"),
    92: ("high single-bit ECC error rate", "critical"),
    93: ("non-fatal violation of provisioned InfoROM wear limit", "error"),
    94: ("contained ECC error (the affected application was stopped)", "error"),
    95: ("uncontained ECC error (every application on the GPU is affected)", "critical"),
    119: ("GSP RPC timeout (GPU System Processor not answering)", "critical"),
    120: ("GSP error", "critical"),
}

#: Xid severity -> the check's status: critical is fixed now, an error looked at if it repeats,
#: info (follow-up events) is no finding; an Xid not in XID_MEANINGS counts as an error.
XID_STATUS: dict[str, Status] = {"critical": "P0", "error": "P2", "info": "ok"}

REPAIR_PENDING_STATUS: Status = "P0"
"""A row remap or page retirement that waits for a GPU reset: drain the GPU and reset it."""
LINK_NARROW_STATUS: Status = "P1"
"""A GPU link narrower than both ends support: physical (reseat, riser, bifurcation), trained
at boot."""
LINK_SLOW_STATUS: Status = "P2"
"""A busy GPU's link slower than both ends support (idle GPUs train their speed down)."""

XID_MARKER = "NVRM: Xid"
"""What every NVIDIA Xid line holds (fixed text): the first filter of the audit and the timer."""
XID_ERE = (XID_MARKER + r" \((PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
           r"(\.[0-7])?)\): *([0-9]+),")
"""An Xid line's GPU address (group 2) and Xid (group 4): a POSIX extended regular expression
that Python's re reads the same way, so the verify timer's sed (XID_SED) and parse_xid_lines
take the same lines and numbers."""
XID_SED = rf"s/.*{XID_ERE}.*/\2 \4/p"
"""`sed -n -E XID_SED`: "ADDRESS XID" for each Xid line (the verify timer)."""
_XID_RE = re.compile(XID_ERE + r"\s*(.*)$")
_TOTAL_RE = re.compile(r"^total=(\d+)$")


class XidEvent(FactModel):
    bdf: str
    """The GPU's function 0 ("0000:3b:00.0"; the driver prints domain:bus:device)."""
    xid: int
    detail: str = ""
    """The rest of the line (pid, process name, the driver's text)."""

    @property
    def meaning(self) -> str:
        return XID_MEANINGS.get(self.xid, ("see NVIDIA's Xid catalogue", ""))[0]

    @property
    def severity(self) -> str:
        return XID_MEANINGS.get(self.xid, ("", "error"))[1]


class XidLog(FactModel):
    source: str = "none"
    """Where the lines came from: "journal", "dmesg" or "none" (no kernel log readable)."""
    events: list[XidEvent] = Field(default_factory=list)
    total: int = 0
    """Xid lines in this boot's log (events holds the first XID_LINES_KEPT)."""

    def by_gpu(self) -> dict[str, list[XidEvent]]:
        out: dict[str, list[XidEvent]] = {}
        for event in self.events:
            out.setdefault(event.bdf, []).append(event)
        return out


def _xid_bdf(address: str) -> str:
    return normalize_bdf(address if "." in address else f"{address}.0")


def parse_xid_lines(text: str) -> XidLog:
    """The KernelXids output (or any kernel log text) -> the NVRM Xid events in it."""
    source, total, events = "none", None, []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("source="):
            source = line.split("=", 1)[1] or "none"
            continue
        counted = _TOTAL_RE.match(line)
        if counted:
            total = int(counted.group(1))
            continue
        match = _XID_RE.search(line)
        if match:
            events.append(XidEvent(bdf=_xid_bdf(match.group(2)), xid=int(match.group(4)),
                                   detail=match.group(5).strip()))
    return XidLog(source=source, events=events, total=len(events) if total is None else total)


class KernelXids(FactBase):
    """This boot's NVRM Xid lines (bounded); an `XidLog`."""

    @staticmethod
    def default() -> XidLog:
        return XidLog()

    def command(self) -> str:
        """One journalctl (awk exits 1 when it printed nothing: no kernel log in the journal),
        else one dmesg; the source is named after the events (the parser takes any order)."""
        def keep(source: str, empty: str) -> str:
            return (f"awk '/{XID_MARKER}/ {{ n++; if (n <= {XID_LINES_KEPT}) print }} "
                    f"END {{ if (NR == 0) {empty}; print \"source={source}\"; "
                    "print \"total=\" n+0 }'")
        none = '{ print "source=none"; exit }'
        return ("journalctl -k -b -q --no-pager -o short-monotonic 2>/dev/null | "
                f"{keep('journal', 'exit 1')} || dmesg 2>/dev/null | {keep('dmesg', none)}")

    def process(self, output: list[str]) -> XidLog:
        return parse_xid_lines("\n".join(output))


# --- sysfs ---------------------------------------------------------------------------------

SYSFS_FILES = ("vendor", "device", "class", "numa_node", "current_link_speed",
               "current_link_width", "max_link_speed", "max_link_width")
AER_FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
_SYSFS_LINE_RE = re.compile(
    r"^/sys/bus/pci/devices/(?P<bdf>[^/]+)/(?P<file>[a-z_]+):(?P<value>.*)$")
_SPEED_RE = re.compile(r"^(?P<rate>\d+(?:\.\d+)?)\s*GT/s")


class SysfsPciDevice(FactModel):
    bdf: str
    vendor_id: str = ""
    device_id: str = ""
    class_id: str = ""
    """Base class and subclass ("0302"), as lspci -nn prints it."""
    numa_node: int | None = None
    link_speed: str | None = None
    """As lspci prints it ("16GT/s"); None when sysfs says "Unknown" (a link that is down)."""
    link_width: int | None = None
    max_link_speed: str | None = None
    max_link_width: int | None = None
    aer: dict[str, dict[str, int]] = Field(default_factory=dict)
    """{"aer_dev_correctable": {"RxErr": 3, "TOTAL_ERR_COR": 3}, ...}: counters that are not 0."""

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor_id == NVIDIA_VENDOR and self.class_id.startswith(GPU_CLASS)

    def aer_total(self, file: str) -> int:
        counters = self.aer.get(file, {})
        totals = [v for k, v in counters.items() if k.startswith("TOTAL_")]
        return totals[0] if totals else sum(counters.values())

    def as_pcie_device(self) -> PcieDevice:
        """What lspci would have told of it, as far as sysfs knows (no capabilities)."""
        return PcieDevice(
            bdf=self.bdf, vendor_id=self.vendor_id, device_id=self.device_id,
            class_id=self.class_id, name=f"[{self.vendor_id}:{self.device_id}] (sysfs)",
            has_pcie_cap=self.max_link_width is not None, lnkcap_speed=self.max_link_speed,
            lnkcap_width=self.max_link_width, lnksta_speed=self.link_speed,
            lnksta_width=self.link_width, numa_node=self.numa_node)


class PciSysfsState(FactModel):
    lspci: bool = True
    """pciutils' lspci is installed (without it no PCIe capability can be read)."""
    devices: dict[str, SysfsPciDevice] = Field(default_factory=dict)

    def gpus(self) -> list[SysfsPciDevice]:
        return [d for d in self.devices.values() if d.is_nvidia_gpu]


def sysfs_speed(value: str) -> str | None:
    """"16.0 GT/s PCIe" -> "16GT/s" (lspci's spelling); "Unknown" -> None."""
    match = _SPEED_RE.match(value.strip())
    return f"{float(match.group('rate')):g}GT/s" if match else None


def _int_or_none(value: str, base: int = 10) -> int | None:
    try:
        return int(value.strip(), base)
    except ValueError:
        return None


def _hex_id(value: str, digits: int) -> str:
    return value.strip().lower().removeprefix("0x")[:digits]


def _sysfs_value(fields: dict, file: str, value: str) -> None:
    if file in ("vendor", "device"):
        fields[f"{file}_id"] = _hex_id(value, 4)
    elif file == "class":
        fields["class_id"] = _hex_id(value, 4)
    elif file == "numa_node":
        node = _int_or_none(value)
        fields["numa_node"] = node if node is not None and node >= 0 else None
    elif file.endswith("_link_speed"):
        fields["link_speed" if file.startswith("current") else "max_link_speed"] = \
            sysfs_speed(value)
    elif file.endswith("_link_width"):
        width = _int_or_none(value)
        fields["link_width" if file.startswith("current") else "max_link_width"] = \
            width if width else None
    elif file in AER_FILES:
        name, _, count = value.strip().rpartition(" ")
        number = _int_or_none(count)
        if name and number:
            fields.setdefault("aer", {}).setdefault(file, {})[name.strip()] = number


def parse_pci_sysfs(text: str) -> PciSysfsState:
    """`grep -H . FILES` lines ("/sys/bus/pci/devices/BDF/FILE:VALUE") and an "lspci=yes|no"
    line -> the devices by BDF. Never raises."""
    devices: dict[str, dict] = {}
    lspci = True
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("lspci="):
            lspci = line == "lspci=yes"
            continue
        match = _SYSFS_LINE_RE.match(line)
        if not match:
            continue
        bdf = normalize_bdf(match.group("bdf"))
        _sysfs_value(devices.setdefault(bdf, {"bdf": bdf}), match.group("file"),
                     match.group("value"))
    return PciSysfsState(lspci=lspci, devices={
        bdf: SysfsPciDevice(**fields) for bdf, fields in sorted(devices.items())})


class PciSysfs(FactBase):
    """Display controllers and bridges as sysfs shows them (no root, no pciutils); a
    `PciSysfsState`."""

    @staticmethod
    def default() -> PciSysfsState:
        return PciSysfsState()

    def command(self) -> str:
        """The shell's own `read` picks the devices by class, then reads their files and their
        AER counters' non-zero lines as `grep -H` prints them, without a process (sysfs paths
        hold no spaces: plain word lists)."""
        files = " ".join(f"$d/{name}" for name in SYSFS_FILES)
        aer = " ".join(f"$d/{name}" for name in AER_FILES)
        return ("if command -v lspci >/dev/null 2>&1; then echo lspci=yes; else echo lspci=no; "
                "fi; files=; aer=; for d in /sys/bus/pci/devices/*; do "
                'read -r c < "$d/class" 2>/dev/null || continue; case "$c" in '
                f'0x03*|0x0604*) files="$files {files}"; aer="$aer {aer}";; esac; done; '
                + grep_lines_command("$files") + "; "
                + grep_lines_command("$aer", skip="*' 0'") + "; true")

    def process(self, output: list[str]) -> PciSysfsState:
        return parse_pci_sysfs("\n".join(output))
