"""--dry held to its word, value for value, and undo back to the fresh guest (issue #14).

Runs first in the lab session (file name), on the fresh guest, with the opt-in verify timer on:
record it; --dry then the real run (the same change lines, --dry changes nothing, the re-run
changes nothing); the drift cases in one batch (same checks); a package with no installation
candidate (refused by --dry and by the run, before any change); a drop-in in
/etc/default/grub.d that overrides the cmdline (gpunode's own drop-in, read last, wins in
the next boot's grub.cfg); then undo (its --dry lines equal its run's, a second undo changes
nothing), reboot, and the guest equals the fresh one: the files gpunode writes or edits
(byte-identical, same owner and mode, or absent; the timer's files and the metrics folders it
made), the sysctls, /proc/cmdline, the holds, the modules, the boot unit and the timer. The
tests after it get a guest that went through undo.
"""

from __future__ import annotations

import time

import pytest

from gpunode.profile.loader import load_profile
from gpunode.roles.host_tuning import LIMITS_FILE, MODULES_FILE
from lab.profile import LAB_PROFILE, LAB_STAND_IN_MODULE
from tests.lab.guest import sh
from tests.lab.node_snapshot import snapshot
from tests.lab.pyinfra_cli import PyinfraRun, run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
UNDO = "deploy/undo.py"
PROFILE = load_profile("gpunode-lab", {"gpunode": LAB_PROFILE})
TIMER_ON = {"GPUNODE_LAB_VERIFY_TIMER": "1"}  # every run: the timer's undo is proven here
CONFLICT = "/etc/default/grub.d/50-gpunode-lab-conflict.cfg"
OURS = "/etc/default/grub.d/zz-gpunode.cfg"

# Each drift, and the change line the next run must name for it.
DRIFTS = {
    "sysctl -qw vm.swappiness=33": "vm.swappiness 33 -> 10",
    f"rm {MODULES_FILE}": f"{MODULES_FILE} (absent) ->",
    f"chmod 0666 {LIMITS_FILE}": f"{LIMITS_FILE} mode 0666 -> 0644",
    "sed -i 's/ processor.max_cstate=1//' /etc/default/grub":
        "cmdline processor.max_cstate (absent) -> processor.max_cstate=1",
    f"rmmod {LAB_STAND_IN_MODULE}": f"module {LAB_STAND_IN_MODULE} not loaded -> loaded",
    "systemctl disable -q gpunode-tune.service": "gpunode-tune.service disabled, active ->",
    "apt-mark unhold $(apt-mark showhold)": "not held -> held",
}
# pciutils rebuilt from its installed files, so the test can put it back without a network.
REPACK_PCIUTILS = (
    "set -e; d=/root/pciutils-repack; rm -rf $d; mkdir -p $d/DEBIAN; "
    "dpkg -L pciutils | while read f; do "
    "if [ -f \"$f\" ] || { [ -L \"$f\" ] && [ ! -d \"$f\" ]; }; then "
    "mkdir -p \"$d${f%/*}\"; cp -a \"$f\" \"$d$f\"; fi; done; "
    "dpkg -s pciutils | grep -v '^Status:\\|^Conffiles:' > $d/DEBIAN/control; "
    "dpkg-deb -b $d /root/pciutils.deb >/dev/null"
)


def state_of(vm) -> dict:
    return snapshot(vm, list(PROFILE.sysctls), PROFILE.modules)


def differences(before: dict, after: dict) -> dict:
    """What differs between two state_of() readings, entry by entry (files one by one)."""
    out = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
           if k != "files" and before.get(k) != after.get(k)}
    files_before, files_after = before.get("files", {}), after.get("files", {})
    out.update({path: (files_before.get(path), files_after.get(path))
                for path in files_before.keys() | files_after.keys()
                if files_before.get(path) != files_after.get(path)})
    return out


def dry_then_run(vm, deploy: str) -> tuple[PyinfraRun, PyinfraRun]:
    """--dry (the guest unchanged by it), then the real run; both succeed with the same
    change lines; a --dry after it plans nothing."""
    before = state_of(vm)
    dry = run_pyinfra(deploy, "--dry", env=TIMER_ON)
    assert dry.returncode == 0, dry.log
    assert state_of(vm) == before, "--dry changed the guest"
    run = run_pyinfra(deploy, "-y", env=TIMER_ON)
    assert run.returncode == 0, run.log
    assert dry.change_lines() == run.change_lines(), (dry.change_lines(), run.change_lines())
    again = run_pyinfra(deploy, "--dry", env=TIMER_ON)
    assert again.planned_changes() == [] and again.change_lines() == [], again.log
    return dry, run


@pytest.fixture(scope="module")
def fresh(lab_vm) -> dict:
    return state_of(lab_vm)


