"""The bench's floor read (bench/floor.py) reads what the one read's needs name: every sysctl,
owned file, unit and module of the site deploy's needs for the lab profile, each tool once, in
a command the shell accepts. Without this the floor drifts from the read it is the floor of."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from bench.floor import (
    floor_command,
    floor_sources,
    needs_record,
    section_seconds,
    stamped,
    uncovered,
)
from gpunode.facts.kernel_params import sysctl_path
from gpunode.facts.snapshot import Needs, combined
from gpunode.profile.node import NodeProfile
from gpunode.roles import gpu_runtime, host_tuning, kernel, nvidia_driver, verify_timer
from gpunode.roles.audit import verify
from gpunode.roles.undo import record_needs
from lab.profile import lab_profile_data

PROFILE = NodeProfile.model_validate(lab_profile_data({}))
# The site deploy's needs (gpunode.deploys.site) for the lab profile, as a `-y` run builds them:
# with the verify's audit parts (outside a run verify.needs leaves them out, as for --dry).
NEEDS = combined([
    Needs(lock=True),
    record_needs(sorted(PROFILE.sysctls), PROFILE.modules, host_tuning.BOOT_UNIT,
                 [gpu_runtime.PERSISTENCED_UNIT]),
    host_tuning.needs(PROFILE), gpu_runtime.needs(PROFILE), nvidia_driver.needs(PROFILE),
    kernel.needs(PROFILE), verify_timer.needs(PROFILE), verify.needs(PROFILE),
    Needs(audit=True)])
RECORD = json.loads(json.dumps(needs_record(NEEDS)))  # as pyinfra_counted.py writes it


def test_reads_every_source_the_needs_name():
    command = floor_command(RECORD)
    assert NEEDS.sysctl_keys and NEEDS.files and NEEDS.units and NEEDS.modules
    for key in NEEDS.sysctl_keys:
        assert f" {sysctl_path(key)} " in command
    for path in (*NEEDS.files, *NEEDS.folders):
        assert f" {path} " in command
    for unit in NEEDS.units:
        assert unit in command
    for module in NEEDS.modules:
        assert module in floor_sources(RECORD)["modinfo"]


def test_each_tool_once():
    command = floor_command(RECORD)
    for tool in ("tail -v", "ls -la", "lspci -vvv", "dpkg-query -W", "systemctl show",
                 "modinfo", "find /lib/modules", "journalctl -k"):
        assert command.count(tool) == 1, tool


def test_says_what_it_leaves_out():
    assert "the node lock (Needs.lock: a write)" in uncovered(RECORD)
    bare = floor_command(needs_record(Needs()))
    assert "find /lib/modules" not in bare and "journalctl" not in bare
    assert any("nvidia-smi's topology" in item for item in uncovered(RECORD))


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_the_shell_accepts_it():
    subprocess.run(["sh", "-n", "-c", floor_command(RECORD)], check=True)


def test_a_stamped_read_times_each_section_and_keeps_its_output():
    """The replay's per-section stamps: the command stays one `sh -c '...'` word with its
    quoting, its sections' output is untouched, and each section gets its seconds."""
    read = ("sh -c 'echo @@gpunode-read:begin:one; { echo '\"'\"'a b'\"'\"'; }; "
            "echo @@gpunode-read:begin:two; { sleep 0.2; echo c; }; true'")
    command = stamped(read)
    assert len(shlex.split(command)) == 3
    out = subprocess.run(command, shell=True, capture_output=True, text=True, check=True).stdout
    kept = [line for line in out.splitlines() if not line.startswith("@@gpunode-stamp")]
    plain = subprocess.run(read, shell=True, capture_output=True, text=True, check=True).stdout
    assert kept == plain.splitlines()
    seconds = section_seconds(out)
    assert set(seconds) == {"one", "two"}
    assert seconds["two"] >= 0.15 and seconds["one"] < seconds["two"]
