"""The run's one dpkg read (DebianPackages) in a real shell and the real awk, with stand-ins on
PATH for dpkg-query and apt-cache that print what the real ones print: the holds named as
`apt-mark showhold` names them (the real pair is compared on the lab guest:
tests/lab/test_a_dry_run_and_undo.py unholds with `apt-mark showhold` and gpunode must name
every hold back), packages by glob, kernel lines, and apt-cache asked only when a wanted
package is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpunode.facts.apt import parse_showhold
from gpunode.facts.dpkg import DebianPackages, DpkgDatabase
from gpunode.facts.kernels import KERNEL_PATTERNS

# dpkg-query -W -f=DPKG_FORMAT on an amd64 host with i386 added (status, selection, name,
# binary:Package, version, architecture): Multi-Arch: same packages carry their architecture.
DATABASE = "\n".join("\t".join(fields) for fields in [
    ("ii ", "install", "bash", "bash", "5.2.37-2", "amd64"),
    ("ii ", "install", "dpkg", "dpkg", "1.22.21", "amd64"),
    ("hi ", "hold", "linux-image-6.12.117+deb13-amd64", "linux-image-6.12.117+deb13-amd64",
     "6.12.117-1", "amd64"),
    ("ii ", "install", "linux-image-amd64", "linux-image-amd64", "6.12.117-1", "amd64"),
    ("hi ", "hold", "libnvidia-compute", "libnvidia-compute:amd64", "550.163.01-2", "amd64"),
    ("hi ", "hold", "libnvidia-compute", "libnvidia-compute:i386", "550.163.01-2", "i386"),
    ("ii ", "install", "libc6", "libc6:amd64", "2.41-12", "amd64"),
    ("rc ", "deinstall", "old-tool", "old-tool", "1.0", "amd64"),
    ("hi ", "hold", "nvidia-kernel-dkms", "nvidia-kernel-dkms", "550.163.01-2", "amd64"),
    ("un ", "purge", "gone", "gone", "", ""),
    ("ii ", "install", "kmod", "kmod", "34.2-2", "amd64"),
    ("ii ", "install", "procps", "procps", "2:4.0.4-9", "amd64"),
]) + "\n"

# `apt-cache policy pciutils` on Debian 12 without it installed (this machine).
POLICY = """\
pciutils:
  Installed: (none)
  Candidate: 1:3.9.0-4
  Version table:
     1:3.9.0-4 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
"""


def run_in_shell(tmp_path: Path, command: str) -> list[str]:
    """command's output lines, in sh, with the stand-ins first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "database").write_text(DATABASE)
    (tmp_path / "policy").write_text(POLICY)
    stand_ins = {
        "dpkg-query": f'#!/bin/sh\ncat {tmp_path / "database"}\n',
        "apt-cache": (f'#!/bin/sh\necho "$*" >> {tmp_path / "apt-cache.calls"}\n'
                      f'cat {tmp_path / "policy"}\n'),
    }
    for name, script in stand_ins.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                          check=True).stdout.splitlines()


def read(tmp_path: Path, patterns: list[str], wanted: list[str] | None = None) -> DpkgDatabase:
    fact = DebianPackages()
    return fact.process(run_in_shell(tmp_path, fact.command(patterns=patterns, wanted=wanted)))


def apt_cache_calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "apt-cache.calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_holds_are_named_as_apt_mark_names_them(tmp_path):
    assert read(tmp_path, []).holds() == [
        "libnvidia-compute",  # native architecture: no suffix, as apt-mark showhold prints it
        "libnvidia-compute:i386",  # a foreign one keeps it
        "linux-image-6.12.117+deb13-amd64",
        "nvidia-kernel-dkms",
    ]


def test_only_asked_and_held_packages_come_back(tmp_path):
    db = read(tmp_path, ["kmod", "old-*"])
    assert {p.name for p in db.packages} == {
        "dpkg", "kmod", "old-tool", "linux-image-6.12.117+deb13-amd64", "libnvidia-compute",
        "nvidia-kernel-dkms"}
    assert db.installed(["kmod", "old-*"]) == {"kmod": "34.2-2"}  # removed: not installed


def test_globs_match_as_dpkg_query_matches_them(tmp_path):
    db = read(tmp_path, ["libc6.*", "linux-image-6.12.117+deb13-*", "bas"])
    assert db.installed(["libc6.*"]) == {}  # "." is a dot, not any character
    assert db.installed(["linux-image-6.12.117+deb13-*"]) == {
        "linux-image-6.12.117+deb13-amd64": "6.12.117-1"}  # "+" is a plus
    assert db.installed(["bas"]) == {}  # anchored


def test_kernel_lines_read_as_the_kernel_parser_reads_them(tmp_path):
    db = read(tmp_path, list(KERNEL_PATTERNS))
    assert db.query_lines(KERNEL_PATTERNS).splitlines() == [
        "linux-image-6.12.117+deb13-amd64 6.12.117-1 hi", "linux-image-amd64 6.12.117-1 ii"]


def test_candidates_are_asked_of_apt_when_a_package_is_missing(tmp_path):
    db = read(tmp_path, [], wanted=["kmod", "pciutils", "procps"])
    assert apt_cache_calls(tmp_path) == ["policy kmod pciutils procps"]
    assert db.candidates == {"pciutils": "1:3.9.0-4"}


def test_no_apt_cache_run_when_every_package_is_installed(tmp_path):
    db = read(tmp_path, [], wanted=["kmod", "procps"])
    assert db.candidates == {} and apt_cache_calls(tmp_path) == []


def test_the_fact_needs_dpkg_query_not_apt_mark():
    assert DebianPackages().requires_command() == "dpkg-query"
    assert "apt-mark" not in DebianPackages().command(patterns=["kmod"])


def test_apt_mark_showhold_output_still_parses():
    assert parse_showhold("b\na\n\na\n") == ["a", "b"]
