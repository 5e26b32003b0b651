"""pcie_acs_redirect: off on the lab guest: QEMU's pcie-root-port has a writable ACS capability,
so the masked write of ECAP_ACS+0x6 and its read-back are real. Only the root ports above the
stand-ins (the lab selector's e1000e) change, only the redirect bits, at runtime (pyinfra over
SSH) and at boot (the gpunode-tune script), and a second run changes nothing.

It converges the guest (deploy/host.py -y), so it runs after test_deploy_cycle.py, whose first
test needs the fresh guest that test_a_dry_run_and_undo.py leaves behind."""

from __future__ import annotations

import pytest

from gpunode.ops.pcie import ACS_REDIRECT_MASK
from lab.vm import LabVM
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

HOST = "deploy/host.py"
ACS_OFF = {"GPUNODE_LAB_ACS_REDIRECT": "off"}
STANDIN = "8086:10d3"
ACS_OP = "Clear ACS redirect bits above matched devices"


def _parent(vm: LabVM, bdf: str) -> str:
    return sh(vm, f"basename $(dirname $(readlink -f /sys/bus/pci/devices/{bdf}))").strip()


def _acs(vm: LabVM, bdf: str) -> int:
    return int(sh(vm, f"setpci -s {bdf} ECAP_ACS+0x6.w").strip(), 16)


def test_acs_redirect_cleared_on_the_standins_root_ports_only(lab_vm: LabVM) -> None:
    lines = sh(lab_vm, "lspci -D -n").splitlines()
    standins = [line.split()[0] for line in lines if f" {STANDIN}" in line]
    others = [line.split()[0] for line in lines if " 1af4:1041" in line]
    ports = sorted({_parent(lab_vm, bdf) for bdf in standins})
    other_ports = sorted({_parent(lab_vm, bdf) for bdf in others} - set(ports))
    assert len(ports) == 2 and other_ports, (ports, other_ports)
    # Linux enabled ACS (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd) on every root port.
    for port in ports + other_ports:
        sh(lab_vm, f"setpci -s {port} ECAP_ACS+0x6.w=001d:{ACS_REDIRECT_MASK:04x}")
    before = {port: _acs(lab_vm, port) for port in ports + other_ports}
    assert all(v & ACS_REDIRECT_MASK for v in before.values()), before

    run = run_pyinfra(HOST, "-y", env=ACS_OFF)
    assert run.returncode == 0, run.log[-3000:]
    assert any(name.endswith(ACS_OP) for name in run.changed()), run.changed()
    for port in ports:  # read back: redirect bits clear, every other bit as it was
        after = _acs(lab_vm, port)
        assert after & ACS_REDIRECT_MASK == 0, hex(after)
        assert after & ~ACS_REDIRECT_MASK == before[port] & ~ACS_REDIRECT_MASK
        assert "ReqRedir-" in sh(lab_vm, f"lspci -vvv -s {port} | grep ACSCtl")
    for port in other_ports:  # the NIC's root port is not above a matched device
        assert _acs(lab_vm, port) == before[port]
    again = run_pyinfra(HOST, "--dry", env=ACS_OFF).planned_changes()
    assert not any(name.endswith(ACS_OP) for name in again), again

    # Boot half: config space comes back with the bits set; the boot script clears them again.
    sh(lab_vm, f"setpci -s {ports[0]} ECAP_ACS+0x6.w=001d:{ACS_REDIRECT_MASK:04x}")
    log = sh(lab_vm, "/usr/local/sbin/gpunode-tune")
    rest = before[ports[0]] & ~ACS_REDIRECT_MASK
    assert f"{ports[0]}: ACSCtl {rest | 0x1d:04x} -> {rest:04x} (redirect off)" in log
    assert f"{ports[1]}: ACS redirect off" in log
    assert _acs(lab_vm, ports[0]) & ACS_REDIRECT_MASK == 0
    assert all(_acs(lab_vm, port) == before[port] for port in other_ports)
