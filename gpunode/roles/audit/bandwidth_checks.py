"""Measured, not assumed: the audit's active mode compares measured GPU bandwidth with what
the PCIe links carry (lspci LnkSta; LnkCap where the idle link was read trained down).

- each GPU pair's unidirectional P2P bandwidth (p2pBandwidthLatencyTest) against the slower
  of the two GPUs' links: below 60 % is worth a look (P2), and a pair without peer access
  (connectivity 0) copies through host memory (P2);
- all_reduce_perf / sendrecv_perf peak bus bandwidth against the slowest GPU link: a ring
  all-reduce over PCIe reaches about 65 % of it; below 50 % is worth a look (P2).

Only with the active mode (deploy/audit.py --data gpunode_audit_active=1): no rows otherwise.
"""

from __future__ import annotations

from gpunode.facts.bandwidth import NcclPerf, pcie_link_gbs
from gpunode.facts.pcie import PcieDevice
from gpunode.profile.check import Check, not_applicable, ok
from gpunode.roles.audit.gpu_checks import smi_gpus
from gpunode.roles.audit.snapshot import NodeSnapshot

P2P_MIN_RATIO = 0.6
ALLREDUCE_MIN_RATIO = 0.5
TOOLS = "p2pBandwidthLatencyTest, all_reduce_perf, sendrecv_perf"


def link_gbs(device: PcieDevice) -> tuple[float | None, str]:
    """(GB/s per direction, what it was read from) of a GPU's PCIe link."""
    if device.lnksta_speed and device.lnksta_width and not device.lnksta_downgraded:
        return pcie_link_gbs(device.lnksta_speed, device.lnksta_width), (
            f"LnkSta {device.lnksta_speed} x{device.lnksta_width}")
    return pcie_link_gbs(device.lnkcap_speed, device.lnkcap_width), (
        f"LnkCap {device.lnkcap_speed} x{device.lnkcap_width} (LnkSta read trained down)")


def _gpu_links(snap: NodeSnapshot) -> dict[int, tuple[float | None, str]]:
    """By nvidia-smi index (else lspci order, the PCI bus order nvidia-smi also uses)."""
    index = {g.pci_bdf: g.index for g in smi_gpus(snap)}
    links = {}
    for position, device in enumerate(snap.gpus):
        links[index.get(device.bdf, position)] = link_gbs(device)
    return links


def check_measured_bandwidth(snap: NodeSnapshot) -> list[Check]:
    results = snap.bandwidth
    if results is None:
        return []
    if not results.ran:
        return [not_applicable("GPU bandwidth (measured)", f"no bandwidth tool on the node "
                               f"({TOOLS}): nothing measured", kind="GPU bandwidth (measured)")]
    links = _gpu_links(snap)
    checks = [Check(name=f"{tool} (measured)", status="P2", live=f"no result: {line}",
                    kind="GPU bandwidth (measured)", fix="run it by hand to see why")
              for tool, line in results.errors.items()]
    if results.p2p.present:
        checks += _p2p_pairs(results.p2p, links)
    for label, perf in (("all-reduce", results.all_reduce), ("send/recv", results.sendrecv)):
        if perf.present:
            checks.append(_collective(label, perf, links))
    return checks


def _p2p_pairs(p2p, links) -> list[Check]:
    kind = "GPU P2P bandwidth (measured)"
    checks = []
    for key, measured in p2p.unidirectional_p2p.items():
        a, b = (int(x) for x in key.split("-"))
        name = f"GPU{a}-GPU{b} P2P bandwidth"
        limits = [links[i][0] for i in (a, b) if i in links and links[i][0]]
        limit = min(limits) if limits else None
        live = f"{measured:g} GB/s unidirectional"
        if key in p2p.bidirectional_p2p:
            live += f", {p2p.bidirectional_p2p[key]:g} GB/s bidirectional"
        if limit is not None:
            live += f" (PCIe link {limit:g} GB/s per direction: {measured / limit:.0%})"
        if p2p.connectivity and not p2p.connectivity.get(key, True):
            checks.append(Check(name=name, status="P2", live=live, want="peer access", kind=kind,
                                fix="see the GPU P2P path rows: the driver gives this pair no "
                                "peer access", note="no P2P: copies are staged through host "
                                "memory"))
        elif limit is not None and measured < P2P_MIN_RATIO * limit:
            checks.append(Check(name=name, status="P2", live=live,
                                want=f">= {P2P_MIN_RATIO:.0%} of the link", kind=kind,
                                fix="check the P2P path (ACS, IOMMU, through the CPU) and the "
                                "link width/speed under load"))
        else:
            checks.append(ok(name, live, kind=kind))
    return checks


def _collective(label: str, perf: NcclPerf, links) -> Check:
    name, kind = f"NCCL {label} bus bandwidth", "NCCL bus bandwidth (measured)"
    slowest = min((v[0] for v in links.values() if v[0]), default=None)
    live = f"peak {perf.peak_busbw:g} GB/s busbw"
    if perf.peak_size:
        live += f" at {perf.peak_size // 1048576} MiB"
    if perf.avg_busbw is not None:
        live += f", average {perf.avg_busbw:g} GB/s"
    live += f", {perf.gpus} GPUs"
    if perf.wrong:
        return Check(name=name, status="P1", live=f"{live}; {perf.wrong} wrong results",
                     want="0 wrong", kind=kind,
                     fix="results are corrupt: check P2P (a broken peer path returns garbage) "
                     "and run NCCL_P2P_DISABLE=1 to compare")
    if slowest is None or perf.peak_busbw is None:
        return ok(name, live, kind=kind)
    live += f" (slowest GPU link {slowest:g} GB/s: {perf.peak_busbw / slowest:.0%})"
    if perf.peak_busbw < ALLREDUCE_MIN_RATIO * slowest:
        return Check(name=name, status="P2", live=live,
                     want=f">= {ALLREDUCE_MIN_RATIO:.0%} of the slowest link", kind=kind,
                     fix="check the GPU P2P path rows (P2P off or through the CPU halves it), "
                     "NCCL_P2P_LEVEL, and link speed under load")
    return ok(name, live, kind=kind)
