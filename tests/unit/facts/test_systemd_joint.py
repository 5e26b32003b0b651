"""SystemdStatus and SystemdEnabled of the same units, read by one `systemctl show`
(gpunode.facts.systemd.SystemdUnits) in a real shell: a stand-in systemctl on PATH prints
the lab guest's captured output (tests/data/systemd/, systemd 257 on Debian 13), keeping only
the properties it is asked for, as systemctl does. Each fact's value from the joint read is the
one its own command gives; the real systemctl is exercised by the lab tier's no-op runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.facts.bundle import FactRead, bundle_command, bundle_values, issued_reads
from gpunode.facts.systemd import SystemdUnits

DATA = Path(__file__).parents[2] / "data" / "systemd" / "show-units-trixie.txt"
UNITS = ["ssh.service", "nvidia-persistenced.service", "systemd-journald.service",
         "cron.timer", "apt-daily.timer"]

# Prints the captured blocks of the asked units with the asked properties only.
STAND_IN = """#!/bin/sh
echo "$*" >> "$CALLS"
props=; units=
while [ $# -gt 0 ]; do
  case "$1" in
    show|--all) ;;
    --property) shift; props="$props $1" ;;
    *) units="$units $1" ;;
  esac
  shift
done
awk -v props="$props" -v units="$units" '
  BEGIN { n = split(props, p, " "); for (i = 1; i <= n; i++) want[p[i]] = 1
          m = split(units, u, " "); for (i = 1; i <= m; i++) asked[u[i]] = 1 }
  /^Id=/ { unit = substr($0, 4); if (unit in asked) { if (printed++) print "" } }
  /=/ { key = substr($0, 1, index($0, "=") - 1); if ((unit in asked) && (key in want)) print }
' "$DATA"
"""


def run(tmp_path: Path, command: str) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(STAND_IN)
    (bin_dir / "systemctl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DATA": str(DATA),
           "CALLS": str(tmp_path / "calls")}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                         check=True)
    return out.stdout.splitlines()


def own_value(tmp_path: Path, fact: type, units: list[str]) -> dict[str, bool]:
    instance = fact()
    return instance.process(run(tmp_path, str(instance.command(services=units).get_raw_value())))


def test_one_systemctl_answers_both_facts_as_their_own_reads(tmp_path):
    reads = [FactRead(SystemdStatus, {"services": UNITS}),
             FactRead(SystemdEnabled, {"services": UNITS})]
    issued, source = issued_reads(reads)
    assert [read.fact for read in issued] == [SystemdUnits] and source == [0, 0]
    lines = run(tmp_path, bundle_command(issued).get_raw_value())
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
    values = bundle_values(reads, lines)
    expected = [own_value(tmp_path, fact, UNITS) for fact in (SystemdStatus, SystemdEnabled)]
    assert [values[0], values[1]] == expected
    assert expected[0] == {"ssh.service": True, "nvidia-persistenced.service": False,
                           "systemd-journald.service": True, "cron.timer": False,
                           "apt-daily.timer": False}
    assert expected[1] == {"ssh.service": True, "nvidia-persistenced.service": False,
                           "systemd-journald.service": True, "cron.timer": False,
                           "apt-daily.timer": False}


def test_units_read_by_one_fact_only_are_not_joined():
    reads = [FactRead(SystemdStatus, {"services": ["a.service"]}),
             FactRead(SystemdEnabled, {"services": ["b.service"]})]
    issued, source = issued_reads(reads)
    assert issued == reads and source == [0, 1]


def test_reads_with_arguments_the_joint_fact_does_not_take_run_on_their_own():
    kwargs = {"services": ["a.service"], "user_mode": True}
    reads = [FactRead(SystemdStatus, kwargs), FactRead(SystemdEnabled, kwargs)]
    issued, source = issued_reads(reads)
    assert issued == reads and source == [0, 1]
