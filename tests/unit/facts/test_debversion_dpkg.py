"""debversion.compare_versions against the real `dpkg --compare-versions` of this Debian
machine, on kernel releases and package versions (epochs, '~', '+', revisions). Skipped only
where dpkg is not installed."""

import itertools
import shutil
import subprocess

import pytest

from gpunode.facts.debversion import compare_versions, version_at_least, version_key

VERSIONS = [
    # kernel releases (uname -r) of Debian 12/13, backports, Proxmox VE 7-9, custom builds
    "6.1.0-31-amd64", "6.1.0-50-amd64", "6.1.0-43-cloud-amd64", "6.12.27+bpo-amd64",
    "6.12.63+deb13-amd64", "6.12.63+deb13-cloud-amd64", "6.12.69+deb13-amd64",
    "6.12.117+deb13-amd64", "6.12.57+deb12-amd64", "5.15.30-2-pve", "6.8.4-2-pve",
    "6.8.12-4-pve", "6.14.8-2-pve", "6.14.11-9-pve", "6.17.2-1-pve", "6.17.9-1-pve",
    "6.17.13-13-pve", "7.0.2-4-pve", "7.0.6-2-pve", "7.0.14-20-pve", "6.0.15-edge",
    "7.1.3-zabbly+", "6.8.0-45-generic",
    # package versions: epochs, tildes, plus signs, revisions
    "6.12.69-1", "6.12.27-1~bpo12+1", "6.12.57-1~bpo12+1", "6.1.140-1", "6.1.137-1",
    "1:2.4.0-pve1", "2.4.0-pve1", "2.4.2-pve1", "1:550.54.15-1", "550.54.15-1",
    "550.127.05-1~deb12u1", "550.127.05-1", "535.216.01-1~deb12u1", "580.65.06-0ubuntu1",
    "3.20251202.1~bpo13+1", "3.1.10-pve2", "0.8.0+pve3", "1.0", "1.0~rc1", "1.0~~",
    "1.0+1", "1.0-0", "1.0a", "1:0", "2:0.1", "7.0.0-5", "3.3.0-1+pmx12", "10.2",
    # a colon in the upstream part (allowed after an epoch): the epoch is before the first
    "1:2.0:3-1", "1:2.0:10-1", "1:2.0-1",
]


def dpkg_signs(pairs: list[tuple[str, str]]) -> list[int]:
    """-1, 0 or 1 for each pair, from dpkg itself (one shell for all pairs)."""
    script = "\n".join(
        f"if dpkg --compare-versions '{a}' lt '{b}'; then echo -1; "
        f"elif dpkg --compare-versions '{a}' eq '{b}'; then echo 0; else echo 1; fi"
        for a, b in pairs
    )
    result = subprocess.run(["sh"], input=script, capture_output=True, text=True, check=True)
    return [int(line) for line in result.stdout.split()]


def sign(value: int) -> int:
    return (value > 0) - (value < 0)


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")


@needs_dpkg
def test_our_order_is_dpkgs_order():
    """Sorted by compare_versions, every neighbour pair gets the same answer from dpkg (lt or
    eq): as dpkg's order is total, the whole order is then dpkg's (n-1 calls, not n^2)."""
    ordered = sorted(VERSIONS, key=version_key)
    neighbours = list(itertools.pairwise(ordered))
    ours = [sign(compare_versions(a, b)) for a, b in neighbours]
    assert dpkg_signs(neighbours) == ours
    equal = [pair for pair, o in zip(neighbours, ours, strict=True) if o == 0]
    assert equal == [("1.0", "1.0-0")]  # an empty revision equals "0" for dpkg too


@needs_dpkg
def test_compare_versions_agrees_with_dpkg_both_ways():
    """Every version against a few anchors, in both argument orders, and against itself."""
    anchors = ["6.12.69+deb13-amd64", "1.0"]
    pairs = [(v, a) for v in VERSIONS for a in anchors] + [(a, v) for v in VERSIONS
                                                          for a in anchors]
    pairs += [(v, v) for v in VERSIONS]
    wanted = dpkg_signs(pairs)
    wrong = [(a, b, w) for (a, b), w in zip(pairs, wanted, strict=True)
             if sign(compare_versions(a, b)) != w]
    assert wrong == []


def test_the_issue_examples_without_dpkg():
    assert compare_versions("7.0.0-3-pve", "6.17.2-2-pve") > 0
    assert compare_versions("6.1.0-50-amd64", "6.1.0-29-amd64") > 0
    assert compare_versions("1.0~rc1", "1.0") < 0
    assert compare_versions("1:0", "2.4.0-pve1") > 0
    assert compare_versions("6.12.63+deb13-cloud-amd64", "6.12.63+deb13-amd64") > 0


def test_a_colon_in_the_upstream_part_compares():
    """The epoch ends at the first colon: "1:2.0:10-1" is epoch 1, upstream "2.0:10"."""
    assert compare_versions("1:2.0:10-1", "1:2.0:3-1") > 0
    assert compare_versions("1:2.0:3-1", "1:2.0-1") > 0
    assert sorted(["1:2.0:10-1", "1:2.0:3-1", "2.0-1"], key=version_key) == [
        "2.0-1", "1:2.0:3-1", "1:2.0:10-1"]


def test_version_at_least():
    assert version_at_least("8.2.4", "8.2") and version_at_least("9.0.3", "8.2")
    assert not version_at_least("8.1.10", "8.2") and not version_at_least("7.4-3", "8.2")
    assert not version_at_least(None, "8.2") and not version_at_least("not a version!", "8.2")
