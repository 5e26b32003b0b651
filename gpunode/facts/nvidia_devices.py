"""The host's NVIDIA device nodes and character-device majors, as a container's GPU passthrough
needs them (parsers; the lines themselves: gpunode.roles.lxc_gpu.passthrough).

Nothing here is hard-coded to one machine: the character-device majors come from
the host's ``/proc/devices`` and the device nodes from a ``stat`` listing of
``/dev/nvidia*``. What the facts say, and why it matters:

- ``/dev/nvidiaN`` and ``/dev/nvidiactl`` use major 195 (a compile-time constant of
  the driver). Drivers before 550.40 name it ``nvidia-frontend`` in /proc/devices,
  550.40 and later ``nvidia`` and ``nvidiactl`` (NVIDIA/nvidia-container-toolkit#324).
- ``nvidia-uvm`` (CUDA's unified memory device) gets a *dynamic* major
  (``alloc_chrdev_region``): 234, 239, 508, 510, 511 are all seen in the wild, and
  it can change with a driver update or module load order. /dev/nvidia-uvm exists
  only once the module is loaded (load nvidia-uvm at boot or run nvidia-modprobe).
- ``nvidia-caps`` (MIG capability nodes under /dev/nvidia-caps/) has a dynamic
  major too, and is not ``nvidia-caps-imex-channels``: match the name exactly
  (kubernetes-sigs/dra-driver-nvidia-gpu#304).

The GPU index used by gpunode is the device minor, i.e. N in /dev/nvidiaN. It is
not always the nvidia-smi index (PCI order); see the "Device Minor" line in
/proc/driver/nvidia/gpus/*/information.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pyinfra.api import FactBase

__all__ = [
    "DEVICE_FACT_SEPARATOR",
    "NVIDIA_DEVICES_COMMAND",
    "DeviceNode",
    "NvidiaMajors",
    "PassthroughError",
    "gpu_indices_on_host",
    "nvidia_majors",
    "parse_nvidia_dev_listing",
    "parse_nvidia_device_fact",
    "parse_proc_devices",
]

NVIDIA_FRONTEND_MAJOR = 195
NVIDIACTL_MINOR = 255

DEVICE_FACT_SEPARATOR = "--- gpunode: /dev/nvidia ---"

#: One command, one round trip: the char-device majors and the NVIDIA device nodes.
#: ``stat`` prints the type, the major and minor in hex (%t/%T work on every
#: coreutils, the decimal %Hr/%Lr only on 9.1+), and the path last. A glob that
#: matches nothing only prints to stderr, and the command still exits 0.
NVIDIA_DEVICES_COMMAND = (
    "cat /proc/devices; "
    f"echo '{DEVICE_FACT_SEPARATOR}'; "
    "stat -c '%F|%t|%T|%n' /dev/nvidia* /dev/nvidia-caps/* 2>/dev/null || true"
)


class PassthroughError(ValueError):
    """The host's facts don't allow the requested passthrough; says what to do."""


@dataclass(frozen=True, order=True)
class DeviceNode:
    """A node under /dev: ``kind`` is ``char`` or ``dir`` (major/minor 0 for dirs)."""

    path: str
    kind: str
    major: int = 0
    minor: int = 0


@dataclass(frozen=True)
class NvidiaMajors:
    frontend: int
    uvm: int | None
    caps: int | None


# --- parsing -----------------------------------------------------------------

_PROC_DEVICE_RE = re.compile(r"^\s*(\d+)\s+(\S.*?)\s*$")


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character-device majors by name from ``/proc/devices``.

    Only the ``Character devices:`` part counts. Output without the headers (for
    example ``grep nvidia /proc/devices``) is read as character devices. A name
    listed twice (``infiniband_mad`` on some hosts) keeps its first major.
    """
    has_header = "Character devices:" in text
    in_char = not has_header
    majors: dict[str, int] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Character devices:":
            in_char = True
            continue
        if stripped == "Block devices:":
            in_char = False
            continue
        if not in_char:
            continue
        match = _PROC_DEVICE_RE.match(line)
        if match:
            majors.setdefault(match.group(2), int(match.group(1)))
    return majors


