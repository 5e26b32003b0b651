"""A drop-in in /etc/default/grub.d that overrides GRUB_CMDLINE_LINUX_DEFAULT: gpunode writes
its own drop-in, read last, and its parameters reach /proc/cmdline through a real update-grub
and reboot; the re-run changes nothing. On the session's lab VM; cleans up after itself."""

from __future__ import annotations

import pytest

from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
CONFLICT = "/etc/default/grub.d/50-gpunode-lab-conflict.cfg"
OURS = "/etc/default/grub.d/zz-gpunode.cfg"
# One parameter no earlier test set: the apply must reboot to make it live.
ENV = {"GPUNODE_LAB_REBOOT": "1", "GPUNODE_LAB_CMDLINE": "gpunode.grub_dropin=1"}


def test_conflicting_dropin_is_overridden_and_converges(lab_vm):
    vm = lab_vm
    sh(vm, f"printf '%s\\n' 'GRUB_CMDLINE_LINUX_DEFAULT=\"quiet processor.max_cstate=5\"' "
           f"> {CONFLICT}")
    try:
        boot_before = vm.boot_id()
        run = run_pyinfra(SITE, "-y", env=ENV)
        assert run.returncode == 0, run.log[-3000:]
        assert vm.boot_id() != boot_before, "the new parameter needs the reboot"
        cmdline = sh(vm, "cat /proc/cmdline").split()
        assert "gpunode.grub_dropin=1" in cmdline and "processor.max_cstate=1" in cmdline
        assert "processor.max_cstate=5" not in cmdline
        assert "quiet" in cmdline  # the conflicting drop-in's own tokens are kept
        assert "GRUB_CMDLINE_LINUX_DEFAULT='quiet processor.max_cstate=1" in sh(vm, f"cat {OURS}")
        again = run_pyinfra(SITE, "-y", env=ENV)
        assert again.returncode == 0, again.log[-3000:]
        assert again.changed() == [], again.changed()
    finally:
        vm.ssh(f"rm -f {CONFLICT} {OURS} && update-grub")
