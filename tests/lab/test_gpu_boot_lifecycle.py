"""The Proxmox boot lifecycle on the lab node (real pyinfra, real systemd, a real reboot):

1. gpunode-nvidia-nodes.service runs before a stand-in pve-guests.service at boot (the order
   read from the journal of a real boot), the modprobe.d file of nvidia_module_options is
   written exactly, and undo takes both away;
2. a reboot gpunode would ask for is refused when the kernel it would boot (a stand-in
   linux-image package, newer than the running one) has no NVIDIA module while an NVIDIA
   driver is in use (a stand-in nvidia-smi printing a captured report); with the module
   there the same run plans the reboot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpunode.roles.gpu_runtime.driver_boot import MODPROBE_FILE, NODES_SCRIPT, NODES_UNIT
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

DATA = Path(__file__).resolve().parents[1] / "data"
STAND_IN_GUESTS = """[Unit]
Description=stand-in for Proxmox's pve-guests.service (gpunode lab)
After=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'echo stand-in pve-guests starts the containers now'

[Install]
WantedBy=multi-user.target
"""
OPTIONS = {"GPUNODE_LAB_NVIDIA_OPTIONS": "1"}
FAKE_KERNEL = "9.9.9-1-amd64"


def journal_order(vm) -> list[str]:
    """systemd's lines about the two units in this boot, in order."""
    out = sh(vm, f"journalctl -b -o short-monotonic --no-pager -u {NODES_UNIT} "
                 "-u pve-guests.service")
    return [line for line in out.splitlines() if "systemd[1]:" in line]


def test_device_nodes_unit_runs_before_pve_guests_and_undo_takes_it_away(lab_vm):
    sh(lab_vm, "cat > /etc/systemd/system/pve-guests.service <<'EOF'\n" + STAND_IN_GUESTS
       + "EOF\nsystemctl daemon-reload && systemctl enable pve-guests.service")
    run = run_pyinfra("tests/lab/deploys/driver_boot.py", "-y", env=OPTIONS, timeout=600)
    assert run.returncode == 0, run.log[-3000:]
    assert sh(lab_vm, f"cat {MODPROBE_FILE}").splitlines()[-2:] == [
        "options nvidia NVreg_DynamicPowerManagement=0", "options nvidia_uvm uvm_disable_hmm=1"]
    assert sh(lab_vm, f"systemctl is-enabled {NODES_UNIT}").strip() == "enabled"
    again = run_pyinfra("tests/lab/deploys/driver_boot.py", env=OPTIONS, timeout=600)
    assert again.planned_changes() == []  # --dry (no -y) on a converged node: nothing

    lab_vm.reboot(timeout=600)
    lines = journal_order(lab_vm)
    finished = next(i for i, line in enumerate(lines)
                    if "Finished" in line and NODES_UNIT in line)
    starting = next(i for i, line in enumerate(lines)
                    if "Starting" in line and "pve-guests.service" in line)
    assert finished < starting, "\n".join(lines)
    told = sh(lab_vm, f"journalctl -b -o cat --no-pager -u {NODES_UNIT}")
    assert "no NVIDIA driver for kernel" in told  # the lab has no GPU: the script says so

    undo = run_pyinfra("deploy/undo.py", "-y", timeout=900)
    assert undo.returncode == 0, undo.log[-3000:]
    left = sh(lab_vm, f"for p in {MODPROBE_FILE} {NODES_SCRIPT} /etc/systemd/system/{NODES_UNIT}"
                      f"; do [ ! -e $p ] || echo $p; done; systemctl is-enabled {NODES_UNIT} "
                      "2>/dev/null; true")
    assert left.split() in ([], ["not-found"]), left


def test_reboot_refused_when_the_next_kernel_has_no_nvidia_module(lab_vm):
    xml = (DATA / "nvidia/nvidia_smi_q_x_l4_555_remapped_rows.xml").read_text()
    running = sh(lab_vm, "uname -r").strip()
    sh(lab_vm, "cat > /usr/local/bin/nvidia-smi <<'EOF'\n#!/bin/sh\ncat <<'XML'\n" + xml
       + "XML\nEOF\nchmod 755 /usr/local/bin/nvidia-smi && "
       f"mkdir -p /lib/modules/{running}/updates/dkms && "
       f": > /lib/modules/{running}/updates/dkms/nvidia.ko && "
       f"d=$(mktemp -d) && mkdir -p $d/DEBIAN $d/lib/modules/{FAKE_KERNEL}/kernel && "
       f"printf 'Package: linux-image-{FAKE_KERNEL}\\nVersion: 9.9.9-1\\nArchitecture: all\\n"
       "Maintainer: gpunode lab <lab@gpunode>\\nDescription: stand-in kernel without NVIDIA\\n'"
       " > $d/DEBIAN/control && dpkg-deb -b $d /tmp/stand-in-kernel.deb >/dev/null && "
       "dpkg -i /tmp/stand-in-kernel.deb >/dev/null")
    env = {"GPUNODE_LAB_REBOOT": "1", "GPUNODE_LAB_KERNEL_PIN": "none",
           "GPUNODE_LAB_CMDLINE": "gpunode_lab_refusal=1"}
    try:
        boot = lab_vm.boot_id()
        run = run_pyinfra("tests/lab/deploys/kernel_boot.py", "-y", env=env, timeout=900)
        assert "reboot refused: the next boot would have no NVIDIA driver: kernel " \
               f"{FAKE_KERNEL}: no NVIDIA kernel module built for it" in run.log, run.log[-3000:]
        assert f"Fix: apt install linux-headers-{FAKE_KERNEL} && dkms autoinstall" in run.log
        assert lab_vm.boot_id() == boot  # no reboot
        assert "gpunode_lab_refusal=1" in sh(  # the rest of the run was done
            lab_vm, "cat /etc/default/grub; cat /etc/default/grub.d/*.cfg 2>/dev/null; true")

        sh(lab_vm, f"mkdir -p /lib/modules/{FAKE_KERNEL}/updates/dkms && "
                   f": > /lib/modules/{FAKE_KERNEL}/updates/dkms/nvidia.ko")
        dry = run_pyinfra("tests/lab/deploys/kernel_boot.py", env=env, timeout=900)
        assert any("Reboot" in name for name in dry.planned_changes()), dry.payload
        assert "reboot refused" not in dry.log
    finally:
        sh(lab_vm, "rm -f /usr/local/bin/nvidia-smi; dpkg -r linux-image-9.9.9-1-amd64 "
                   f">/dev/null 2>&1; rm -rf /lib/modules/{FAKE_KERNEL} "
                   f"/lib/modules/{running}/updates/dkms/nvidia.ko; true")