def test_1_fresh_guest_dry_run_equals_the_run(lab_vm, fresh):
    dry, _ = dry_then_run(lab_vm, SITE)
    lines = dry.change_lines()
    assert any(line.startswith("kernel.numa_balancing 1 -> 0 (runtime; persisted in ")
               for line in lines), lines
    assert any(line.startswith("/var/lib/gpunode/state.json (absent) ->") for line in lines)
    assert sh(lab_vm, "test -f /var/lib/gpunode/originals/etc/default/grub && echo kept") \
        == "kept\n"
    assert state_of(lab_vm)["timer"] == "enabled"


def test_2_drifts_dry_run_equals_the_run(lab_vm, fresh):
    # The timer test_1 enabled first fires 2 min after boot and writes gpunode.prom: have it
    # now, so that it cannot land inside the --dry below (seen as "--dry changed the guest").
    sh(lab_vm, "systemctl start gpunode-verify.service")
    sh(lab_vm, "; ".join(DRIFTS))
    dry, _ = dry_then_run(lab_vm, SITE)
    lines = dry.change_lines()
    for drift, expected in DRIFTS.items():
        assert any(expected in line for line in lines), (drift, expected, lines)
    assert sh(lab_vm, f"stat -c %a {LIMITS_FILE}").strip() == "644"


def test_3_no_installation_candidate_is_refused_before_any_change(lab_vm, fresh):
    sh(lab_vm, REPACK_PCIUTILS)
    sh(lab_vm, "dpkg -r pciutils >/dev/null 2>&1; sysctl -qw vm.swappiness=33")
    # The timer's first run (2 min after boot, up to 30 s later) writes gpunode.prom: have it
    # now, so that only gpunode's runs can change the guest while this test reads it.
    sh(lab_vm, "systemctl start gpunode-verify.service")
    try:
        before = state_of(lab_vm)
        for args in (("--dry",), ("-y",)):
            run = run_pyinfra(SITE, *args, env=TIMER_ON)
            assert run.returncode == 1, run.log
            assert "refused before any change: package pciutils is not installed and apt " \
                   "has no installation candidate" in " ".join(run.log.split())  # wrapped
            assert run.changed() == [], run.changed()
            after = state_of(lab_vm)
            assert after == before, differences(before, after)
    finally:
        sh(lab_vm, "dpkg -i /root/pciutils.deb >/dev/null && rm -rf /root/pciutils*")
    # With pciutils back, the next run (test 4's) converges the drift the refusal left.


def test_4_a_dropin_that_overrides_the_cmdline_is_overridden(lab_vm, fresh):
    sh(lab_vm, f"printf '%s\\n' 'GRUB_CMDLINE_LINUX_DEFAULT=\"quiet processor.max_cstate=5\"' "
               f"> {CONFLICT}")
    dry, _ = dry_then_run(lab_vm, SITE)
    assert any("processor.max_cstate" in line for line in dry.change_lines()), dry.log
    assert "vm.swappiness 33 -> 10" in " ".join(dry.change_lines())  # left by test 3's refusal
    assert "GRUB_CMDLINE_LINUX_DEFAULT='quiet processor.max_cstate=1" in sh(lab_vm, f"cat {OURS}")


def next_boot_cmdline(vm) -> str:
    """The default entry's `linux` line in the grub.cfg update-grub wrote: what GRUB passes at
    the next boot (the reboot that takes a cmdline live is test_deploy_cycle's test_4)."""
    return sh(vm, "grep -m1 -P '^\\s+linux\\s' /boot/grub/grub.cfg")


def test_5_undo_puts_the_fresh_guest_back(lab_vm, fresh):
    cmdline = next_boot_cmdline(lab_vm)
    assert "processor.max_cstate=1" in cmdline and "processor.max_cstate=5" not in cmdline
    assert "quiet" in cmdline  # the overriding drop-in's own tokens are kept
    sh(lab_vm, f"rm {CONFLICT}")  # the user's file: undo keeps it; the fresh guest had none
    dry, run = dry_then_run(lab_vm, UNDO)
    lines = dry.change_lines()
    assert "apt-mark linux-image-" in " ".join(lines), lines
    assert any(line.startswith("kernel.numa_balancing 0 -> 1") for line in lines), lines
    assert f"module {LAB_STAND_IN_MODULE} loaded -> unloaded" in " ".join(lines), lines
    assert any(line.startswith("/run/gpunode present -> (removed)") for line in lines), lines
    assert "after undo, a reboot is needed" in run.log
    # Nothing of gpunode's left before the reboot either: the module gpunode loaded is unloaded
    # (its run's SSH connection used it until the end) and /run/gpunode is gone (#42).
    left = "present"
    for _ in range(30):
        left = sh(lab_vm, f"ls -d /run/gpunode 2>/dev/null; "
                          f"grep -o '^{LAB_STAND_IN_MODULE} ' /proc/modules || true").strip()
        if not left:
            break
        time.sleep(1)
    assert left == "", f"left after undo: {left}"
    lab_vm.reboot()
    assert state_of(lab_vm) == fresh
