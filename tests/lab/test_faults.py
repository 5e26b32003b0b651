"""Faults on the lab VM: a deploy killed mid-run, a failing update-grub, a failing
proxmox-boot-tool refresh.

Runs after test_deploy_cycle.py in the same guest and leaves it converged.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from gpunode.roles.host_tuning import OWNED_FILES, SYSCTL_FILE
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import LAB_INVENTORY, REPO, pyinfra_bin, run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"


def test_deploy_killed_mid_run_converges_next_time(lab_vm):
    """SIGKILL pyinfra while it writes files: no half file is live; the next run converges."""
    sh(lab_vm, "rm -f " + " ".join(OWNED_FILES) + "; sysctl -w vm.swappiness=60")
    proc = subprocess.Popen([pyinfra_bin(), LAB_INVENTORY, SITE, "-y"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if lab_vm.ssh(f"test -e {SYSCTL_FILE}")[0] == 0:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    # Every owned file is absent or whole (the rename is atomic); temp files may remain.
    for path in OWNED_FILES:
        rc, out, _ = lab_vm.ssh(f"cat {path}")
        if rc == 0:
            assert out.endswith("\n") and "gpunode" in out, path
    first = run_pyinfra(SITE, "-y")
    assert first.returncode == 0, first.log
    assert first.errors() == []
    again = run_pyinfra(SITE, "-y")
    assert again.returncode == 0 and again.changed() == [], again.changed()


def test_failing_update_grub_restores_the_backup(lab_vm):
    """update-grub fails: /etc/default/grub is put back and the error names the tool."""
    original = sh(lab_vm, "cat /etc/default/grub")
    sh(lab_vm, "mv /usr/sbin/update-grub /usr/sbin/update-grub.real && "
               "printf '#!/bin/sh\\necho broken >&2\\nexit 1\\n' > /usr/sbin/update-grub && "
               "chmod 755 /usr/sbin/update-grub")
    try:
        run = run_pyinfra(SITE, "-y", env={"GPUNODE_LAB_CMDLINE": "gpunode_fault_test=1"})
        assert run.returncode != 0
        assert "update-grub failed; /etc/default/grub restored from its backup" in run.log
        assert sh(lab_vm, "cat /etc/default/grub") == original
    finally:
        sh(lab_vm, "mv -f /usr/sbin/update-grub.real /usr/sbin/update-grub")
    assert run_pyinfra(SITE, "--dry").planned_changes() == []


PROXMOX_BOOT_TOOL_STAND_IN = """#!/bin/sh
# gpunode fault test: Proxmox's proxmox-boot-tool, whose refresh fails (no ESP to sync).
case "$1" in
    refresh) echo "E: gpunode fault test: no ESP could be synced" >&2; exit 2 ;;
    *) echo "proxmox-boot-tool stand-in: $*" >&2; exit 2 ;;
esac
"""


def test_failing_proxmox_boot_tool_restores_the_backup(lab_vm):
    """The Proxmox path (bootloader: systemd-boot edits /etc/kernel/cmdline, then runs
    `proxmox-boot-tool refresh`) with a refresh that fails: the file is put back and the
    error names the tool. proxmox-boot-tool is Proxmox's (not installable on Debian): a
    stand-in whose refresh exits 2 takes its place (and the kernel pin, which would ask it
    first, is off for this run); the edit, backup and rollback are real."""
    original = "root=/dev/vda1 ro quiet\n"
    sh(lab_vm, f"mkdir -p /etc/kernel && printf '{original}' > /etc/kernel/cmdline && "
               "cat > /usr/sbin/proxmox-boot-tool <<'EOF'\n"
               f"{PROXMOX_BOOT_TOOL_STAND_IN}EOF\nchmod 755 /usr/sbin/proxmox-boot-tool")
    try:
        run = run_pyinfra(SITE, "-y", env={"GPUNODE_LAB_BOOTLOADER": "systemd-boot",
                                           "GPUNODE_LAB_KERNEL_PIN": "none"})
        assert run.returncode != 0
        assert "E: gpunode fault test: no ESP could be synced" in run.log
        assert "proxmox-boot-tool failed; /etc/kernel/cmdline restored from its " \
               "backup" in run.log
        assert sh(lab_vm, "cat /etc/kernel/cmdline") == original
    finally:
        sh(lab_vm, "rm -rf /usr/sbin/proxmox-boot-tool /etc/kernel/cmdline "
                   "/var/lib/gpunode/originals/etc/kernel /var/lib/gpunode/backups/etc/kernel")
    assert run_pyinfra(SITE, "--dry").planned_changes() == []
