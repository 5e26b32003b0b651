"""apt: packages present (pyinfra's apt.packages for what is missing) and holds (kernel pin,
NVIDIA driver pin)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import apt

from gpunode.roles.facts.apt import AptHolds
from gpunode.roles.facts.cache import cached_fact, changes_fact
from gpunode.roles.facts.dpkg import InstalledPackages
from gpunode.roles.ops.changes import report_change
from gpunode.roles.ops.shell import argv
from gpunode.roles.pyinfra_adapter import inner_commands


@operation()
def packages_present(packages: list[str]):
    """
    Install the packages that are not installed (pyinfra's apt.packages does the install).

    The installed set comes from one dpkg-query of these names (cached, prefetchable)
    instead of apt.packages' read of every package on the node, which stays for the
    install itself.

    + packages: package names
    """
    installed = cached_fact(InstalledPackages, patterns=sorted(packages)) or {}
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"{' '.join(packages)} installed")
        return
    # declares no changes(): an install can change any fact (lspci, modinfo, ...)
    for package in missing:
        report_change(f"package {package}", "not installed", "installed", where="apt")
    yield from inner_commands(apt.packages, packages=missing)


@operation()
def apt_hold(packages: list[str], held: bool = True):
    """
    Hold (or release) packages with apt-mark.

    + packages: package names
    + held: True to hold, False to release the hold
    """
    holds = set(cached_fact(AptHolds) or [])
    todo = [p for p in packages if (p in holds) != held]
    if todo:
        for package in todo:
            report_change(f"apt-mark {package}", "not held" if held else "held",
                          "held" if held else "not held")
        changes_fact(AptHolds)
        yield argv("apt-mark", "hold" if held else "unhold", *todo)
    else:
        host.noop(f"{' '.join(packages)} already {'held' if held else 'not held'}")
