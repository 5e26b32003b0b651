"""PCIe devices as `lspci -vvv -nn -D` shows them.

`parse_lspci_vvv()` turns that text into one `PcieDevice` per function: identity (BDF,
vendor/device/class ids), the PCI Express capability values this project tunes or audits
(MaxPayload, MaxReadReq, link speed/width), ACS control bits, Resizable BAR sizes and the
bound driver.

Robust to what real outputs look like:
- with or without `-D` (a missing PCI domain is taken as 0000) and with or without `-nn`
  (then vendor/device/class ids are empty strings: only the text names are known);
- tab or space indentation (pasted outputs often have spaces);
- functions without a PCI Express capability (host bridges, legacy PCI): `has_pcie_cap`
  False and every PCIe field None;
- `LnkSta: Speed 2.5GT/s (downgraded), Width x16` annotations (`(ok)`, `(downgraded)`, none):
  values are read, the annotation sets `lnksta_downgraded`;
- `Capabilities: <access denied>` (lspci run as non-root): identity and driver are still read,
  `caps_access_denied` is True and the capability fields stay None.

The parser never raises: empty or unrelated text gives an empty list.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from pyinfra.api import FactBase

from .sections import FactModel

__all__ = [
    "PcieDevice",
    "PcieDevices",
    "PciPaths",
    "matches",
    "normalize_bdf",
    "parse_lspci_vvv",
    "parse_pci_paths",
]


class PcieDevice(FactModel):
    """One PCI function. Sizes are bytes; speeds are lspci's text ("16GT/s")."""

    bdf: str
    """Domain:bus:device.function, lowercase, domain always present ("0000:41:00.0")."""
    vendor_id: str
    """Lowercase hex ("10de"); "" when the output was produced without `-nn`."""
    device_id: str
    class_id: str
    """Class id, "0302" from "3D controller [0302]"; "" without `-nn`."""
    name: str
    """Human description: vendor and device ("NVIDIA Corporation GA102 [GeForce RTX 3090]")."""
    class_name: str = ""
    """Class in words ("VGA compatible controller")."""
    has_pcie_cap: bool = False
    devcap_max_payload: int | None = None
    devctl_max_payload: int | None = None
    devctl_max_read_req: int | None = None
    lnkcap_speed: str | None = None
    lnkcap_width: int | None = None
    lnksta_speed: str | None = None
    lnksta_width: int | None = None
    lnksta_downgraded: bool = False
    """lspci annotated LnkSta speed or width "(downgraded)" (idle GPUs drop to 2.5GT/s)."""
    acs_ctl: dict[str, bool] | None = None
    """ACSCtl bits ({"SrcValid": True, "ReqRedir": False, ...}); None without an ACS cap."""
    resizable_bar: list[str] | None = None
    """Current sizes from "Physical Resizable BAR" ("64GB"...), in BAR order; None without."""
    driver: str | None = None
    """Driver from the "Kernel driver in use" line."""
    unreadable: str | None = None
    """Why lspci's block for this BDF could not be read (nothing else about it is known: it
    matches no selector and is never written); None for a parsed device."""
    numa_node: int | None = None
    iommu_group: int | None = None
    caps_access_denied: bool = False
    """lspci printed "Capabilities: <access denied>" (not root): capability fields unknown."""


SPEED_GEN = {"2.5GT/s": 1, "5GT/s": 2, "8GT/s": 3, "16GT/s": 4, "32GT/s": 5, "64GT/s": 6}
"""A link speed as lspci prints it -> its PCIe generation."""

# --- parsing ---------------------------------------------------------------------------

