"""The P2P path between each pair of GPUs: PCIe tree, ACS redirect, what the driver allows.

For each GPU pair the audit walks the PCIe tree (sysfs parents, `readlink -f
/sys/bus/pci/devices/*`) from both GPUs up to their lowest common bridge:
- a common bridge (a PCIe switch, or one root port) keeps peer traffic below the CPU, unless
  a bridge on the way has ACS redirect bits set (lspci ACSCtl ReqRedir+/CmpltRedir+/...):
  then every peer request goes up to the root complex and back (slow, or blocked under a
  translating IOMMU); the fix is `pcie_acs_redirect: off`;
- no common bridge: the path crosses the CPU's host bridge (nvidia-smi topo -m PHB), or two
  host bridges / sockets (NODE, SYS): a property of the board, reported as a limit;
- `nvidia-smi topo -p2p r|w` says what the driver allows: anything but OK means peer access
  is off for that pair (GNS: GPU not supported, CNS: chipset not supported, ...).
"""

from __future__ import annotations

from itertools import combinations

from gpunode.facts.gpu_topology import CPU_PATHS, P2P_OK, pair_key
from gpunode.facts.pcie import PcieDevice
from gpunode.ops.pcie import (
    ACS_P2P_BITS,
    ACS_SETPCI_ARGUMENT,
    acs_redirecting,
    selected_devices,
)
from gpunode.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.gpu_checks import smi_gpus
from gpunode.roles.audit.snapshot import NodeSnapshot

KIND = "GPU P2P path"
P2P_MEANING = {"CNS": "chipset not supported", "GNS": "GPU not supported",
               "TNS": "topology not supported", "NS": "not supported",
               "DR": "disabled by regkey", "U": "unknown"}


def split_path(a: list[str], b: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(common bridges root first, a's bridges below them, b's bridges below them)."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return a[:common], a[common:], b[common:]


def _root_bus(path: list[str]) -> str:
    """"0000:00" for a path starting at root port 0000:00:01.1."""
    return path[0].rsplit(":", 1)[0] if path else ""


class PairPath:
    """What the PCIe tree says about one GPU pair."""

    def __init__(self, a: str, b: str, paths: dict[str, list[str]],
                 devices: dict[str, PcieDevice]) -> None:
        self.known = a in paths and b in paths
        path_a, path_b = paths.get(a, []), paths.get(b, [])
        common, below_a, below_b = split_path(path_a, path_b)
        self.roots = [p[0] for p in (path_a, path_b) if p]
        self.common = common
        self.below = below_a + below_b
        self.through_cpu = self.known and not common
        self.same_root_bus = _root_bus(path_a) == _root_bus(path_b)
        self.redirecting = {bdf: acs_redirecting(devices[bdf], ACS_P2P_BITS)
                            for bdf in self.below
                            if bdf in devices and acs_redirecting(devices[bdf], ACS_P2P_BITS)}

    def describe(self) -> str:
        if not self.known:
            return "PCIe path unknown (no sysfs topology)"
        if self.through_cpu:
            where = "its host bridge" if self.same_root_bus else "two host bridges"
            return f"through the CPU ({where}; root ports {', '.join(self.roots)})"
        ports = ", ".join(self.below) or "none"
        return f"below bridge {self.common[-1]} (ports {ports})"


def _labels(snap: NodeSnapshot) -> tuple[list[str], dict[str, int]]:
    """GPU BDFs (lspci, else nvidia-smi) and their nvidia-smi index."""
    index = {g.pci_bdf: g.index for g in smi_gpus(snap)}
    bdfs = [d.bdf for d in snap.gpus]
    bdfs += [b for b in index if b not in bdfs]
    return bdfs, index


def _name(bdf: str, index: dict[str, int]) -> str:
    return f"GPU{index[bdf]}" if bdf in index else f"GPU {bdf}"


def check_p2p_paths(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """One line per GPU pair: where P2P traffic goes and whether it is blocked."""
    bdfs, index = _labels(snap)
    if len(bdfs) < 2:
        why = "one GPU: no GPU-to-GPU path" if bdfs else "not present: no NVIDIA GPU on this node"
        return [not_applicable(KIND, why, kind=KIND)]
    devices = {d.bdf: d for d in snap.pcie}
    selected = {d.bdf for d in selected_devices(snap.pcie, profile.pcie_selector)}
    topo = snap.topology
    checks = []
    for a, b in combinations(bdfs, 2):
        pair = PairPath(a, b, snap.pci_paths or {}, devices)
        key = pair_key(index[a], index[b]) if a in index and b in index else None
        checks.append(_pair_check(profile, f"{_name(a, index)}-{_name(b, index)}", pair,
                                  key, topo, a in selected and b in selected))
    return checks


def _driver_says(topo, key: str | None) -> tuple[str, list[str]]:
    """("read OK, write OK" or "", blocked directions with their codes)."""
    if topo is None or key is None:
        return "", []
    parts, blocked = [], []
    for label, matrix in (("read", topo.p2p_read), ("write", topo.p2p_write)):
        code = matrix.get(key)
        if code is None:
            continue
        parts.append(f"{label} {code}")
        if code != P2P_OK:
            blocked.append(f"{label} {code} ({P2P_MEANING.get(code, 'not OK')})")
    return ", ".join(parts), blocked


def _pair_check(profile: NodeProfile, label: str, pair: PairPath, key: str | None, topo,
                selected: bool) -> Check:
    name = f"{label} P2P path"
    link = (topo.links.get(key) if topo is not None and key else None) or ""
    driver, blocked = _driver_says(topo, key)
    live = (f"{link}: " if link else "") + pair.describe()
    if driver:
        live += f"; p2p {driver}"
    if pair.redirecting:
        bridges = ", ".join(f"{bdf} ({'+'.join(bits)})" for bdf, bits in pair.redirecting.items())
        fixed = profile.pcie_acs_redirect == "off" and selected
        fix = (f"{DEPLOY_FIX} (pcie_acs_redirect: off clears them now and at boot)" if fixed
               else "set gpunode.pcie_acs_redirect: off (deploy/site.py writes " +
               f"{ACS_SETPCI_ARGUMENT} on these bridges, now and at boot)")
        return Check(name=name, status="P0", live=f"{live}; ACS redirect on {bridges}",
                     want="peer traffic stays in the switch", kind=KIND, fix=fix,
                     deploy_fixes=fixed,
                     note="ACS redirect sends every peer request up to the root complex; "
                     "clearing it merges the IOMMU isolation of these devices")
    if blocked:
        gpu_limit = all("GNS" in b for b in blocked)
        return Check(name=name, status="limit" if gpu_limit else "P2", live=live,
                     want="p2p read OK, write OK", kind=KIND,
                     fix="none: the GPU does not support P2P (GeForce): NCCL uses shared "
                     "memory" if gpu_limit else "the driver refuses P2P on this path: check "
                     "IOMMU mode (iommu=pt), BIOS ACS/P2P settings and the path above",
                     note=f"driver: {'; '.join(blocked)}")
    if pair.through_cpu or link in CPU_PATHS:
        return Check(name=name, status="limit", live=live, kind=KIND,
                     fix="none on this board: keep a tensor-parallel group on GPUs below one "
                     "PCIe switch where the board has one",
                     note="P2P between root ports crosses the CPU's host bridge: slower "
                     "than a switch, and across sockets (SYS) slower still")
    return ok(name, live, kind=KIND)
