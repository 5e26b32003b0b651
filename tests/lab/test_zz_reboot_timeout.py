"""A reboot that doesn't come back fails with a clear timeout naming the host.

Runs last (the guest loses sshd for good): it masks ssh in the guest, then lets the deploy
reboot with a short reboot_timeout.
"""

from __future__ import annotations

import pytest

from lab.vm import HOST_NAME
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab


def test_reboot_that_never_returns_times_out_naming_the_host(lab_vm):
    rc, _, err = lab_vm.ssh("systemctl mask ssh.service ssh.socket >/dev/null 2>&1; true")
    assert rc == 0, err
    run = run_pyinfra("deploy/site.py", "-y", env={
        "GPUNODE_LAB_REBOOT": "1", "GPUNODE_LAB_REBOOT_TIMEOUT": "30",
        "GPUNODE_LAB_CMDLINE": "gpunode_reboot_test=1"}, timeout=900)
    assert run.returncode != 0
    assert HOST_NAME in run.log
    assert "did not reboot in time" in run.log
