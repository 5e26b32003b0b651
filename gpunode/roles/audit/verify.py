"""The end of every deploy: read the node back and print what is still open or pending.

It is an operation that never yields a command, so a converged node still shows zero changes;
it reads the live node when it executes, after every other operation of the deploy. It runs
the audit's checks (gpunode.roles.audit.checks.audit_checks) and prints every line that is not ok,
then what only waits for a reboot or a container restart. It never fails the deploy: the
gate is deploy/audit.py.
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.api.state import StateStage

from gpunode.roles.audit.checks import Check, audit_checks, tuning_checks
from gpunode.roles.audit.report import pending_lines
from gpunode.roles.audit.snapshot import gather_snapshot
from gpunode.roles.profile.node import NodeProfile


def summary_lines(host_name: str, checks: list[Check]) -> list[str]:
    """One line per check that is open or minor (P0/P1/P2), then a count."""
    lines = [
        f"{host_name}: {c.status:5} {c.name}: {c.live}" + (f" -> {c.want}" if c.want else "")
        + (f" [{c.fix}]" if c.fix else "")
        for c in checks
        if c.status in ("P0", "P1", "P2")
    ]
    passed = sum(c.status == "ok" for c in checks)
    open_ = sum(c.open for c in checks)
    lines.append(f"{host_name}: verified {passed}/{len(checks)} ok, {open_} open (P0/P1)")
    return lines


@operation(is_idempotent=True)
def verify_node(profile: NodeProfile):
    """
    Read the live node back and report every setting that differs (changes nothing).

    + profile: the host's NodeProfile
    """
    if state.current_stage < StateStage.Execute:
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
