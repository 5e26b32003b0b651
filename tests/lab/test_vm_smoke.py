"""The lab VM is what the lab tier relies on: pinned SSH, 2 NUMA nodes, PCIe stand-ins, GRUB."""

from __future__ import annotations

import re
from pathlib import Path

import paramiko
import pytest

from lab.vm import LabVM
from tests.lab.guest import sh

pytestmark = pytest.mark.lab

STANDIN = "8086:10d3"
VIRTIO_NET = "1af4:1041"


def _bdfs(lspci: str, ids: str) -> list[str]:
    return [line.split()[0] for line in lspci.splitlines() if f"[{ids}]" in line]


def test_ssh_uses_the_pinned_host_key(lab_vm: LabVM) -> None:
    state = lab_vm.state
    assert state is not None
    pinned = Path(state.known_hosts).read_text().split()
    assert pinned[0] == f"[127.0.0.1]:{state.port}" and pinned[1] == "ssh-ed25519"
    assert sh(lab_vm, "id -un").strip() == "root"


def test_ssh_refuses_an_unknown_host_key(lab_vm: LabVM, tmp_path: Path) -> None:
    state = lab_vm.state
    assert state is not None
    other = paramiko.Ed25519Key.from_private_key_file(state.ssh_key)  # any key but the host's
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{state.port} ssh-ed25519 {other.get_base64()}\n")
    client = paramiko.SSHClient()
    client.load_host_keys(str(known))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(state.host, port=state.port, username="root", key_filename=state.ssh_key,
                       look_for_keys=False, allow_agent=False, timeout=30)  # fmt: skip
    client.close()


def test_two_numa_nodes(lab_vm: LabVM) -> None:
    assert sh(lab_vm, "cat /sys/devices/system/node/online").strip() == "0-1"
    assert sh(lab_vm, "test -d /sys/devices/system/node/node1 && echo yes").strip() == "yes"
    assert sh(lab_vm, "cat /proc/sys/kernel/numa_balancing").strip() in ("0", "1")


def test_pcie_standins_and_virtio_nic(lab_vm: LabVM) -> None:
    lspci = sh(lab_vm, "lspci -D -nn")
    standins = _bdfs(lspci, STANDIN)
    assert len(standins) == 2, lspci
    assert all("Ethernet controller [0200]" in line
               for line in lspci.splitlines() if f"[{STANDIN}]" in line)  # fmt: skip
    assert len(_bdfs(lspci, VIRTIO_NET)) == 1, lspci
    assert set(standins).isdisjoint(_bdfs(lspci, VIRTIO_NET))


def test_setpci_reads_device_control(lab_vm: LabVM) -> None:
    standins = _bdfs(sh(lab_vm, "lspci -D -nn"), STANDIN)
    for bdf in standins:
        value = sh(lab_vm, f"setpci -s {bdf} CAP_EXP+8.w").strip()
        assert re.fullmatch(r"[0-9a-f]{4}", value), value
        assert "MaxReadReq" in sh(lab_vm, f"lspci -s {bdf} -vv")


def test_booted_through_grub(lab_vm: LabVM) -> None:
    cmdline = sh(lab_vm, "cat /proc/cmdline")
    assert cmdline.startswith("BOOT_IMAGE=/boot/vmlinuz-"), cmdline
    assert "console=ttyS0" in cmdline
    assert "root=UUID=" in cmdline
