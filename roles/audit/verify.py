"""The end of every deploy: read the node back and print what is still open."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.operations import python

from roles.audit.checks import Check, tuning_checks
from roles.audit.snapshot import gather_snapshot
from roles.profile.node import NodeProfile


def summary_lines(host_name: str, checks: list[Check]) -> list[str]:
    """One line per check that is not ok, then a count."""
    lines = [
        f"{host_name}: {c.status:5} {c.name}: {c.live}" + (f" -> {c.want}" if c.want else "")
        + (f" [{c.fix}]" if c.fix and c.status != "ok" else "")
        for c in checks
        if c.status != "ok"
    ]
    passed = sum(c.status == "ok" for c in checks)
    open_ = sum(c.open for c in checks)
    lines.append(f"{host_name}: verified {passed}/{len(checks)} ok, {open_} open (P0/P1)")
    return lines


def _verify(profile: NodeProfile) -> None:
    checks = tuning_checks(profile, gather_snapshot(profile))
    for line in summary_lines(host.name, checks):
        (logger.warning if " P0 " in line or " P1 " in line else logger.info)(line)


def verify_node(profile: NodeProfile) -> None:
    """Add an operation that reads the live node back after the deploy and reports."""
    python.call(name="Verify the live node against the profile", function=_verify,
                profile=profile)
