"""Debian version ordering, as dpkg orders versions (`dpkg --compare-versions`).

Kernel releases ("6.17.2-2-pve", "7.0.0-3-pve", "6.12.117+deb13-amd64") and package versions
are ordered with dpkg's algorithm (lib/dpkg/version.c: epoch, then upstream version and
revision by `verrevcmp`): digit runs compare as numbers, `~` sorts before everything, letters
before other characters. Never as strings ("7.0" after "6.17"), and not as PEP 440 versions
(`packaging.version` rejects "+deb13-amd64").
"""

from __future__ import annotations

from functools import cmp_to_key
from typing import Any


def _order(char: str) -> int:
    """dpkg's order(): ~ < end of string < letters < everything else."""
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(left: str, right: str) -> int:
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (
            j < len(right) and not right[j].isdigit()
        ):
            lc = _order(left[i]) if i < len(left) else 0
            rc = _order(right[j]) if j < len(right) else 0
            if lc != rc:
                return lc - rc
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and left[i].isdigit() and j < len(right) and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split(version: str) -> tuple[int, str, str]:
    """(epoch, upstream, revision) as dpkg parses a version string."""
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def compare_versions(left: str, right: str) -> int:
    """<0, 0 or >0 as `dpkg --compare-versions left lt|eq|gt right`."""
    l_epoch, l_upstream, l_revision = _split(left)
    r_epoch, r_upstream, r_revision = _split(right)
    if l_epoch != r_epoch:
        return l_epoch - r_epoch
    return _verrevcmp(l_upstream, r_upstream) or _verrevcmp(l_revision, r_revision)


version_key: Any = cmp_to_key(compare_versions)
"""sort key: `sorted(versions, key=version_key)` orders as dpkg does."""
