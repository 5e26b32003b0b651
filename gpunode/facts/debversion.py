"""Debian version ordering, as dpkg orders versions (`dpkg --compare-versions`).

Kernel releases ("6.17.2-2-pve", "7.0.0-3-pve", "6.12.117+deb13-amd64") and package versions
are ordered with dpkg's algorithm (lib/dpkg/version.c: epoch, then upstream version and
revision by `verrevcmp`): digit runs compare as numbers, `~` sorts before everything, letters
before other characters. Never as strings ("7.0" after "6.17"), and not as PEP 440 versions
(`packaging.version` rejects "+deb13-amd64").
"""

from __future__ import annotations

import re
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


def _compare_nondigits(left: str, right: str) -> int:
    """dpkg's non-digit part: character by character by _order, the shorter padded with
    end-of-string (0)."""
    for k in range(max(len(left), len(right))):
        lc = _order(left[k]) if k < len(left) else 0
        rc = _order(right[k]) if k < len(right) else 0
        if lc != rc:
            return lc - rc
    return 0


def _compare_digits(left: str, right: str) -> int:
    """dpkg's digit part: as numbers (leading zeros dropped; the longer run is larger)."""
    left, right = left.lstrip("0"), right.lstrip("0")
    if len(left) != len(right):
        return 1 if len(left) > len(right) else -1
    return next((ord(a) - ord(b) for a, b in zip(left, right, strict=True) if a != b), 0)


_RUNS = re.compile(r"(\D*)(\d*)")


def _verrevcmp(left: str, right: str) -> int:
    """dpkg's verrevcmp: alternating non-digit and digit runs, compared pairwise."""
    left_runs, right_runs = _RUNS.findall(left), _RUNS.findall(right)
    for k in range(max(len(left_runs), len(right_runs))):
        l_text, l_num = left_runs[k] if k < len(left_runs) else ("", "")
        r_text, r_num = right_runs[k] if k < len(right_runs) else ("", "")
        diff = _compare_nondigits(l_text, r_text) or _compare_digits(l_num, r_num)
        if diff:
            return diff
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
