"""GPU-to-GPU paths as the driver sees them: `nvidia-smi topo -m` and `topo -p2p r|w`.

`topo -m` names the path between two GPUs: X (self), PIX (at most one PCIe bridge), PXB
(several bridges, no host bridge), PHB (through a PCIe host bridge, i.e. the CPU), NODE
(between host bridges of one NUMA node), SYS (across the SMP interconnect), NV# (# bonded
NVLinks). `topo -p2p r|w` says whether the driver allows peer reads/writes: OK, CNS (chipset
not supported), GNS (GPU not supported), TNS (topology not supported), NS (not supported),
DR (disabled by regkey), U (unknown).

Both print a matrix with GPU (and NIC) column headers; drivers use tabs, pasted copies spaces,
and the `-m` rows carry CPU/NUMA affinity columns after the GPU cells. The parsers read the
header's GPU/NIC names and take that many cells from each GPU row, so either layout works;
anything else gives an empty matrix.
"""

from __future__ import annotations

import re

from pydantic import Field

from .sections import FactModel

CPU_PATHS = frozenset({"PHB", "NODE", "SYS"})
"""topo -m paths that go through a CPU's host bridge or interconnect."""
P2P_OK = "OK"

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_COLUMN_RE = re.compile(r"^(GPU|NIC)\d+$")
_GPU_RE = re.compile(r"^GPU(\d+)$")


def pair_key(a: int, b: int) -> str:
    """"0-1" for GPUs 0 and 1, lower index first."""
    return f"{min(a, b)}-{max(a, b)}"


def parse_topo_matrix(text: str) -> dict[str, str]:
    """A GPU matrix -> {"i-j": cell} for each GPU pair i < j (NIC columns dropped).

    Where the two directions differ (p2p matrices can be asymmetric) the worse is kept:
    anything but OK wins."""
    columns: list[str] = []
    cells: dict[str, str] = {}
    for raw in _ANSI_RE.sub("", text or "").splitlines():
        tokens = raw.split()
        if not tokens:
            continue
        if not columns:
            if _COLUMN_RE.match(tokens[0]) and not _row_like(tokens):
                columns = [t for t in tokens if _COLUMN_RE.match(t)]
            continue
        row = _GPU_RE.match(tokens[0])
        if row is None:
            if tokens[0].endswith(":") or tokens[0] == "Legend:":
                break
            continue
        for name, cell in zip(columns, tokens[1:1 + len(columns)], strict=False):
            col = _GPU_RE.match(name)
            if col is None or col.group(1) == row.group(1):
                continue
            key = pair_key(int(row.group(1)), int(col.group(1)))
            if key not in cells or cells[key] == P2P_OK:
                cells[key] = cell
    return cells


def _row_like(tokens: list[str]) -> bool:
    """A matrix row ("GPU0 X PHB ...") rather than the header ("GPU0 GPU1 CPU Affinity")."""
    return len(tokens) > 1 and not _COLUMN_RE.match(tokens[1])


class GpuTopology(FactModel):
    """The three matrices, by GPU pair ("0-1"); empty where not read or not printed."""

    links: dict[str, str] = Field(default_factory=dict)
    """topo -m: PIX, PXB, PHB, NODE, SYS, NV#."""
    p2p_read: dict[str, str] = Field(default_factory=dict)
    p2p_write: dict[str, str] = Field(default_factory=dict)

    def pairs(self) -> list[str]:
        keys = set(self.links) | set(self.p2p_read) | set(self.p2p_write)
        return sorted(keys, key=lambda k: tuple(int(x) for x in k.split("-")))


def parse_gpu_topology(topo_m: str, p2p_read: str, p2p_write: str) -> GpuTopology:
    return GpuTopology(links=parse_topo_matrix(topo_m), p2p_read=parse_topo_matrix(p2p_read),
                       p2p_write=parse_topo_matrix(p2p_write))
