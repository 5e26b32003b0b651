"""The audit's view of the node: the run's snapshot (gpunode.facts.snapshot) with the audit's
parts, and in active mode the bandwidth tests' measurements.

The checks are pure functions of a `NodeSnapshot` (the Snapshot type): the tuning parts
(cmdline, cpu, kernel, pcie, mrrs_refused) are always read; the audit's parts (IOMMU, PCI
topology, NVIDIA report, NVLink, driver, kernels, Proxmox, containers) come with
`audit_needs`; a part not read is None, and the checks that need it say "not read".
"""

from __future__ import annotations

from pyinfra import host

from gpunode.facts.bandwidth import BandwidthResults, BandwidthTests
from gpunode.facts.engine_metrics import EngineMetrics, EngineNumbers, metrics_url
from gpunode.facts.sections import as_model
from gpunode.facts.snapshot import Needs, Snapshot, read_node
from gpunode.profile.node import NodeProfile
from gpunode.profile.nvidia_options import module_param_key

NodeSnapshot = Snapshot
"""What the checks read (one name for the audit's readers)."""


def audit_needs(profile: NodeProfile) -> Needs:
    """What the audit reads: the profile's sysctls and modules, the audit's parts, and the
    decode model's config.json where the profile names one (decode_model_config)."""
    config = profile.decode_model_config
    return Needs(sysctl_keys=tuple(profile.sysctls), modules=tuple(profile.modules), audit=True,
                 module_params=tuple(module_param_key(o) for o in profile.nvidia_module_options),
                 contents=(config,) if config else ())


def gather_snapshot(profile: NodeProfile, active_timeout_s: int | None = None) -> Snapshot:
    """The run's snapshot of the current host with the audit's parts (read in one command
    unless the run already holds them).

    With `active_timeout_s` (the audit's active mode only) it also runs the bandwidth tests
    present on the node (BandwidthTests), each bounded by that many seconds."""
    snap = read_node(audit_needs(profile))
    if active_timeout_s is None:
        return snap
    measured = host.get_fact(BandwidthTests, timeout_s=int(active_timeout_s))
    return snap.model_copy(update={"bandwidth": as_model(BandwidthResults, measured)})


def read_engine_metrics(snap: Snapshot, timeout_s: int) -> dict[int, EngineNumbers]:
    """The engines' own /metrics (opt-in: host data gpunode_audit_engine_metrics=1), each
    read on the node at the address the engine listens on, bounded by timeout_s; {pid:
    numbers}, an engine whose metrics can't be reached from the host says why."""
    targets, numbers = [], {}
    for p in snap.engines.processes if snap.engines else []:
        url, why = metrics_url(p)
        if url is None:
            numbers[p.pid] = EngineNumbers(url="", error=why)
        else:
            targets.append((p.pid, p.engine, url))
    if targets:
        read = host.get_fact(EngineMetrics, targets=targets, timeout_s=int(timeout_s))
        numbers.update(read if isinstance(read, dict) else {})
    return numbers