_STAT_RE = re.compile(
    r"^(?P<type>[a-z ]+)\|(?P<major>[0-9a-fA-F]+)\|(?P<minor>[0-9a-fA-F]+)\|(?P<path>/.+)$"
)
_LS_RE = re.compile(
    r"^(?P<type>[cd])[-rwxsStT]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+"
    r"(?:(?P<major>\d+),\s*(?P<minor>\d+)|\d+)\s+"
    r"\S+\s+\S+\s+\S+\s+(?P<name>.+)$"
)


def parse_nvidia_dev_listing(text: str, base_dir: str = "/dev") -> list[DeviceNode]:
    """NVIDIA device nodes from a listing, sorted by path.

    Reads the ``stat -c '%F|%t|%T|%n'`` lines of :data:`NVIDIA_DEVICES_COMMAND`
    (hex major/minor) and also ``ls -l`` output (decimal ``MAJOR, MINOR``, as
    people paste it in bug reports): relative names are taken relative to the
    last ``DIR:`` header, else ``base_dir``; ``.``/``..`` and ``total`` are skipped.
    Non-NVIDIA nodes (``/dev/nvram``) are dropped.
    """
    nodes: dict[str, DeviceNode] = {}
    current_dir = base_dir.rstrip("/") or "/"
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.startswith("total "):
            continue
        stat = _STAT_RE.match(line)
        if stat:
            kind = {"character special file": "char", "directory": "dir"}.get(stat["type"])
            if kind is None:
                continue
            major, minor = (int(stat["major"], 16), int(stat["minor"], 16))
            path = stat["path"]
            node = DeviceNode(path, kind, *((major, minor) if kind == "char" else (0, 0)))
        else:
            if line.endswith(":") and " " not in line:
                current_dir = line[:-1].rstrip("/") or "/"
                continue
            ls = _LS_RE.match(line)
            if not ls:
                continue
            name = ls["name"]
            if name in (".", ".."):
                continue
            path = name if name.startswith("/") else f"{current_dir}/{name}"
            if ls["type"] == "c" and ls["major"] is not None:
                node = DeviceNode(path, "char", int(ls["major"]), int(ls["minor"]))
            elif ls["type"] == "d":
                node = DeviceNode(path, "dir")
            else:
                continue
        if node.path.startswith("/dev/nvidia"):
            nodes[node.path] = node
    return sorted(nodes.values())


def parse_nvidia_device_fact(text: str) -> tuple[dict[str, int], list[DeviceNode]]:
    """Split the output of :data:`NVIDIA_DEVICES_COMMAND` into (majors, nodes)."""
    head, sep, tail = text.partition(DEVICE_FACT_SEPARATOR)
    if not sep:
        return parse_proc_devices(text), []
    return parse_proc_devices(head), parse_nvidia_dev_listing(tail)


# --- computing ---------------------------------------------------------------


def nvidia_majors(majors: dict[str, int]) -> NvidiaMajors:
    """The NVIDIA majors from parsed /proc/devices; raises when the driver is absent."""
    frontend = next(
        (majors[n] for n in ("nvidia-frontend", "nvidia", "nvidiactl") if n in majors), None
    )
    if frontend is None:
        raise PassthroughError(
            "the NVIDIA driver is not loaded on the Proxmox host: /proc/devices lists no "
            "'nvidia-frontend' or 'nvidia' character device. Install the host driver and "
            "load it (modprobe nvidia), then run again."
        )
    return NvidiaMajors(frontend, majors.get("nvidia-uvm"), majors.get("nvidia-caps"))


_GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")


def gpu_indices_on_host(devices: Iterable[DeviceNode]) -> list[int]:
    """N for every /dev/nvidiaN character device, sorted."""
    found = []
    for node in devices:
        match = _GPU_NODE_RE.match(node.path)
        if match and node.kind == "char":
            found.append(int(match.group(1)))
    return sorted(found)


class HostNvidiaNodes(FactBase):
    """The NVIDIA device nodes on the host: /dev/nvidia*, /dev/nvidia-caps/* (paths)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return ('for e in /dev/nvidia* /dev/nvidia-caps/*; do [ -e "$e" ] && echo "$e"; done; '
                "true")

    def process(self, output: list[str]) -> list[str]:
        return sorted({line.strip() for line in output if line.strip().startswith("/dev/nvidia")})
