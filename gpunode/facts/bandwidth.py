"""Measured GPU bandwidth: CUDA samples' p2pBandwidthLatencyTest and nccl-tests' *_perf.

`parse_p2p_bandwidth()` reads the matrices p2pBandwidthLatencyTest prints ("P2P Connectivity
Matrix", "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", older drivers'
"Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)", "Bidirectional ...") into per-pair
figures. `parse_nccl_perf()` reads an all_reduce_perf / sendrecv_perf table (out-of-place and
in-place busbw per size) and its "# Avg bus bandwidth" line.

`pcie_link_gbs()` is what a PCIe link carries per direction: GT/s x lanes x encoding / 8
(8b/10b up to Gen2, 128b/130b from Gen3): Gen4 x16 = 31.5 GB/s, Gen5 x16 = 63 GB/s.

`BandwidthTests` is the audit's active mode (never a deploy's): it runs the tools found on
the node, each under `timeout`, and returns their output for these parsers.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field
from pyinfra.api import FactBase

from .gpu_topology import pair_key
from .sections import FactModel, section_command, split_sections

_TITLE_RE = re.compile(
    r"^(?P<dir>Unidirectional|Bidirectional) P2P=(?P<p2p>Enabled|Disabled) Bandwidth"
    r"(?: \(P2P (?P<op>Writes|Reads)\))? Matrix \(GB/s\)")
_CONNECTIVITY = "P2P Connectivity Matrix"
_ROW_RE = re.compile(r"^\s*(?P<row>\d+)\s+(?P<cells>[\d.\s]+)$")
_NGPUS_RE = re.compile(r"\bnGpus\s+(\d+)")
_RANK_RE = re.compile(r"^#\s+Rank\s+\d+\s")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[\d.]+)")
_ENCODING = {"2.5": 0.8, "5": 0.8}


class P2pBandwidth(FactModel):
    """p2pBandwidthLatencyTest's figures, by GPU pair "i-j" (lower of the two directions)."""

    present: bool = False
    connectivity: dict[str, bool] = Field(default_factory=dict)
    """P2P Connectivity Matrix: 1 = peer access possible."""
    unidirectional_p2p: dict[str, float] = Field(default_factory=dict)
    """Unidirectional P2P=Enabled (writes) GB/s, the slower direction."""
    unidirectional_no_p2p: dict[str, float] = Field(default_factory=dict)
    bidirectional_p2p: dict[str, float] = Field(default_factory=dict)


class NcclPerf(FactModel):
    present: bool = False
    gpus: int = 0
    avg_busbw: float | None = None
    peak_busbw: float | None = None
    """Largest busbw of the table (out-of-place or in-place), GB/s."""
    peak_size: int | None = None
    wrong: int = 0
    """Sum of the #wrong columns: a result that is not correct is not a bandwidth."""
    times_us: dict[int, float] = Field(default_factory=dict)
    """Message bytes -> one operation's time, us (the lower of out-of-place and in-place)."""


def _matrix_key(match: re.Match) -> str:
    kind = "unidirectional" if match.group("dir") == "Unidirectional" else "bidirectional"
    p2p = "p2p" if match.group("p2p") == "Enabled" else "no_p2p"
    return f"{kind}_{p2p}" + ("_reads" if match.group("op") == "Reads" else "")


def _read_matrices(text: str) -> dict[str, dict[tuple[int, int], float]]:
    matrices: dict[str, dict[tuple[int, int], float]] = {}
    current: dict[tuple[int, int], float] | None = None
    for line in (text or "").splitlines():
        stripped = line.strip().lstrip("#").strip()
        title = _TITLE_RE.match(stripped)
        if title or stripped.startswith(_CONNECTIVITY):
            current = matrices.setdefault(_matrix_key(title) if title else "connectivity", {})
            continue
        row = _ROW_RE.match(stripped)
        if current is None or not stripped or stripped.startswith(("D\\D", "GPU", "CPU")):
            continue
        if row is None:
            current = None
            continue
        for col, cell in enumerate(row.group("cells").split()):
            try:
                current[(int(row.group("row")), col)] = float(cell)
            except ValueError:
                continue
    return matrices


