"""Prometheus textfile-collector metrics of a node's checks (node_exporter reads *.prom).

The same metric names come from two places, told apart by the `source` label:
- `source="audit"`: deploy/audit.py and deploy/site.py's verify, when the host data
  `gpunode_metrics_file` names a file (written where pyinfra runs: with @local, the node);
- `source="timer"`: gpunode-verify.timer on the node (templates/verify/gpunode-verify.sh.j2).

    gpunode_setting_ok{setting}              1 read back as the profile wants, 0 drifted
    gpunode_findings{severity}               open checks: P0, P1, P2 and hardware limits
    gpunode_pending_reboot                   1 when a change only waits for a reboot
    gpunode_pending_restart                  1 when a container only waits for a restart
    gpunode_last_check_timestamp_seconds     when the check ran (Unix time)

Files are written whole: a temporary file in the same directory, renamed over the target.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpunode.profile.check import Check

SETTING_STATUSES = frozenset({"ok", "P0", "P1", "P2"})
SEVERITIES = ("P0", "P1", "P2", "limit")
HELP = {
    "gpunode_setting_ok": "1 when the setting reads back as the gpunode profile wants, "
    "0 when it drifted",
    "gpunode_findings": "gpunode checks not ok, by severity (P0 fix now, P1 needs a reboot "
    "or restart, P2 minor, limit the hardware's own)",
    "gpunode_pending_reboot": "1 when a gpunode change is in place and waits for a reboot",
    "gpunode_pending_restart": "1 when a container waits for a restart to get its gpunode "
    "settings",
    "gpunode_last_check_timestamp_seconds": "Unix time of the last gpunode check",
}


def label_value(text: str) -> str:
    """Escape a label value for the text format (backslash, double quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(source: str, **extra: str) -> str:
    pairs = [("source", source), *extra.items()]
    return "{" + ",".join(f'{k}="{label_value(v)}"' for k, v in pairs) + "}"


def _family(name: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def render_metrics(settings: list[Check], checks: list[Check], source: str,
                   now: float) -> str:
    """The metrics file: settings = the profile's settings (tuning checks), checks = every
    check of the run (findings and pending work)."""
    seen: set[str] = set()
    setting_samples = []
    for check in settings:
        if check.status in SETTING_STATUSES and check.name not in seen:
            seen.add(check.name)
            setting_samples.append((_labels(source, setting=check.name),
                                    1.0 if check.status == "ok" else 0.0))
    findings = {severity: 0 for severity in SEVERITIES}
    for check in checks:
        if check.status in findings:
            findings[check.status] += 1
    waiting = {what: any(c.pending == what and c.status != "ok" for c in checks)
               for what in ("reboot", "restart")}
    lines = [
        *_family("gpunode_setting_ok", setting_samples),
        *_family("gpunode_findings", [(_labels(source, severity=s), n)
                                      for s, n in findings.items()]),
        *_family("gpunode_pending_reboot", [(_labels(source), float(waiting["reboot"]))]),
        *_family("gpunode_pending_restart", [(_labels(source), float(waiting["restart"]))]),
        *_family("gpunode_last_check_timestamp_seconds", [(_labels(source), round(now))]),
    ]
    return "\n".join(lines) + "\n"


def metrics_path(template: str, host_name: str) -> Path:
    """The host data `gpunode_metrics_file`, with '{host}' replaced by a file-safe host name
    (use it when one run covers several hosts)."""
    safe = "".join(ch if ch.isalnum() or ch in "@._-" else "_" for ch in host_name) or "host"
    return Path(template.replace("{host}", safe))


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write text to path whole: a temporary file beside it (not *.prom, so node_exporter
    never reads it half-written), fsync, rename over path."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
