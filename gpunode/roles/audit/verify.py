"""The end of every deploy: read the node back and print what is still open or pending.

It is an operation that never yields a command, so a converged node still shows zero changes;
it runs when the deploy executes, after every other operation: when any of them changed the
node, it reads the node again in one command (a second snapshot); on a converged node the
deploy's own snapshot is the node, and the verify reads nothing of its own. It runs the audit's
checks (gpunode.roles.audit.checks.audit_checks), prints every check that is not ok with its
fix, then the run's summary (gpunode.roles.audit.summary: changed, unchanged, pending reboot
or restart, refused, what "verified N/M" counts), and writes the metrics file when the host
data gpunode_metrics_file names one. It never fails the deploy: the gate is deploy/audit.py.
"""

from __future__ import annotations

import time

from pyinfra import host, logger
from pyinfra.api import operation

from gpunode.facts.snapshot import Needs, stale_if_changed
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import (
    checks_for_changes,
    current_state,
    in_execute_stage,
    operation_results,
    unproxied,
)
from gpunode.roles.audit.checks import audit_checks, tuning_checks
from gpunode.roles.audit.metrics import METRICS_FILE_DATA, write_node_metrics
from gpunode.roles.audit.snapshot import audit_needs, gather_snapshot
from gpunode.roles.audit.summary import open_lines, run_summary


def needs(profile: NodeProfile) -> Needs:
    """What the verify reads, to read with the deploy's own at its start: all of it in a run
    without change detection (-y), so a converged node is read in one command; without the
    audit's parts when change detection runs (--dry, the interactive run), as a dry run never
    verifies (the interactive run reads them when it verifies)."""
    wanted = audit_needs(profile)
    return wanted if not checks_for_changes() else wanted.model_copy(update={"audit": False})


@operation(is_idempotent=True)
def verify_node(profile: NodeProfile):
    """
    Read the live node back, report every setting that differs, and print the run's summary
    (changes nothing).

    + profile: the host's NodeProfile
    """
    if not in_execute_stage():
        host.noop("verify after the other operations ran")
        return
    stale_if_changed()  # the node changed under the run: read it again
    snap = gather_snapshot(profile)
    checks = audit_checks(profile, snap)
    settings = tuning_checks(profile, snap)
    written = write_node_metrics(host.name, host.data.get(METRICS_FILE_DATA), settings, checks,
                                 time.time())
    for line in open_lines(host.name, checks):
        logger.warning(line)
    changed, unchanged, failed = operation_results(current_state(), unproxied(host))
    for line in run_summary(host.name, changed, unchanged, failed, checks):
        logger.info(line)
    if written:
        logger.info(f"{host.name}: metrics written to {written}")
    host.noop(f"verified: {sum(c.open for c in checks)} open")
    yield from ()