def _pairs(matrix: dict[tuple[int, int], float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (i, j), value in matrix.items():
        if i == j or (j, i) not in matrix:
            continue
        out[pair_key(i, j)] = min(value, matrix[(j, i)])
    return dict(sorted(out.items()))


def parse_p2p_bandwidth(text: str) -> P2pBandwidth:
    """p2pBandwidthLatencyTest output -> per-pair figures; present=False without matrices."""
    matrices = _read_matrices(text)
    uni = matrices.get("unidirectional_p2p") or {}
    if not uni:
        return P2pBandwidth()
    return P2pBandwidth(
        present=True,
        connectivity={k: v >= 1 for k, v in _pairs(matrices.get("connectivity", {})).items()},
        unidirectional_p2p=_pairs(uni),
        unidirectional_no_p2p=_pairs(matrices.get("unidirectional_no_p2p", {})),
        bidirectional_p2p=_pairs(matrices.get("bidirectional_p2p", {})),
    )


def parse_nccl_perf(text: str) -> NcclPerf:
    """nccl-tests *_perf output -> busbw figures; present=False without a result table."""
    gpus = ranks = wrong = 0
    avg = peak = None
    peak_size = None
    rows = 0
    times: dict[int, float] = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        ngpus = _NGPUS_RE.search(stripped)
        if ngpus and stripped.startswith("#"):
            gpus = max(gpus, int(ngpus.group(1)))
        if _RANK_RE.match(stripped):
            ranks += 1
        average = _AVG_RE.match(stripped)
        if average:
            avg = float(average.group("value"))
        tokens = stripped.split()
        if (stripped.startswith("#") or len(tokens) < 9 or not tokens[0].isdigit()
                or not tokens[2][:1].isalpha()):  # size count TYPE redop root time ...
            continue
        try:
            busbw = max(float(tokens[-6]), float(tokens[-2]))
            times[int(tokens[0])] = min(float(tokens[-8]), float(tokens[-4]))
            wrong += _int(tokens[-5]) + _int(tokens[-1])
        except ValueError:
            continue
        rows += 1
        if peak is None or busbw > peak:
            peak, peak_size = busbw, int(tokens[0])
    if not rows:
        return NcclPerf()
    return NcclPerf(present=True, gpus=max(gpus, ranks), avg_busbw=avg, peak_busbw=peak,
                    peak_size=peak_size, wrong=wrong, times_us=times)


def _int(token: str) -> int:
    return int(token) if token.isdigit() else 0


def pcie_link_gbs(speed: str | None, width: int | None) -> float | None:
    """GB/s per direction of a link from lspci's "16GT/s" and width 16 (31.5)."""
    if not speed or not width:
        return None
    match = re.match(r"^([\d.]+)GT/s$", speed)
    if not match:
        return None
    encoding = _ENCODING.get(match.group(1), 128 / 130)
    return round(float(match.group(1)) * width * encoding / 8, 2)


# --- the active mode's fact ------------------------------------------------------------------

TOOL_DIRS = ("/usr/local/cuda/extras/demo_suite", "/usr/local/bin", "/opt/nccl-tests/build",
             "/usr/local/nccl-tests/build", "/usr/lib/nccl-tests")
_FIND = ("find_tool() { command -v \"$1\" 2>/dev/null && return; for d in "
         + " ".join(TOOL_DIRS) + "; do [ -x \"$d/$1\" ] && echo \"$d/$1\" && return; done; "
         "return 1; }")


def bandwidth_command(timeout_s: int) -> str:
    """Run the bandwidth tools present, each bounded by `timeout -k 5 timeout_s`."""
    t = int(timeout_s)
    nccl = "-b 32M -e 512M -f 2 -g \"$n\""
    small = "-b 1K -e 512M -f 2 -g \"$n\""  # from 1 KiB: a batch-1 activation's size too
    return "; ".join([
        _FIND,
        "n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')",
        section_command("gpus", "echo \"$n\""),
        section_command("p2p", "p=$(find_tool p2pBandwidthLatencyTest) && echo \"tool=$p\" && "
                        f"timeout -k 5 {t} \"$p\" 2>&1"),
        section_command("all_reduce", "p=$(find_tool all_reduce_perf) && echo \"tool=$p\" && "
                        f"timeout -k 5 {t} \"$p\" {small} 2>&1"),
        section_command("sendrecv", "p=$(find_tool sendrecv_perf) && echo \"tool=$p\" && "
                        f"timeout -k 5 {t} \"$p\" {nccl} 2>&1"),
    ])


class BandwidthResults(FactModel):
    ran: list[str] = Field(default_factory=list)
    """Tools found and run ("p2pBandwidthLatencyTest", "all_reduce_perf", "sendrecv_perf")."""
    p2p: P2pBandwidth = Field(default_factory=P2pBandwidth)
    all_reduce: NcclPerf = Field(default_factory=NcclPerf)
    sendrecv: NcclPerf = Field(default_factory=NcclPerf)
    errors: dict[str, str] = Field(default_factory=dict)
    """Tool -> last line printed, where it ran but gave no result (timeout, CUDA error)."""


def parse_bandwidth_results(text: str) -> BandwidthResults:
    sections = split_sections(text or "")
    ran: list[str] = []
    errors: dict[str, str] = {}
    parsed: dict[str, Any] = {}
    for name, tool, parse in (("p2p", "p2pBandwidthLatencyTest", parse_p2p_bandwidth),
                              ("all_reduce", "all_reduce_perf", parse_nccl_perf),
                              ("sendrecv", "sendrecv_perf", parse_nccl_perf)):
        body = sections.get(name, "")
        if not body.startswith("tool="):
            continue
        ran.append(tool)
        result = parse(body)
        parsed[name] = result
        if not result.present:
            lines = [x.strip() for x in body.splitlines()[1:] if x.strip()]
            errors[tool] = lines[-1] if lines else "no output (timed out?)"
    return BandwidthResults(ran=ran, errors=errors, **parsed)


class BandwidthTests(FactBase):
    """Runs the bandwidth tests present on the node (GPU load for up to 3 x timeout_s)."""

    @staticmethod
    def default() -> BandwidthResults:
        return BandwidthResults()

    def command(self, timeout_s: int = 120) -> str:
        return bandwidth_command(timeout_s) + "; true"

    def process(self, output: list[str]) -> BandwidthResults:
        return parse_bandwidth_results("\n".join(output))
