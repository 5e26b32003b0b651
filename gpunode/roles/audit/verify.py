"""The end of every deploy: read the node back and print what is still open or pending.

It is an operation that never yields a command, so a converged node still shows zero changes;
it reads the live node when it executes, after every other operation of the deploy. It runs
the audit's checks (gpunode.roles.audit.checks.audit_checks) and prints every line that is not ok,
then what only waits for a reboot or a container restart. It never fails the deploy: the
gate is deploy/audit.py.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import operation

from gpunode.roles.audit.checks import audit_checks, tuning_checks
from gpunode.roles.audit.report import pending_lines
from gpunode.roles.audit.snapshot import gather_snapshot
from gpunode.roles.profile.check import summary_lines
from gpunode.roles.profile.node import NodeProfile
from gpunode.roles.pyinfra_adapter import in_execute_stage


@operation(is_idempotent=True)
def verify_node(profile: NodeProfile):
    """
    Read the live node back and report every setting that differs (changes nothing).

    + profile: the host's NodeProfile
    """
    if not in_execute_stage():
        host.noop("verify after the other operations ran")
        return
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
