"""apt: packages present (pyinfra's apt.packages for what is missing) and holds (kernel pin,
NVIDIA driver pin)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpunode.roles.facts.apt import AptHolds
from gpunode.roles.facts.cache import cached_fact, changes_fact
from gpunode.roles.facts.dpkg import InstalledPackages
from gpunode.roles.ops.changes import report_change
from gpunode.roles.ops.shell import argv, argv_text


def apt_install_command(packages: list[str]) -> str:
    """pyinfra's apt.packages install command (noninteractive, changed config files kept)."""
    return ('DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" '
            '-o Dpkg::Options::="--force-confold" install ' + argv_text(*packages))


@operation()
def packages_present(packages: list[str]):
    """
    Install the packages that are not installed, with the command pyinfra's apt.packages
    runs (noninteractive, keeping changed config files).

    The installed set comes from one dpkg-query of these names (cached, prefetchable)
    instead of apt.packages' read of every package on the node (DebPackages), so a dry
    run on a node that lacks one reads nothing more.

    + packages: package names
    """
    installed = cached_fact(InstalledPackages, patterns=sorted(packages)) or {}
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"{' '.join(packages)} installed")
        return
    # declares no changes_fact(): an install can change any fact (lspci, modinfo, ...)
    for package in missing:
        report_change(f"package {package}", "not installed", "installed", where="apt")
    yield StringCommand(apt_install_command(missing))


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