_HEADER_RE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<rest>\S.*)$"
)
_CLASS_NN_RE = re.compile(r"^(?P<cname>.*?)\s*\[(?P<cls>[0-9a-fA-F]{4})\]:\s*(?P<desc>.*)$")
_CLASS_PLAIN_RE = re.compile(r"^(?P<cname>[^:]+):\s*(?P<desc>.*)$")
_IDS_RE = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\s*\]")
_TRAILER_RE = re.compile(r"\s*\((?:rev [0-9a-fA-F]+|prog-if [^)]*\]?)\)\s*$")
_LABEL_RE = re.compile(r"^(?P<label>[A-Za-z][A-Za-z0-9_]*):")
_CAP_RE = re.compile(r"^Capabilities:\s*(?P<body>.*)$")
_EXPRESS_RE = re.compile(r"^\[[0-9a-fA-F]+(?: v\d+)?\]\s+Express\b")
_REBAR_RE = re.compile(r"^\[[0-9a-fA-F]+(?: v\d+)?\]\s+Physical Resizable BAR\b")
_ACS_RE = re.compile(r"^\[[0-9a-fA-F]+(?: v\d+)?\]\s+Access Control Services\b")
_BAR_SIZE_RE = re.compile(r"^BAR\s+\d+:\s+current size:\s*(?P<size>[0-9]+[KMGTP]?B)")
_SPEED_RE = re.compile(r"Speed\s+(?P<speed>[0-9.]+GT/s)(?P<note>\s*\((?:ok|downgraded)\))?")
_WIDTH_RE = re.compile(r"Width\s+x(?P<width>\d+)(?P<note>\s*\((?:ok|downgraded)\))?")
_MPS_RE = re.compile(r"MaxPayload\s+(?P<mps>\d+)\s+bytes")
_MRRS_RE = re.compile(r"MaxReadReq\s+(?P<mrrs>\d+)\s+bytes")
_FLAG_RE = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9_]*)(?P<sign>[+-])(?=\s|$|,)")


def normalize_bdf(bdf: str) -> str:
    """Lowercase BDF with a 4-digit domain: "41:00.0" and "00000000:41:00.0" -> "0000:41:00.0"."""
    value = bdf.strip().lower()
    parts = value.split(":")
    if len(parts) == 2:
        return "0000:" + value
    if len(parts) == 3:
        try:
            domain = int(parts[0], 16)
        except ValueError:
            return value
        return f"{domain:04x}:{parts[1]}:{parts[2]}"
    return value


