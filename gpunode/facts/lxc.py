"""Facts the lxc_gpu role reads on the Proxmox host; each one command, parsed by a
pure function in this package so the parsing is tested on captured outputs.

- ``NvidiaDevices``: /proc/devices majors + the /dev/nvidia* nodes (one round trip).
- ``PctList``: the containers on this node, with their status (``pct list``).
- ``PveLxcConfigText``: /etc/pve/lxc/VMID.conf byte for byte (base64 on the wire, so
  a missing final newline survives), or None when the container doesn't exist.
- ``LxcStartedConfig``: /var/lib/lxc/VMID/config, the LXC config Proxmox generated when
  the container last started (raw lxc.* keys included, written ``key = value``): what
  the running container actually runs with, so "pending restart" is read from the
  live node and survives across runs.
- ``PveGuests``: every guest of the cluster (containers and VMs, all nodes) with its
  name, from the configs under /etc/pve/nodes; None on a host without ``pct``.
- ``GpuNumaTopology``: the NUMA nodes' CPUs and each GPU's node (``numa``).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import asdict, dataclass

from pyinfra.api import FactBase

from gpunode.facts.gpu_numa import GPU_NUMA_COMMAND, GpuNuma, parse_gpu_numa
from gpunode.facts.nvidia_devices import NVIDIA_DEVICES_COMMAND, parse_nvidia_device_fact

__all__ = [
    "GpuNumaTopology",
    "LxcStartedConfig",
    "NvidiaDevices",
    "PctList",
    "PveGuest",
    "PveGuests",
    "PveLxcConfigText",
    "existing_guest_names",
    "lxc_started_config_command",
    "parse_pct_list",
    "parse_pve_guests",
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
    """Containers on this Proxmox node (``pct list``), None where there is no ``pct``
    (not a Proxmox VE host). Guest ids are cluster-wide: see ``PveGuests``."""

    def requires_command(self) -> str:
        return "pct"

    def command(self) -> str:
        # The marker line keeps the output non-empty on a node without containers, so
        # pyinfra hands it to process() ({}), not default() (None: no Proxmox).
        return "echo gpunode:pct; pct list"

    def process(self, output):
        return parse_pct_list("\n".join(output))


def _file_as_base64_command(path: str) -> str:
    path = shlex.quote(path)
    return f"if [ -f {path} ]; then base64 -w0 {path}; echo; else echo {_MISSING}; fi"


def pve_lxc_config_command(vmid: int) -> str:
    return _file_as_base64_command(f"/etc/pve/lxc/{int(vmid)}.conf")


def lxc_started_config_command(vmid: int) -> str:
    return _file_as_base64_command(f"/var/lib/lxc/{int(vmid)}/config")


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


class LxcStartedConfig(FactBase):
    """The exact text of /var/lib/lxc/VMID/config (written by ``pct start``), or None."""

    def command(self, vmid: int) -> str:
        return lxc_started_config_command(vmid)

    def process(self, output):
        return parse_pve_lxc_config_fact("\n".join(output))


# --- guests of the cluster -------------------------------------------------------

PVE_GUESTS_COMMAND = (
    "echo \"local=$(readlink /etc/pve/local)\"; "
    "for f in /etc/pve/nodes/*/lxc/*.conf /etc/pve/nodes/*/qemu-server/*.conf; do "
    '[ -f "$f" ] && printf \'%s|%s\\n\' "$f" '
    '"$(grep -m1 -E \'^(hostname|name):\' "$f")"; '
    "done; true"
)

_GUEST_PATH_RE = re.compile(r"^/etc/pve/nodes/([^/]+)/(lxc|qemu-server)/(\d+)\.conf$")


@dataclass(frozen=True)
class PveGuest:
    vmid: int
    kind: str
    """``ct`` or ``vm``."""
    node: str
    name: str


def parse_pve_guests(text: str) -> dict:
    """:data:`PVE_GUESTS_COMMAND` output -> ``{"node": THIS_NODE, "guests": {vmid: PveGuest}}``.

    ``/etc/pve/local`` links to ``nodes/THIS_NODE``. A guest's name is the first
    ``hostname:`` (containers) or ``name:`` (VMs) line of its config, i.e. from the
    main section, which comes before any snapshot section.
    """
    node = ""
    guests: dict[int, PveGuest] = {}
    for line in text.splitlines():
        if line.startswith("local="):
            node = line.removeprefix("local=").strip().rstrip("/").rsplit("/", 1)[-1]
            continue
        path, sep, name_line = line.partition("|")
        match = _GUEST_PATH_RE.match(path.strip())
        if not sep or not match:
            continue
        name = name_line.partition(":")[2].strip()
        kind = "ct" if match.group(2) == "lxc" else "vm"
        vmid = int(match.group(3))
        guests[vmid] = PveGuest(vmid, kind, match.group(1), name)
    return {"node": node, "guests": guests}


def existing_guest_names(node: str, guests: dict[int, PveGuest]) -> dict[int, str]:
    """vmid -> the name ``validate_containers`` compares with a spec's hostname.

    A container on this node is known by its hostname; any other guest (a VM, or a
    container on another node) gets a label that can't equal a hostname, so its
    vmid is reported as taken.
    """
    names = {}
    for vmid, guest in guests.items():
        if guest.kind == "ct" and guest.node == node:
            names[vmid] = guest.name
        else:
            kind = "VM" if guest.kind == "vm" else "CT"
            names[vmid] = f"{guest.name or '?'} ({kind} on node {guest.node})"
    return names


class PveGuests(FactBase):
    """Guests of the whole cluster, None where there is no ``pct``: see ``parse_pve_guests``."""

    def requires_command(self) -> str:
        return "pct"

    def command(self) -> str:
        return PVE_GUESTS_COMMAND

    def process(self, output):
        parsed = parse_pve_guests("\n".join(output))
        return {
            "node": parsed["node"],
            "guests": {vmid: asdict(g) for vmid, g in parsed["guests"].items()},
        }


class GpuNumaTopology(FactBase):
    """The NUMA nodes' CPUs and where the GPUs sit, as ``numa.GpuNuma`` (empty when the
    host shows no NUMA node)."""

    @staticmethod
    def default() -> GpuNuma:
        return GpuNuma()

    def command(self) -> str:
        return GPU_NUMA_COMMAND

    def process(self, output) -> GpuNuma:
        return parse_gpu_numa("\n".join(output))
