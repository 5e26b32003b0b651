"""The audit operation: read the node, print its report, fail the host when P0/P1 are open.

`audit_node` runs no command on the node: it reads facts
(gpunode.roles.audit.snapshot.gather_snapshot, six read-only commands), prints the report
through pyinfra's logger and writes the local report files. It reads and prints once per host,
at the first evaluation pyinfra makes of it:
- `pyinfra INV deploy/audit.py --dry` and the interactive run: during change detection;
- `pyinfra -y INV deploy/audit.py` (cron/CI): during execution (-y skips change detection).
During execution, when any P0 or P1 is open, it logs the verdict "HOST: audit failed: N open
(P0 a, P1 b): not ready (the report is above)" and makes the run exit 1
(gpunode.pyinfra_adapter.fail_run_for): the host stays active, so pyinfra goes on with every
other host and ends the way a run ends, with its results table, not with "Error: executed 0
commands" / "No hosts remaining!" (a failing command or a raised exception would; an exception
would also end the whole run at the first failing host).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pyinfra import host, logger
from pyinfra.api import operation

from gpunode.ops.changes import wrapped
from gpunode.profile.check import Check, open_count
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import fail_run_for, in_execute_stage, run_store
from gpunode.roles.audit.checks import audit_checks, tuning_checks
from gpunode.roles.audit.engines_report import engine_rows, engine_series
from gpunode.roles.audit.metrics import METRICS_FILE_DATA, write_node_metrics
from gpunode.roles.audit.report import EngineRows, counts, render_table, write_reports
from gpunode.roles.audit.snapshot import gather_snapshot, read_engine_metrics

REPORTS_ATTRIBUTE = "gpunode_audit_reports"


def _reports() -> dict[str, list[Check]]:
    """This run's reports by host, kept on the pyinfra State (change detection and execution
    evaluate the operation twice; the node is read once)."""
    return run_store(REPORTS_ATTRIBUTE)


def _verdicts() -> dict[str, bool]:
    """The hosts whose "not ready" verdict this run has said (once each)."""
    return run_store(REPORTS_ATTRIBUTE + "_verdicts")


def failure_message(host_name: str, checks: list[Check]) -> str:
    c = counts(checks)
    return (
        f"{host_name}: audit failed: {c['P0'] + c['P1']} open (P0 {c['P0']}, P1 {c['P1']}): "
        "not ready (the report is above)"
    )


def report_node(
    host_name: str, checks: list[Check], formats: Iterable[str], report_dir: str,
    engines: EngineRows = None,
) -> None:
    """Print the report and write the local files."""
    text = render_table(host_name, checks, engines)
    (logger.warning if open_count(checks) else logger.info)("\n" + text)
    for path in write_reports(host_name, checks, formats, report_dir, engines):
        logger.info(f"{host_name}: report written to {path}")


@operation(is_idempotent=True)
def audit_node(profile: NodeProfile, formats: tuple[str, ...] = (), report_dir: str = "reports",
               active_timeout_s: int | None = None,
               engine_metrics_timeout_s: int | None = None):
    """
    Read the live node and report it against the profile (changes nothing on the node).

    + profile: the host's NodeProfile
    + formats: report files to write locally: ("json",), ("md",), both or none
    + report_dir: local folder for <host>.json / <host>.md
    + active_timeout_s: active mode: run the bandwidth tests present, each bounded by it
    + engine_metrics_timeout_s: read the engines' own /metrics, each bounded by it (opt-in)
    """
    reports = _reports()
    checks = reports.get(host.name)
    if checks is None:
        snap = gather_snapshot(profile, active_timeout_s)
        checks = audit_checks(profile, snap)
        reports[host.name] = checks
        numbers = (read_engine_metrics(snap, engine_metrics_timeout_s)
                   if engine_metrics_timeout_s else None)
        engines = engine_rows(snap, checks, numbers, profile)
        report_node(host.name, checks, formats, report_dir, engines)
        written = write_node_metrics(host.name, host.data.get(METRICS_FILE_DATA),
                                     tuning_checks(profile, snap), checks, time.time(),
                                     engine_series(engines))
        if written:
            logger.info(f"{host.name}: metrics written to {written}")
    if in_execute_stage() and open_count(checks) and host.name not in _verdicts():
        _verdicts()[host.name] = True
        logger.warning(wrapped(failure_message(host.name, checks)))
        fail_run_for(host)
    host.noop(f"audited: {open_count(checks)} open (P0/P1)")
    yield from ()