def _split_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(header line, body lines) for each device; text outside devices is ignored."""
    blocks: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if line and not line[0].isspace() and _HEADER_RE.match(line):
            current = (line, [])
            blocks.append(current)
        elif current is not None and line.strip():
            if not line[0].isspace():
                # Unindented, not a device header: end of lspci output (a prompt, a note).
                current = None
                continue
            current[1].append(line)
    return blocks


def _parse_header(line: str) -> dict:
    match = _HEADER_RE.match(line)
    assert match is not None  # _split_blocks only hands over matching lines
    bdf = normalize_bdf(match.group("bdf"))
    rest = match.group("rest")
    class_id = ""
    class_name = ""
    desc = rest
    cls = _CLASS_NN_RE.match(rest)
    if cls:
        class_id = cls.group("cls").lower()
        class_name = cls.group("cname").strip()
        desc = cls.group("desc")
    else:
        plain = _CLASS_PLAIN_RE.match(rest)
        if plain:
            class_name = plain.group("cname").strip()
            desc = plain.group("desc")
    vendor_id = device_id = ""
    ids = list(_IDS_RE.finditer(desc))
    if ids:
        last = ids[-1]
        vendor_id = last.group("vendor").lower()
        device_id = last.group("device").lower()
        desc = desc[: last.start()] + desc[last.end() :]
    name = desc
    while True:
        stripped = _TRAILER_RE.sub("", name)
        if stripped == name:
            break
        name = stripped
    return {
        "bdf": bdf,
        "vendor_id": vendor_id,
        "device_id": device_id,
        "class_id": class_id,
        "class_name": class_name,
        "name": " ".join(name.split()),
    }


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _cap_section(fields: dict, body: str) -> str:
    """The capability a "Capabilities: [..] BODY" line opens (marks what it tells on fields)."""
    if body.startswith("<access denied>"):
        fields["caps_access_denied"] = True
        return "other"
    if _EXPRESS_RE.match(body) and "has_pcie_cap" not in fields:
        fields["has_pcie_cap"] = True
        return "express"
    if _REBAR_RE.match(body):
        return "rebar"
    if _ACS_RE.match(body):
        return "acs"
    return "other"


#: "Prefix:" lines of the device itself (outside the capabilities) -> (field, parse).
_TOP_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "Kernel driver in use:": ("driver", lambda value: value or None),
    "NUMA node:": ("numa_node", _to_int),
    "IOMMU group:": ("iommu_group", _to_int),
}


def _capability_line(fields: dict, section: str, label: str, rest: str, line: str,
                     bar_sizes: list[str]) -> None:
    """One line inside a capability: PCI Express fields, a BAR size, the ACSCtl flags."""
    if section == "express":
        _express_line(fields, label, rest)
    elif section == "rebar":
        size = _BAR_SIZE_RE.match(line)
        if size:
            bar_sizes.append(size.group("size"))
    elif section == "acs" and label == "ACSCtl":
        acs = dict(fields.get("acs_ctl") or {})
        for flag in _FLAG_RE.finditer(rest):
            acs[flag.group("name")] = flag.group("sign") == "+"
        fields["acs_ctl"] = acs


def _parse_body(lines: list[str]) -> dict:
    fields: dict = {}
    section = ""  # capability we are inside: "express", "rebar", "acs" or "other"
    label = ""  # last "Label:" seen inside the current capability (DevCtl, LnkSta...)
    bar_sizes: list[str] = []
    for raw in lines:
        line = raw.strip()
        cap = _CAP_RE.match(line)
        if cap:
            section, label = _cap_section(fields, cap.group("body")), ""
            continue
        top = next((prefix for prefix in _TOP_FIELDS if line.startswith(prefix)), None)
        if top is not None:
            key, parse = _TOP_FIELDS[top]
            fields[key] = parse(line.split(":", 1)[1].strip())
            section = "" if key == "driver" else section
            continue
        lab = _LABEL_RE.match(line)
        if lab:
            label = lab.group("label")
        rest = line[lab.end() :] if lab else line
        _capability_line(fields, section, label, rest, line, bar_sizes)
    if bar_sizes:
        fields["resizable_bar"] = bar_sizes
    return fields


def _express_line(fields: dict, label: str, rest: str) -> None:
    if label == "DevCap":
        mps = _MPS_RE.search(rest)
        if mps and "devcap_max_payload" not in fields:
            fields["devcap_max_payload"] = int(mps.group("mps"))
    elif label == "DevCtl":
        # MaxPayload/MaxReadReq sit on DevCtl's last continuation line.
        mps = _MPS_RE.search(rest)
        if mps:
            fields["devctl_max_payload"] = int(mps.group("mps"))
        mrrs = _MRRS_RE.search(rest)
        if mrrs:
            fields["devctl_max_read_req"] = int(mrrs.group("mrrs"))
    elif label in ("LnkCap", "LnkSta"):
        key = label.lower()
        speed = _SPEED_RE.search(rest)
        if speed:
            fields[f"{key}_speed"] = speed.group("speed")
            if label == "LnkSta" and "downgraded" in (speed.group("note") or ""):
                fields["lnksta_downgraded"] = True
        width = _WIDTH_RE.search(rest)
        if width:
            fields[f"{key}_width"] = int(width.group("width"))
            if label == "LnkSta" and "downgraded" in (width.group("note") or ""):
                fields["lnksta_downgraded"] = True


def parse_lspci_vvv(text: str) -> list[PcieDevice]:
    """Parse `lspci -vvv -nn -D` output (any verbosity works) into devices, in output order."""
    if not text:
        return []
    devices: list[PcieDevice] = []
    for header, body in _split_blocks(text):
        try:
            values = _parse_header(header)
            values.update(_parse_body(body))
            # lspci's own "!!! Unknown header type 7f": config space reads all ones (a
            # device that stopped answering, a GPU fallen off the bus).
            alarms = [line.strip()[4:] for line in body if line.strip().startswith("!!! ")]
            if alarms:
                values["unreadable"] = f"lspci: {alarms[0]}"
            devices.append(PcieDevice(**values))
        except (ValueError, TypeError) as exc:
            # A mangled block must not hide the rest of the machine, nor vanish unsaid.
            devices.append(_unreadable(header, exc))
    return devices


def _unreadable(header: str, error: Exception) -> PcieDevice:
    """A placeholder for a block the parser could not read: its BDF and why."""
    match = _HEADER_RE.match(header)
    bdf = normalize_bdf(match.group("bdf")) if match else header.split()[0]
    why = f"{type(error).__name__}: {error}".splitlines()[0][:160]
    return PcieDevice(bdf=bdf, vendor_id="", device_id="", class_id="",
                      name=header.strip()[:160], unreadable=why)


def unreadable_note(devices: list[PcieDevice]) -> str:
    """'lspci block(s) gpunode could not read: BDF (why); ...' or ''."""
    bad = [d for d in devices if d.unreadable]
    if not bad:
        return ""
    listing = "; ".join(f"{d.bdf} ({d.unreadable})" for d in bad)
    return f"lspci block(s) gpunode could not read, left alone: {listing}"


def id_patterns(vendor: str | None, device_id: str | None, classes: list[str]) -> list[str]:
    """The selector as shell glob patterns over a function's "VENDOR:DEVICE:CLASS" ids (lower-case
    hex; CLASS is class and subclass, 4 digits): the one place the selector rule is written.

    `vendor`/`device_id` None match any id. `classes` empty matches any class; otherwise one
    pattern per entry: a 4-digit entry ("0302") must equal the class, a 2-digit one ("03" = every
    display controller) is its first two digits. `matches()` here and the boot and verify scripts
    (`case "$id" in $pattern`) test the same patterns, so they cannot disagree.
    """
    head = f"{(vendor or '*').lower()}:{(device_id or '*').lower()}"
    if not classes:
        return [f"{head}:*"]
    return [f"{head}:{entry.lower()}{'??' if len(entry) == 2 else ''}" for entry in classes]


def pci_id(device: PcieDevice) -> str:
    """A function's ids as the patterns of `id_patterns()` read them: VENDOR:DEVICE:CLASS."""
    return f"{device.vendor_id}:{device.device_id}:{device.class_id}".lower()


