"""Changes that cannot succeed, found before any is made: the host is refused whole.

A deploy asks each role for the problems it can know in advance (a package with no
installation candidate, a pinned kernel that is not installed) before it adds any operation.
refuse_host() logs each with the host's name and marks the host failed, so --dry and the real
run stop at the same place, with nothing changed on that host; the other hosts go on, and
pyinfra exits 1.
"""

from __future__ import annotations

from pyinfra import logger

from gpunode.facts.snapshot import node
from gpunode.ops.changes import log_wrapped
from gpunode.pyinfra_adapter import current_host, fail_host, host_prefix


def uninstallable(packages: list[str]) -> list[str]:
    """Problems: wanted packages that are not installed and that apt has no candidate for."""
    snapshot = node()
    installed = snapshot.packages
    missing = sorted(p for p in packages if p not in installed)
    if not missing:
        return []
    candidates = snapshot.candidates
    return [
        f"package {p} is not installed and apt has no installation candidate for it "
        "(apt-cache policy); run apt-get update or add the repository that has it"
        for p in missing if not candidates.get(p)
    ]


def refuse_host(problems: list[str]) -> bool:
    """Log the problems and fail this host before it gets any operation (True if refused)."""
    if not problems:
        return False
    current = current_host()
    if current is None:
        raise RuntimeError("refuse_host() runs inside a host's deploy")
    for problem in problems:
        log_wrapped(logger.error, f"{host_prefix(current)}refused before any change: {problem}")
    fail_host(current)
    return True
