"""The end of every deploy: read the node back and print what is still open or pending.

It is an operation that never yields a command, so a converged node still shows zero changes;
it reads the live node when it executes, after every other operation of the deploy: what the
deploy's operations changed, in one command (the rest is still cached from the deploy's
prefetch, so a converged node is verified without a read of its own). It runs
the audit's checks (gpunode.roles.audit.checks.audit_checks) and prints every line that is not ok,
then what only waits for a reboot or a container restart. It never fails the deploy: the
gate is deploy/audit.py.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import operation

from gpunode.roles.audit.checks import audit_checks, tuning_checks
from gpunode.roles.audit.report import pending_lines
from gpunode.roles.audit.snapshot import AUDIT_READ, gather_snapshot, verify_reads
from gpunode.roles.facts.bundle import FactRead
from gpunode.roles.facts.cache import prefetch
from gpunode.roles.profile.check import summary_lines
from gpunode.roles.profile.node import NodeProfile
from gpunode.roles.pyinfra_adapter import checks_for_changes, in_execute_stage


def verify_prefetch(profile: NodeProfile) -> list[FactRead]:
    """The verify's reads, to prefetch with the deploy's own at its start: all of them in a
    run without change detection (-y), so a converged node is read in one command; without
    AuditFacts when change detection runs (--dry, the interactive run), as a dry run never
    verifies (the interactive run reads it when it verifies)."""
    reads = verify_reads(profile)
    return reads if not checks_for_changes() else [
        read for read in reads if read is not AUDIT_READ]


@operation(is_idempotent=True)
def verify_node(profile: NodeProfile):
    """
    Read the live node back and report every setting that differs (changes nothing).

    + profile: the host's NodeProfile
    """
    if not in_execute_stage():
        host.noop("verify after the other operations ran")
        return
    prefetch(verify_reads(profile))  # what the deploy changed, read back in one command
    snap = gather_snapshot(profile)
    checks = audit_checks(profile, snap)
    for check in tuning_checks(profile, snap):
        if check.status == "limit":  # a setting of this profile the hardware refused
            logger.warning(f"{host.name}: limit {check.name}: {check.fix}")
    for line in summary_lines(host.name, checks):
        is_open = any(f" {rank} " in line for rank in ("P0", "P1"))
        (logger.warning if is_open else logger.info)(line)
    for line in pending_lines(host.name, checks):
        logger.warning(line)
    host.noop(f"verified: {sum(c.open for c in checks)} open")
    yield from ()