def matches(
    device: PcieDevice,
    vendor: str | None,
    device_id: str | None,
    classes: list[str],
) -> bool:
    """Whether the selector (vendor id, device id, classes; rule: `id_patterns()`) selects the
    device. Ids are fields without ':', so each '*' stands for one whole field."""
    identity = pci_id(device)
    return any(fnmatchcase(identity, p) for p in id_patterns(vendor, device_id, classes))


_BDF_PART_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def parse_pci_paths(text: str) -> dict[str, list[str]]:
    """`readlink -f /sys/bus/pci/devices/*` -> {bdf: [upstream bridges, root first]}.

    "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0" -> {"0000:41:00.0": ["0000:40:01.1"]}.
    """
    paths: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        parts = [p for p in line.strip().split("/") if _BDF_PART_RE.match(p)]
        if parts:
            chain = [normalize_bdf(p) for p in parts]
            paths[chain[-1]] = chain[:-1]
    return paths


# --- facts -------------------------------------------------------------------------------


class PcieDevices(FactBase):
    """Every PCI function with its PCIe capability values (`lspci -vvv -nn -D`).

    Run it with `_sudo=True`: without root, lspci hides capabilities (`caps_access_denied`).
    Returns [] where lspci is not installed.
    """

    def requires_command(self) -> str:
        return "lspci"

    @staticmethod
    def default() -> list[PcieDevice]:
        return []

    def command(self) -> str:
        return "lspci -vvv -nn -D"

    def process(self, output: list[str]) -> list[PcieDevice]:
        return parse_lspci_vvv("\n".join(output))


class PciPaths(FactBase):
    """{bdf: upstream bridges, root first} from sysfs (`readlink -f /sys/bus/pci/devices/*`):
    the PCIe tree, read without root."""

    @staticmethod
    def default() -> dict[str, list[str]]:
        return {}

    def command(self) -> str:
        return "readlink -f /sys/bus/pci/devices/* 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[str, list[str]]:
        return parse_pci_paths("\n".join(output))


GPU_CLASS_NAMES = ("VGA compatible controller", "3D controller", "Display controller")


def is_nvidia_gpu(device: PcieDevice) -> bool:
    """An NVIDIA display/3D function; by name when lspci ran without -nn (no ids)."""
    if device.unreadable:
        return False
    if device.vendor_id:
        return device.vendor_id == "10de" and device.class_id.startswith("03")
    return device.name.startswith("NVIDIA") and device.class_name in GPU_CLASS_NAMES
