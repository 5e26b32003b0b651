"""The GPU half of the verify timer: what gpunode sets on the GPUs and the bridges above them
(persistence mode, power limits, ACS redirect off), read back, and the GPUs' health (Xid events
since boot, pending row remaps or page retirements, PCIe links trained down).

`gpu_checks()` adds their entries to the timer's one list (verify_timer.verify_checks);
`gpu_script_variables()` is the rules the script reads them with, every one gpunode's own:
where nvidia-smi's report holds each value and its words for "no value"
(gpunode.facts.nvidia, gpu_details), which lines are NVIDIA Xid lines and what each Xid is
and the statuses of the GPU findings, as the audit ranks them (gpunode.facts.gpu_health),
the ACS register and redirect mask (gpunode.ops.pcie), which PCI
functions are NVIDIA GPUs and the link generations (gpunode.facts.pcie). Pure.
"""

from __future__ import annotations

from gpunode.facts.gpu_details import (
    CLOCK_REASON_ACTIVE,
    IDLE_REASON_PATHS,
    REPAIR_PENDING_PATHS,
    SMI_YES,
)
from gpunode.facts.gpu_health import (
    GPU_CLASS,
    LINK_NARROW_STATUS,
    LINK_SLOW_STATUS,
    NVIDIA_VENDOR,
    REPAIR_PENDING_STATUS,
    XID_MARKER,
    XID_MEANINGS,
    XID_SED,
    XID_STATUS,
)
from gpunode.facts.nvidia import (
    PERSISTENCE_ENABLED,
    PERSISTENCE_PATH,
    POWER_LIMIT_PATHS,
    SMI_MISSING,
    NvidiaGpu,
)
from gpunode.facts.pcie import SPEED_GEN, id_patterns
from gpunode.ops.nvidia import power_limit_targets
from gpunode.ops.pcie import acs_script_variables
from gpunode.profile.metrics import GPU_HEALTH_GAUGES, METRIC_HELP
from gpunode.profile.node import NodeProfile

Check = tuple[str, str, str, str]
"""verify_timer.Check (check function, name, wanted value, where), named here too: the role's
__init__ imports this module."""

SMI_TIMEOUT_S = 60
"""How long the timer waits for `nvidia-smi -q -x`: it can hang for minutes on a GPU that fell
off the bus; after this the GPUs count as not reported and the other checks still write."""

HEALTH_CHECKS: list[Check] = [
    ("gpu_xids", "Xid events", "no Xid", ""),
    ("gpu_memory", "memory repair", "no pending remap", ""),
    ("gpu_link", "PCIe link", "full width, full speed when busy", ""),
]
"""Read on every node with the timer: nothing to set, only to watch (skipped without GPUs)."""


def gpu_checks(profile: NodeProfile, gpus: list[NvidiaGpu]) -> list[Check]:
    """The timer's GPU entries: the GPU settings the profile makes gpunode set, then the
    health checks. Power limits are resolved per GPU index from the deploy's nvidia-smi report
    (`power_limit_targets`, as the deploy sets them: 'default' and 'max' become watts); where
    the deploy saw no GPU there is no power limit entry."""
    checks: list[Check] = []
    if profile.gpu_persistence:
        checks.append(("gpu_persistence", "persistence mode", PERSISTENCE_ENABLED, ""))
    if profile.gpu_power_limit is not None:
        targets, _ = power_limit_targets(profile.gpu_power_limit, gpus)
        checks += [("gpu_power_limit", f"GPU{index} power limit", str(watts), str(index))
                   for index, watts in sorted(targets.items())]
    if profile.pcie_acs_redirect == "off":
        checks.append(("acs", "ACS", "redirect off", ""))
    return checks + HEALTH_CHECKS


def xid_status_text() -> str:
    """'13=P2 31=P2 ... 79=P0 ...': each known Xid's finding (ok: none), as the audit ranks it."""
    return " ".join(f"{xid}={XID_STATUS[severity]}"
                    for xid, (_, severity) in sorted(XID_MEANINGS.items()))


def gpu_script_variables() -> dict:
    """The rules the script reads the GPU entries with, as data (see the module docstring)."""
    return {
        "gpu_patterns": id_patterns(NVIDIA_VENDOR, None, [GPU_CLASS]),
        "pcie_gens": " ".join(f"{speed.removesuffix('GT/s')}={gen}"
                              for speed, gen in SPEED_GEN.items()),
        "smi_paths": sorted({PERSISTENCE_PATH, *POWER_LIMIT_PATHS, *REPAIR_PENDING_PATHS,
                             *IDLE_REASON_PATHS}),
        "smi_missing": list(SMI_MISSING),
        "smi_timeout_s": SMI_TIMEOUT_S,
        "smi_persistence": PERSISTENCE_PATH,
        "smi_power_limit": list(POWER_LIMIT_PATHS),
        "smi_repair_pending": list(REPAIR_PENDING_PATHS),
        "smi_idle": list(IDLE_REASON_PATHS),
        "smi_yes": SMI_YES,
        "smi_active": CLOCK_REASON_ACTIVE,
        "xid_marker": XID_MARKER,
        "xid_sed": XID_SED,
        "xid_status": xid_status_text(),
        "xid_other": XID_STATUS["error"],
        "repair_pending_status": REPAIR_PENDING_STATUS,
        "link_narrow_status": LINK_NARROW_STATUS,
        "link_slow_status": LINK_SLOW_STATUS,
        **acs_script_variables(),
        "metric_help": METRIC_HELP,
        "gpu_gauges": list(GPU_HEALTH_GAUGES),
    }
