"""Drift you can watch: gpunode-verify.timer on the lab node and the audit's metrics file
follow a drifted setting (both read back with prometheus_client's text-format parser); a
profile that turns the timer off takes it off. (Undo with the timer on: test_a, whose runs all
have it on.)"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpunode.facts.pcie_refusals import REFUSED_DIR
from gpunode.ops.pcie import ACS_REDIRECT_MASK
from gpunode.roles.verify_timer import VERIFY_TIMER
from lab.vm import HOST_NAME
from tests.lab.node_snapshot import METRICS_DIR, TIMER_PATHS
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

TIMER_ON = {"GPUNODE_LAB_VERIFY_TIMER": "1"}
ACS_OFF = {**TIMER_ON, "GPUNODE_LAB_ACS_REDIRECT": "off"}
STANDIN = "8086:10d3"  # the lab selector's e1000e
BEFORE: dict[str, str] = {}


def value(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return sample.value
    return None


def present(vm) -> str:
    """Which of TIMER_PATHS exist, and the timer's state."""
    rc, out, err = vm.ssh("; ".join(f"[ ! -e {p} ] || echo {p}" for p in TIMER_PATHS)
                          + f"; systemctl is-enabled {VERIFY_TIMER} 2>/dev/null; true")
    assert rc == 0, err
    return out


def run_timer(vm) -> str:
    """Run the timer's service now; its metrics file."""
    rc, text, err = vm.ssh("systemctl start gpunode-verify.service && "
                           f"cat {METRICS_DIR}/gpunode.prom")
    assert rc == 0, err
    return text


def setting_samples(text: str, prefix: str) -> dict[str, float]:
    """The timer's gpunode_setting_ok samples whose setting name starts with prefix."""
    return {sample.labels["setting"]: sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == "gpunode_setting_ok"
            and sample.labels.get("setting", "").startswith(prefix)}


def maxreadreq_samples(text: str) -> dict[str, float]:
    return setting_samples(text, "PCIe MaxReadReq")


def test_timer_and_audit_metrics_show_a_drifted_sysctl(lab_vm, tmp_path):
    BEFORE["paths"] = present(lab_vm)
    run = run_pyinfra("deploy/site.py", "-y", env=TIMER_ON, timeout=900)
    assert run.returncode == 0, run.log[-3000:]
    _, out, _ = lab_vm.ssh("systemctl is-enabled gpunode-verify.timer; "
                           "systemctl is-active gpunode-verify.timer")
    assert out.split() == ["enabled", "active"]

    def timer_metrics() -> str:
        return run_timer(lab_vm)

    setting = {"setting": "sysctl vm.swappiness", "source": "timer"}
    before = timer_metrics()
    assert value(before, "gpunode_setting_ok", **setting) == 1
    p0_before = value(before, "gpunode_findings", severity="P0")
    rc, _, err = lab_vm.ssh("sysctl -qw vm.swappiness=60")
    assert rc == 0, err
    try:
        drifted = timer_metrics()
        assert value(drifted, "gpunode_setting_ok", **setting) == 0
        assert value(drifted, "gpunode_findings", severity="P0") == p0_before + 1
        assert (value(drifted, "gpunode_last_check_timestamp_seconds")
                >= value(before, "gpunode_last_check_timestamp_seconds"))
        _, files, _ = lab_vm.ssh(f"ls -A {METRICS_DIR}")
        assert files.split() == ["gpunode.prom"]  # written whole: no temporary file left
        _, journal, _ = lab_vm.ssh("journalctl -u gpunode-verify.service -o cat --no-pager")
        assert "drifted: sysctl vm.swappiness: 60, wants 10" in journal

        target = tmp_path / "audit-{host}.prom"
        run_pyinfra("deploy/audit.py", "-y", "--data", f"gpunode_metrics_file={target}")
        audit = (tmp_path / f"audit-{HOST_NAME}.prom").read_text()
        assert value(audit, "gpunode_setting_ok", setting="sysctl vm.swappiness",
                     source="audit") == 0
    finally:
        lab_vm.ssh("sysctl -qw vm.swappiness=10")
    assert value(timer_metrics(), "gpunode_setting_ok", **setting) == 1


def test_timer_reads_maxreadreq_on_the_matched_devices_only(lab_vm):
    """The selector's patterns against the guest's real sysfs (the timer installed by the test
    above): the two stand-ins' MaxReadReq is read-only in QEMU, so each has this boot's refusal
    record (a limit, no sample). Without one's record, that one, and no other device, drifts."""
    rc, out, err = lab_vm.ssh(f"ls {REFUSED_DIR}")
    assert rc == 0, err
    refused = out.split()
    assert len(refused) == 2, refused
    assert maxreadreq_samples(run_timer(lab_vm)) == {}
    rc, _, err = lab_vm.ssh(f"mv {REFUSED_DIR}/{refused[0]} /root/")
    assert rc == 0, err
    try:
        drifted = maxreadreq_samples(run_timer(lab_vm))
    finally:
        lab_vm.ssh(f"mv /root/{refused[0]} {REFUSED_DIR}/")
    assert drifted == {f"PCIe MaxReadReq {refused[0]} [{STANDIN}]": 0}


def acs_samples(text: str) -> dict[str, float]:
    return setting_samples(text, "ACS ")


def test_timer_reads_acs_on_the_standins_root_ports(lab_vm):
    """With ACS redirect off in the profile, the timer reads ACS Control on the root ports
    above the two stand-ins (QEMU's pcie-root-port: a writable ACS capability): ok after the
    deploy, and the one port whose redirect bits were set again drifts, named."""
    run = run_pyinfra("deploy/site.py", "-y", env=ACS_OFF, timeout=900)
    assert run.returncode == 0, run.log[-3000:]
    ok = acs_samples(run_timer(lab_vm))
    assert len(ok) == 2 and set(ok.values()) == {1}, ok
    port = sorted(ok)[0].removeprefix("ACS ")
    rc, _, err = lab_vm.ssh(f"setpci -s {port} ECAP_ACS+0x6.w=001d:{ACS_REDIRECT_MASK:04x}")
    assert rc == 0, err
    try:
        drifted = acs_samples(run_timer(lab_vm))
    finally:
        lab_vm.ssh(f"setpci -s {port} ECAP_ACS+0x6.w=0000:{ACS_REDIRECT_MASK:04x}")
    assert drifted == {**ok, f"ACS {port}": 0}, drifted
    _, journal, _ = lab_vm.ssh("journalctl -u gpunode-verify.service -o cat --no-pager")
    assert f"drifted: ACS {port}: ACSCtl" in journal


def test_turning_the_timer_off_takes_it_off(lab_vm):
    run = run_pyinfra("deploy/site.py", "-y", timeout=900)
    assert run.returncode == 0, run.log[-3000:]
    lines = " | ".join(run.change_lines())
    assert f"{VERIFY_TIMER} enabled, active -> disabled, inactive" in lines, lines
    assert f"{METRICS_DIR}/gpunode.prom present -> (removed)" in lines, lines
    assert present(lab_vm) == BEFORE["paths"]
    again = run_pyinfra("deploy/site.py", "--dry")
    assert again.returncode == 0 and again.change_lines() == [], again.log[-3000:]

