"""Which NUMA node(s) a container's GPUs sit on, and the cpuset that keeps it there.

A GPU's node is its PCI device's ``/sys/bus/pci/devices/BDF/numa_node`` (-1: the firmware
gives none); the node's CPUs are ``/sys/devices/system/node/nodeN/cpulist``. A GPU index is
the minor of /dev/nvidiaN; the driver names its PCI device in
``/proc/driver/nvidia/gpus/BDF/information`` ("Device Minor: N"), which is not the PCI order
on every host. Where that file is missing (no NVIDIA driver: the lab's stand-in nodes), the
node's own sysfs link ``/sys/dev/char/MAJOR:MINOR/device`` names the PCI device.

Proxmox's pvestatd rebalances a container's CPUs over the whole host every few seconds unless
its config sets ``lxc.cgroup2.cpuset.cpus`` (``rebalance_lxc_containers`` in pvestatd), so an
inference server's threads drift away from its GPUs' node; ``cpuset.mems`` keeps its memory
allocations local too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pydantic import Field

from gpunode.facts.pcie import normalize_bdf
from gpunode.facts.sections import (
    MARKER,
    FactModel,
    grep_lines_command,
    section_command,
    split_sections,
)

__all__ = [
    "GPU_NUMA_COMMAND",
    "GpuNuma",
    "format_cpulist",
    "gpu_nodes",
    "local_cpuset",
    "parse_cpulist",
    "parse_gpu_numa",
]

GPU_NUMA_COMMAND = "; ".join(
    [
        # grep, not the shell's byte-a-call read: a node's cpulist is a binary attribute that
        # reads empty that way (tests/unit/facts/test_builtin_reads.py)
        section_command("node_cpus", "grep -H . /sys/devices/system/node/node*/cpulist"),
        section_command(
            "gpu_minors", "set -- /proc/driver/nvidia/gpus/*/information; [ -e \"$1\" ] && "
            "grep -H 'Device Minor' \"$@\""
        ),
        section_command(
            "char_devices",
            "for n in /dev/nvidia[0-9]*; do [ -c \"$n\" ] || continue; "
            "set -- $(stat -c '%t %T' \"$n\"); "
            "echo \"$n|$(readlink -f /sys/dev/char/$((0x$1)):$((0x$2))/device)\"; done",
        ),
        section_command("pci_nodes", grep_lines_command("/sys/bus/pci/devices/*/numa_node")),
    ]
)


class GpuNuma(FactModel):
    """The host's NUMA nodes and where its GPUs sit."""

    node_cpus: dict[int, list[int]] = Field(default_factory=dict)
    """NUMA node -> its CPUs."""
    gpu_bdf: dict[int, str] = Field(default_factory=dict)
    """GPU index (minor of /dev/nvidiaN) -> PCI address."""
    bdf_node: dict[str, int] = Field(default_factory=dict)
    """PCI address -> NUMA node (-1: none given)."""

    @property
    def cpus(self) -> set[int]:
        return {cpu for cpus in self.node_cpus.values() for cpu in cpus}


_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8-11`` -> [0, 1, 2, 3, 8, 9, 10, 11]; ValueError on anything else. Empty -> []."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        match = _RANGE_RE.match(part.strip())
        if not match:
            raise ValueError(f"not a CPU list: {text!r}")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> ``0-3,8`` (the kernel's own short form)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start: int | None = None
    prev = 0
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = cpu
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


_NODE_CPULIST_RE = re.compile(r"node(\d+)/cpulist:\s*(\S*)\s*$")
_MINOR_RE = re.compile(r"gpus/([0-9a-fA-F:.]+)/information:\s*Device Minor:\s*(\d+)\s*$")
_CHAR_RE = re.compile(r"^/dev/nvidia(\d+)\|(\S*)$")
_PCI_NODE_RE = re.compile(r"devices/([0-9a-fA-F:.]+)/numa_node:\s*(-?\d+)\s*$")
_BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def parse_gpu_numa(text: str) -> GpuNuma:
    """Parse :data:`GPU_NUMA_COMMAND` output (each section also alone, as ``grep -H`` prints
    it: ``/sys/devices/system/node/node1/cpulist:52-103,156-207``). Never raises."""
    text = text or ""
    names = ("node_cpus", "gpu_minors", "char_devices", "pci_nodes")
    sections = split_sections(text) if MARKER in text else dict.fromkeys(names, text)
    node_cpus: dict[int, list[int]] = {}
    for line in sections.get("node_cpus", "").splitlines():
        match = _NODE_CPULIST_RE.search(line)
        if match:
            try:
                node_cpus[int(match.group(1))] = parse_cpulist(match.group(2))
            except ValueError:
                continue
    gpu_bdf: dict[int, str] = {}
    for line in sections.get("char_devices", "").splitlines():
        match = _CHAR_RE.match(line.strip())
        bdf = match.group(2).rstrip("/").rsplit("/", 1)[-1] if match else ""
        if match and _BDF_RE.match(bdf):
            gpu_bdf[int(match.group(1))] = normalize_bdf(bdf)
    for line in sections.get("gpu_minors", "").splitlines():
        match = _MINOR_RE.search(line)
        if match:  # the driver's own word wins over the sysfs link
            gpu_bdf[int(match.group(2))] = normalize_bdf(match.group(1))
    bdf_node: dict[str, int] = {}
    for line in sections.get("pci_nodes", "").splitlines():
        match = _PCI_NODE_RE.search(line)
        if match:
            bdf_node[normalize_bdf(match.group(1))] = int(match.group(2))
    return GpuNuma(node_cpus=dict(sorted(node_cpus.items())), gpu_bdf=gpu_bdf, bdf_node=bdf_node)


def gpu_nodes(numa: GpuNuma, gpus: Sequence[int]) -> list[int] | None:
    """The NUMA nodes of these GPUs, sorted; None when any GPU's node is unknown."""
    nodes = set()
    for gpu in gpus:
        bdf = numa.gpu_bdf.get(gpu)
        node = numa.bdf_node.get(bdf, -1) if bdf else -1
        if node < 0 or node not in numa.node_cpus:
            return None
        nodes.add(node)
    return sorted(nodes)


def local_cpuset(numa: GpuNuma | None, gpus: Sequence[int]) -> tuple[str, str] | None:
    """(cpus, mems) local to the GPUs, or None where there is nothing to pin: one NUMA node
    (or none known), or a GPU whose node the firmware does not give."""
    if numa is None or len(numa.node_cpus) < 2 or not gpus:
        return None
    nodes = gpu_nodes(numa, gpus)
    if not nodes:
        return None
    cpus = [cpu for node in nodes for cpu in numa.node_cpus[node]]
    if not cpus:
        return None
    return format_cpulist(cpus), format_cpulist(nodes)
