"""Nothing passes silently on the node (issue 28), on the lab guest: the GRUB rewrite keeps
what the user wrote (sourced by the guest's own sh), the original is a checked copy, a value
that can't be kept is refused before any change, a damaged state.json is refused naming the
file, and a second run is told who holds the node lock.

Runs in its own guest or after the others; leaves the guest converged.
"""

from __future__ import annotations

import shlex
import subprocess
import time

import pytest

from gpunode.facts.lock import lock_command
from gpunode.ops.files import COPY_SUFFIX, NEW_INFIX
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
GRUB = "/etc/default/grub"
ORIGINAL = "/var/lib/gpunode/originals/etc/default/grub"
STATE = "/var/lib/gpunode/state.json"
USER_LINE = "GRUB_CMDLINE_LINUX_DEFAULT='quiet foo=\"a b\"'  # the user's own comment"


def _sourced(vm, path: str = GRUB) -> str:
    return sh(vm, f"sh -c '. {path}; printf %s \"$GRUB_CMDLINE_LINUX_DEFAULT\"'")


def _set_grub_line(vm, line: str) -> None:
    sh(vm, f"sed -i '/^GRUB_CMDLINE_LINUX_DEFAULT=/d' {GRUB} && "
           f"printf '%s\\n' {shlex.quote(line)} >> {GRUB}")


def test_grub_rewrite_keeps_every_word_and_the_original_is_checked(lab_vm):
    sh(lab_vm, f"rm -rf /var/lib/gpunode/originals/etc/default; cp -p {GRUB} /root/grub.lab")
    _set_grub_line(lab_vm, USER_LINE)
    before = sh(lab_vm, f"sha256sum < {GRUB}")
    assert _sourced(lab_vm) == 'quiet foo="a b"'
    run = run_pyinfra(SITE, "-y", env={"GPUNODE_LAB_CMDLINE": "gpunode_trust_test=1"})
    assert run.returncode == 0, run.log
    words = _sourced(lab_vm).split(" ")
    assert words[:3] == ["quiet", 'foo="a', 'b"'] and "gpunode_trust_test=1" in words
    assert "# the user's own comment" in sh(lab_vm, f"grep ^GRUB_CMDLINE_LINUX_DEFAULT= {GRUB}")
    assert sh(lab_vm, f"sha256sum < {ORIGINAL}") == before, "the original is the file as found"
    leftovers = sh(lab_vm, f"find /etc /var/lib/gpunode -name '*{COPY_SUFFIX}' "
                           f"-o -name '*{NEW_INFIX}*' | head")
    assert leftovers == ""


def test_unkeepable_grub_value_is_refused_before_any_change(lab_vm):
    _set_grub_line(lab_vm, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet $(touch /tmp/gpunode-pwned)"')
    before = sh(lab_vm, f"sha256sum < {GRUB}")
    try:
        run = run_pyinfra(SITE, "--dry")
        assert run.returncode != 0
        assert "refused before any change" in run.log and f"{GRUB} line" in run.log
        assert "command substitution" in run.log
        assert sh(lab_vm, f"sha256sum < {GRUB}") == before
        assert lab_vm.ssh("test -e /tmp/gpunode-pwned")[0] != 0
    finally:
        sh(lab_vm, f"cp -p /var/lib/gpunode/written{GRUB} {GRUB} 2>/dev/null || "
                   f"cp -p /root/grub.lab {GRUB}")


def test_damaged_state_and_a_held_lock_are_refused_naming_them(lab_vm):
    sh(lab_vm, f"cp -p {STATE} /root/state.lab && head -c 40 /root/state.lab > {STATE}")
    try:
        run = run_pyinfra(SITE, "--dry")
        assert run.returncode != 0 and f"{STATE} is damaged" in run.log and "Fix:" in run.log
    finally:
        sh(lab_vm, f"cp -p /root/state.lab {STATE}")
    # The lock command is a subshell of its own (it ends with exit): this SSH session, whose
    # life the lock's holder follows, stays up after it (sleep) like a run's.
    holder = subprocess.Popen(
        lab_vm.ssh_argv(lock_command("labtest1", "run=labtest1 controller=lab-test") +
                        "\nsleep 600"),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout is not None and "gpunode-lock: taken" in holder.stdout.readline()
        run = run_pyinfra(SITE, "--dry")
        assert run.returncode != 0 and "another gpunode run holds /run/gpunode/lock" in run.log
        assert "run=labtest1 controller=lab-test" in run.log
    finally:
        holder.kill()
        holder.wait()
    time.sleep(3)  # the holder sees its SSH session gone within a second
    free = run_pyinfra(SITE, "--dry")
    assert free.returncode == 0, free.log
    assert free.planned_changes() == [], free.planned_changes()
