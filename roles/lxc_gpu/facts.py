"""Facts the lxc_gpu role reads on the Proxmox host; each one command, parsed by a
pure function in this package so the parsing is tested on captured outputs.

- ``NvidiaDevices``: /proc/devices majors + the /dev/nvidia* nodes (one round trip).
- ``PctList``: the containers on this node, with their status (``pct list``).
- ``PveLxcConfigText``: /etc/pve/lxc/VMID.conf byte for byte (base64 on the wire, so
  a missing final newline survives), or None when the container doesn't exist.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import asdict

from pyinfra.api import FactBase

from roles.lxc_gpu.passthrough import NVIDIA_DEVICES_COMMAND, parse_nvidia_device_fact

__all__ = [
    "NvidiaDevices",
    "PctList",
    "PveLxcConfigText",
    "parse_pct_list",
    "pve_lxc_config_command",
    "parse_pve_lxc_config_fact",
]

_MISSING = "gpunode:missing"


class NvidiaDevices(FactBase):
    """``{"majors": {name: major}, "devices": [{"path", "kind", "major", "minor"}]}``."""

    def command(self) -> str:
        return NVIDIA_DEVICES_COMMAND

    def process(self, output):
        majors, devices = parse_nvidia_device_fact("\n".join(output))
        return {"majors": majors, "devices": [asdict(d) for d in devices]}


_PCT_LIST_RE = re.compile(r"^\s*(\d+)\s+(\S+)(?:\s+(.*?))?\s*$")


def parse_pct_list(text: str) -> dict[int, dict[str, str]]:
    """``pct list`` -> {vmid: {"status", "lock", "name"}}.

    The columns are VMID, Status, Lock (often empty) and Name; names have no spaces,
    so with three fields the third is the name.
    """
    result: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        match = _PCT_LIST_RE.match(line)
        if not match:
            continue
        rest = (match.group(3) or "").split()
        lock = " ".join(rest[:-1])
        name = rest[-1] if rest else ""
        result[int(match.group(1))] = {"status": match.group(2), "lock": lock, "name": name}
    return result


class PctList(FactBase):
    """Containers on this Proxmox node (``pct list``). Guest ids are cluster-wide:
    check /etc/pve/.vmlist too before declaring a vmid free."""

    def command(self) -> str:
        return "pct list"

    def process(self, output):
        return parse_pct_list("\n".join(output))


def pve_lxc_config_command(vmid: int) -> str:
    path = shlex.quote(f"/etc/pve/lxc/{int(vmid)}.conf")
    return f"if [ -f {path} ]; then base64 -w0 {path}; echo; else echo {_MISSING}; fi"


def parse_pve_lxc_config_fact(text: str) -> str | None:
    """Decode :func:`pve_lxc_config_command` output; None when the file is absent."""
    payload = "".join(text.split())
    if payload == _MISSING:
        return None
    try:
        return base64.b64decode(payload, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable container config fact: {exc}") from exc


class PveLxcConfigText(FactBase):
    """The exact text of /etc/pve/lxc/VMID.conf, or None."""

    def command(self, vmid: int) -> str:
        return pve_lxc_config_command(vmid)

    def process(self, output):
        return parse_pve_lxc_config_fact("\n".join(output))
