"""The Prometheus metrics gpunode writes and their HELP texts: one list for the audit's
textfile (gpunode.roles.audit.metrics, prometheus_client) and the verify timer's script
(templates/verify/gpunode-verify.sh.j2, rendered with these texts), told apart by `source`."""

from __future__ import annotations

from pathlib import Path

#: How a metrics file gpunode wrote begins (prometheus_client's exposition of its first gauge).
WRITTEN_BY_GPUNODE = "# HELP gpunode_"

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


def metrics_path(template: str, host_name: str) -> Path:
    """The host data `gpunode_metrics_file`, with '{host}' replaced by a file-safe host name
    (use it when one run covers several hosts)."""
    safe = "".join(ch if ch.isalnum() or ch in "@._-" else "_" for ch in host_name) or "host"
    return Path(template.replace("{host}", safe))


def check_metrics_file(template: str, host_name: str) -> None:
    """ValueError unless the metrics file may be written: a `.prom` name (node_exporter's
    textfile collector reads only those), and no file there that gpunode did not write
    (a link, a folder, or a file that does not begin as gpunode's metrics do)."""
    path = metrics_path(template, host_name)
    if path.suffix != ".prom":
        raise ValueError(f"{template}: the name must end in .prom (node_exporter's textfile "
                         "collector reads only *.prom)")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ValueError(f"{path} is a link or not a plain file: gpunode writes only its own "
                         "metrics file")
    if not path.exists():
        return
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(len(WRITTEN_BY_GPUNODE))
    except OSError as exc:
        raise ValueError(f"{path} exists and cannot be read ({exc.strerror}): not a file "
                         "gpunode wrote") from None
    if head != WRITTEN_BY_GPUNODE:
        raise ValueError(f"{path} exists and gpunode did not write it (it does not begin with "
                         f"{WRITTEN_BY_GPUNODE!r}): gpunode never overwrites a file of someone "
                         "else's")
