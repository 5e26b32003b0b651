"""The Prometheus metrics gpunode writes and their HELP texts: one list for the audit's
textfile (gpunode.roles.audit.metrics, prometheus_client) and the verify timer's script
(templates/verify/gpunode-verify.sh.j2, rendered with these texts), told apart by `source`."""

from __future__ import annotations

METRIC_HELP = {
    "gpunode_setting_ok": "1 when the setting reads back as the gpunode profile wants, "
    "0 when it drifted",
    "gpunode_setting_pending": "1 when a setting that does not read back yet is in place and "
    "waits for a reboot or restart (not drift)",
    "gpunode_findings": "gpunode checks not ok, by severity (P0 fix now, P1 needs a reboot "
    "or restart, P2 minor, limit the hardware's own)",
    "gpunode_pending_reboot": "1 when a gpunode change is in place and waits for a reboot",
    "gpunode_pending_restart": "1 when a container waits for a restart to get its gpunode "
    "settings",
    "gpunode_last_check_timestamp_seconds": "Unix time of the last gpunode check",
    "gpunode_gpu_xid_events": "NVIDIA Xid events (NVRM: Xid kernel log lines) of a GPU since "
    "boot",
    "gpunode_gpu_xid_critical": "1 when a GPU logged a critical NVIDIA Xid since boot (one "
    "gpunode counts as P0: 79 fallen off the bus, 48 double-bit ECC, ...)",
    "gpunode_verify_interval_seconds": "How often gpunode-verify.timer runs (verify_interval)",
    "gpunode_gpu_remap_pending": "1 when a GPU's row remap or page retirement waits for a GPU "
    "reset or reboot",
    "gpunode_gpu_link_downtrained": "1 when a GPU's PCIe link is narrower than both ends "
    "support, or slower while the GPU is busy",
}

GPU_HEALTH_GAUGES = ("gpunode_gpu_xid_events", "gpunode_gpu_xid_critical",
                     "gpunode_gpu_remap_pending",
                     "gpunode_gpu_link_downtrained")
"""The verify timer's GPU health gauges, one sample per GPU (label `gpu`: its BDF)."""
