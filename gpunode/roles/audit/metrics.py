"""Prometheus textfile-collector metrics of a node's checks (node_exporter reads *.prom).

The same metric names come from two places, told apart by the `source` label:
- `source="audit"`: deploy/audit.py and deploy/site.py's verify, when the host data
  `gpunode_metrics_file` names a file (written where pyinfra runs: with @local, the node);
- `source="timer"`: gpunode-verify.timer on the node (templates/verify/gpunode-verify.sh.j2).

    gpunode_setting_ok{setting}              1 read back as the profile wants, 0 drifted
    gpunode_setting_pending{setting}         1 in place, waits for a reboot or restart
    gpunode_findings{severity}               open checks: P0, P1, P2 and hardware limits
    gpunode_pending_reboot                   1 when a change only waits for a reboot
    gpunode_pending_restart                  1 when a container only waits for a restart
    gpunode_last_check_timestamp_seconds     when the check ran (Unix time)
    gpunode_gpu_xid_events{gpu}              (timer) NVRM Xid lines of the GPU since boot
    gpunode_gpu_remap_pending{gpu}           (timer) 1 when a row remap / page retirement waits
    gpunode_gpu_link_downtrained{gpu}        (timer) 1 when the GPU's PCIe link trained down

The HELP texts are gpunode.profile.metrics.METRIC_HELP (the timer's script is rendered with
them too).

prometheus_client renders the text exposition format and writes the file whole (a temporary
file in the same directory, renamed over the target). It is imported where the metrics are
rendered, so a run that writes no metrics file (site.py's verify without
`gpunode_metrics_file`) never imports it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gpunode.profile.check import Check
from gpunode.profile.metrics import METRIC_HELP, metrics_path

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

#: The host data that names the metrics file the audit and site.py's verify write.
METRICS_FILE_DATA = "gpunode_metrics_file"

SETTING_STATUSES = frozenset({"ok", "P0", "P1", "P2"})
SEVERITIES = ("P0", "P1", "P2", "limit")
HELP = METRIC_HELP


def _gauge(registry: CollectorRegistry, name: str, *labels: str) -> Gauge:
    from prometheus_client import Gauge

    return Gauge(name, HELP[name], ["source", *labels], registry=registry)


def metrics_registry(settings: list[Check], checks: list[Check], source: str,
                     now: float) -> CollectorRegistry:
    """The metrics of one check run: settings = the profile's settings (tuning checks),
    checks = every check of the run (findings and pending work)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    setting_ok = _gauge(registry, "gpunode_setting_ok", "setting")
    setting_pending = _gauge(registry, "gpunode_setting_pending", "setting")
    seen: set[str] = set()
    for check in settings:
        if check.status in SETTING_STATUSES and check.name not in seen:
            seen.add(check.name)
            setting_ok.labels(source, check.name).set(1 if check.status == "ok" else 0)
            if check.status != "ok" and check.pending:
                setting_pending.labels(source, check.name).set(1)
    findings = _gauge(registry, "gpunode_findings", "severity")
    for severity in SEVERITIES:
        findings.labels(source, severity).set(sum(c.status == severity for c in checks))
    for what in ("reboot", "restart"):
        waiting = any(c.pending == what and c.status != "ok" for c in checks)
        _gauge(registry, f"gpunode_pending_{what}").labels(source).set(int(waiting))
    _gauge(registry, "gpunode_last_check_timestamp_seconds").labels(source).set(now)
    return registry


def render_metrics(settings: list[Check], checks: list[Check], source: str,
                   now: float) -> str:
    """The metrics as the Prometheus text exposition format (prometheus_client's)."""
    from prometheus_client import generate_latest

    return generate_latest(metrics_registry(settings, checks, source, now)).decode()


def write_textfile(path: Path, registry: CollectorRegistry, mode: int = 0o644) -> None:
    """Write the metrics to path whole, in prometheus_client's exposition format
    (generate_latest), through write_atomic: readable by node_exporter whatever the umask."""
    from prometheus_client import generate_latest

    write_atomic(path, generate_latest(registry).decode(), mode)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write text to path whole: a temporary file beside it (not *.prom, so node_exporter
    never reads it half-written; created new, O_EXCL, so never a link), fsync, rename over
    path (a link there is replaced, never followed). A folder on the way that is a symlink
    is refused: the file would land somewhere else than it says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.path.abspath(path.parent)
    if os.path.realpath(folder) != folder:
        raise ValueError(f"{path}: {folder} is or goes through a symlink (to "
                         f"{os.path.realpath(folder)}): name the real folder")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_node_metrics(host_name: str, target: object, settings: list[Check],
                       checks: list[Check], now: float,
                       extra: Iterable[str] = ()) -> Path | None:
    """Write the audit's metrics where the host data `gpunode_metrics_file` says (None: not
    asked for), with `extra` lines (the engines' series) after them; returns the path."""
    if not target:
        return None
    path = metrics_path(str(target), host_name)
    more = "".join(f"{line}\n" for line in extra)
    write_atomic(path, render_metrics(settings, checks, "audit", now) + more)
    return path
