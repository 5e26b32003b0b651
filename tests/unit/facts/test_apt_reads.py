"""The apt reads' commands in a real shell, with stand-ins on PATH for dpkg-query, dpkg and
apt-cache that print what the real ones print: AptHolds reads dpkg's selections
(HOLDS_COMMAND) and names packages as `apt-mark showhold` does (the real pair is compared on the
lab guest: tests/lab/test_a_dry_run_and_undo.py unholds with `apt-mark showhold` and gpunode
must name every hold back); AptCandidates asks apt-cache only when a package is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpunode.facts.apt import HOLDS_COMMAND, AptCandidates, AptHolds, parse_showhold

# `dpkg-query -W -f='${db:Status-Want} ${binary:Package}\n'` on an amd64 host with i386 added:
# Multi-Arch: same packages carry their architecture, others don't.
SELECTIONS = """\
install bash
hold linux-image-6.12.117+deb13-amd64
hold libnvidia-compute:amd64
hold libnvidia-compute:i386
install libc6:amd64
deinstall old-tool
hold nvidia-kernel-dkms
purge gone
"""


# `apt-cache policy pciutils` on Debian 12 without it installed (this machine).
POLICY = """\
pciutils:
  Installed: (none)
  Candidate: 1:3.9.0-4
  Version table:
     1:3.9.0-4 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
"""
# dpkg-query -W -f='${db:Status-Status}\n' PKG...: "installed" for these, nothing for the others.
INSTALLED = ("kmod", "procps")


def run_in_shell(tmp_path: Path, command: str) -> list[str]:
    """command's output lines, in sh, with the stand-ins first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "selections").write_text(SELECTIONS)
    (tmp_path / "policy").write_text(POLICY)
    installed = "|".join(INSTALLED)
    stand_ins = {
        "dpkg-query": (f'#!/bin/sh\ncase "$2" in\n'
                       f"  '-f=${{db:Status-Status}}\\n')\n"
                       f'    shift 2; for p; do\n'
                       f'      case "$p" in {installed}) echo installed;; esac; done;;\n'
                       f'  *) cat {tmp_path / "selections"};;\nesac\n'),
        "dpkg": '#!/bin/sh\n[ "$1" = --print-architecture ] && echo amd64\n',
        "apt-cache": (f'#!/bin/sh\necho "$*" >> {tmp_path / "apt-cache.calls"}\n'
                      f'cat {tmp_path / "policy"}\n'),
    }
    for name, script in stand_ins.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                          check=True).stdout.splitlines()


def run_holds(tmp_path: Path) -> list[str]:
    return AptHolds().process(run_in_shell(tmp_path, HOLDS_COMMAND))


def apt_cache_calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "apt-cache.calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_holds_are_named_as_apt_mark_names_them(tmp_path):
    assert run_holds(tmp_path) == [
        "libnvidia-compute",  # native architecture: no suffix, as apt-mark showhold prints it
        "libnvidia-compute:i386",  # a foreign one keeps it
        "linux-image-6.12.117+deb13-amd64",
        "nvidia-kernel-dkms",
    ]


def test_the_fact_needs_dpkg_query_not_apt():
    assert AptHolds().requires_command() == "dpkg-query"
    assert "apt-mark" not in AptHolds().command()


def test_apt_mark_showhold_output_still_parses():
    assert parse_showhold("b\na\n\na\n") == ["a", "b"]


def test_candidates_are_asked_of_apt_when_a_package_is_missing(tmp_path):
    fact = AptCandidates()
    lines = run_in_shell(tmp_path, fact.command(packages=["kmod", "pciutils", "procps"]))
    assert apt_cache_calls(tmp_path) == ["policy kmod pciutils procps"]
    assert fact.process(lines) == {"pciutils": "1:3.9.0-4"}


def test_no_apt_cache_run_when_every_package_is_installed(tmp_path):
    lines = run_in_shell(tmp_path, AptCandidates().command(packages=["kmod", "procps"]))
    assert lines == [] and apt_cache_calls(tmp_path) == []
