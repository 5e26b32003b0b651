"""apt holds: keep packages at their installed version (kernel pin, NVIDIA driver pin)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from roles.facts.apt import AptHolds
from roles.facts.cache import cached_fact


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
        yield StringCommand("apt-mark", "hold" if held else "unhold", *todo)
    else:
        host.noop(f"{' '.join(packages)} already {'held' if held else 'not held'}")
