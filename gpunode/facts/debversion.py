"""Debian version ordering, as dpkg orders versions (`dpkg --compare-versions`).

Kernel releases ("6.17.2-2-pve", "7.0.0-3-pve", "6.12.117+deb13-amd64") and package versions
are ordered by python-debian's ``debian_support.Version`` (dpkg's algorithm: epoch at the
first colon, then upstream version and revision, digit runs as numbers, `~` before
everything). Never as strings ("7.0" after "6.17"), and not as PEP 440 versions
(`packaging.version` rejects "+deb13-amd64"). This is the one version comparison of Debian
versions in gpunode.
"""

from __future__ import annotations

from debian.debian_support import Version


def debian_version(text: str) -> Version:
    """The version as dpkg parses it; ValueError for a string dpkg would refuse."""
    return Version(text)


def compare_versions(left: str, right: str) -> int:
    """<0, 0 or >0 as `dpkg --compare-versions left lt|eq|gt right`."""
    a, b = Version(left), Version(right)
    return (a > b) - (a < b)


def version_key(text: str) -> Version:
    """sort key: `sorted(versions, key=version_key)` orders as dpkg does."""
    return Version(text)


def version_at_least(text: str | None, wanted: str) -> bool:
    """True when text is a version dpkg orders at or after wanted; False for None or text
    that is not a Debian version."""
    try:
        return text is not None and Version(text) >= Version(wanted)
    except ValueError:
        return False
