"""Prometheus metrics of the audit and of the verify timer's script, read back with
prometheus_client's own text-format parser; the end-of-run summary's width and wording."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpunode.facts.cpu import CpuState
from gpunode.profile.check import Check, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.metrics import (
    HELP,
    metrics_path,
    metrics_registry,
    render_metrics,
    write_node_metrics,
    write_textfile,
)
from gpunode.roles.audit.summary import open_lines, run_summary, verified_text
from gpunode.roles.verify_timer import render_script
from tests.unit.verify_node import tool_path

SETTINGS = [
    ok("sysctl vm.swappiness", "10", "10"),
    Check(name="sysctl kernel.numa_balancing", status="P0", live="1", want="0",
          fix="sysctl -w kernel.numa_balancing='0'"),
    Check(name="cmdline processor.max_cstate", status="P1", live="configured, pending reboot",
          want="processor.max_cstate=1", fix="reboot", pending="reboot"),
    Check(name="PCIe MaxReadReq 0000:01:00.0 [8086:10d3]", status="limit", live="128 bytes",
          want="4096 bytes", fix="device 0000:01:00.0 did not accept MaxReadReq=4096 (reads 128)"),
    Check(name='odd "name" \\ here', status="ok", live="x"),
]
CHECKS = [*SETTINGS, Check(name="GPU inventory", status="n/a", live="no NVIDIA GPU"),
          Check(name="ACS", status="P2", live="on", fix="look at it")]


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_audit_metrics_parse_and_say_what_drifted():
    text = render_metrics(SETTINGS, CHECKS, "audit", now=1_700_000_000.4)
    got = samples(text)
    audit = ("source", "audit")
    assert got[("gpunode_setting_ok", (("setting", "sysctl vm.swappiness"), audit))] == 1
    assert got[("gpunode_setting_ok", (("setting", "sysctl kernel.numa_balancing"), audit))] == 0
    assert got[("gpunode_setting_ok", (("setting", "cmdline processor.max_cstate"), audit))] == 0
    pending = [dict(k[1])["setting"] for k in got if k[0] == "gpunode_setting_pending"]
    assert pending == ["cmdline processor.max_cstate"]  # in place, waits for the reboot
    # A quote and a backslash in a name survive the round trip.
    assert got[("gpunode_setting_ok", (("setting", 'odd "name" \\ here'), audit))] == 1
    # A device that refused the write is a hardware limit, not a drifted setting.
    assert not any("MaxReadReq" in str(key) for key in got)
    findings = {dict(k[1])["severity"]: v for k, v in got.items() if k[0] == "gpunode_findings"}
    assert findings == {"P0": 1, "P1": 1, "P2": 1, "limit": 1}
    assert got[("gpunode_pending_reboot", (audit,))] == 1
    assert got[("gpunode_pending_restart", (audit,))] == 0
    assert got[("gpunode_last_check_timestamp_seconds", (audit,))] == 1_700_000_000.4


def test_the_timestamp_keeps_all_its_digits():
    """1796350123.456789 needs 16 significant digits: '%g' wrote 1.79635e+09 (~5,000 s off)."""
    now = 1_796_350_123.456789
    got = samples(render_metrics(SETTINGS, CHECKS, "audit", now=now))
    assert got[("gpunode_last_check_timestamp_seconds", (("source", "audit"),))] == now


def test_metrics_file_is_written_whole_and_readable(tmp_path):
    path = metrics_path(str(tmp_path / "prom" / "gpunode-{host}.prom"), "@pct/pve1:110")
    assert path.name == "gpunode-@pct_pve1_110.prom"
    write_textfile(path, metrics_registry(SETTINGS, CHECKS, "audit", 1.0))
    write_textfile(path, metrics_registry(SETTINGS, CHECKS, "audit", 2.0))
    assert samples(path.read_text())[
        ("gpunode_last_check_timestamp_seconds", (("source", "audit"),))] == 2.0
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert write_node_metrics("h", None, SETTINGS, CHECKS, 0) is None
    written = write_node_metrics("h", str(tmp_path / "m.prom"), SETTINGS, CHECKS, 0)
    assert written == tmp_path / "m.prom" and samples(written.read_text())


# --- the verify timer's script, run against a copy of /proc and /sys -------------------------


def _fake_node(root: Path, swappiness: str, cmdline: str, grub: str) -> str:
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/swappiness").write_text(swappiness + "\n")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/nmi_watchdog").write_text("1\n")  # refused: no perf counters
    (root / "run/gpunode/sysctl-refused").mkdir(parents=True)
    (root / "run/gpunode/sysctl-refused/kernel.nmi_watchdog").write_text("0\n")
    (root / "proc/sys/net/ipv4").mkdir(parents=True)
    (root / "proc/sys/net/ipv4/tcp_rmem").write_text("4096\t87380\t134217728\n")
    (root / "proc/cmdline").write_text(cmdline + "\n")
    (root / "etc/default").mkdir(parents=True)
    (root / "etc/default/grub").write_text(f'GRUB_CMDLINE_LINUX_DEFAULT="{grub}"\n')
    (root / "sys/module/tcp_bbr").mkdir(parents=True)
    gov = root / "sys/devices/system/cpu/cpu0/cpufreq"
    gov.mkdir(parents=True)
    (gov / "scaling_governor").write_text("powersave\n")
    # PCI functions in sysfs: a matched GPU and a NIC the selector leaves alone; a setpci that
    # reads MaxReadReq 512 for every device, and systemctl.
    for bdf, ids in {"0000:01:00.0": ("0x10de", "0x20b5", "0x030200"),
                     "0000:02:00.0": ("0x8086", "0x10d3", "0x020000")}.items():
        device = root / "sys/bus/pci/devices" / bdf
        device.mkdir(parents=True)
        for name, value in zip(("vendor", "device", "class"), ids, strict=True):
            (device / name).write_text(value + "\n")
    # Only the tools the script runs: this machine's nvidia-smi or kernel log never leak in.
    return tool_path(root / "bin", {
        "setpci": "echo 2910",  # DevCtl bits 14:12 = 2 -> 512 bytes
        "systemctl": "echo infinity",
    })


def _run_script(tmp_path: Path, **node: str) -> dict:
    root = tmp_path / "root"
    path = _fake_node(root, **node)
    out = tmp_path / "prom" / "gpunode.prom"
    profile = NodeProfile(
        sysctls={"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 87380 134217728",
                 "kernel.nmi_watchdog": "0"},
        modules=["tcp_bbr", "nvidia_peermem"], metrics_dir=str(out.parent), verify_timer=True,
        cmdline={"iommu": "pt"},
    )
    script = tmp_path / "gpunode-verify"
    script.write_text(render_script(profile, CpuState(vendor="GenuineIntel"),
                                    ["tcp_bbr", "nvidia_peermem"], kernel_pin=None))
    env = {"PATH": path, "GPUNODE_VERIFY_ROOT": str(root)}
    run = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert [p.name for p in out.parent.iterdir()] == ["gpunode.prom"]
    text = out.read_text()
    help_lines = {line.split(" ", 3)[2]: line.split(" ", 3)[3]
                  for line in text.splitlines() if line.startswith("# HELP")}
    assert all(HELP[name] == text_ for name, text_ in help_lines.items())  # same as the audit's
    all_samples = samples(text).items()
    got = {dict(k[1]).get("setting", dict(k[1]).get("severity", k[0])): v
           for k, v in all_samples if k[0] != "gpunode_setting_pending"}
    pending = {dict(k[1])["setting"] for k, v in all_samples
               if k[0] == "gpunode_setting_pending" and v == 1}
    return {"got": got, "pending": pending, "stderr": run.stderr, "text": text}


def test_verify_script_reports_drift_and_pending_reboot(tmp_path):
    run = _run_script(tmp_path, swappiness="60", cmdline="BOOT_IMAGE=/vmlinuz ro",
                      grub="quiet iommu=pt processor.max_cstate=1 intel_idle.max_cstate=1")
    got = run["got"]
    assert got["sysctl vm.swappiness"] == 0
    assert got["sysctl net.ipv4.tcp_rmem"] == 1  # the kernel's tabs are folded
    assert got["module tcp_bbr"] == 1 and got["module nvidia_peermem"] == 0
    assert got["PCIe MaxReadReq 0000:01:00.0 [10de:20b5]"] == 0
    assert not [name for name in got if "0000:02:00.0" in str(name)]  # not matched: not read
    assert ("drifted: PCIe MaxReadReq 0000:01:00.0 [10de:20b5]: 512 bytes, wants 4096"
            in run["stderr"])
    assert got["CPU governor"] == 0
    assert got["cmdline iommu"] == 0 and got["cmdline processor.max_cstate"] == 0
    # In the bootloader's config, waiting for the reboot: pending, not drift.
    assert run["pending"] == {"cmdline iommu", "cmdline processor.max_cstate",
                              "cmdline intel_idle.max_cstate"}
    assert got["memlock (systemd default)"] == 1
    assert got["gpunode_pending_reboot"] == 1
    assert got["P0"] == 4 and got["P1"] == 3
    assert "sysctl kernel.nmi_watchdog" not in got and got["limit"] == 1  # refused: a limit
    assert "drifted: sysctl vm.swappiness: 60, wants 10" in run["stderr"]


def test_verify_script_on_a_converged_node(tmp_path):
    run = _run_script(tmp_path, swappiness="10",
                      cmdline="ro iommu=pt processor.max_cstate=1 intel_idle.max_cstate=1",
                      grub="iommu=pt")
    got = run["got"]
    assert got["sysctl vm.swappiness"] == 1
    assert got["cmdline iommu"] == 1 and got["gpunode_pending_reboot"] == 0
    assert got["gpunode_last_check_timestamp_seconds"] > 1_600_000_000


def test_verify_script_quotes_every_value():
    text = render_script(NodeProfile(), CpuState(), ["tcp_bbr"], kernel_pin="6.8.12-4-pve")
    assert ("check_sysctl 'sysctl net.ipv4.tcp_rmem' '4096 87380 134217728' net/ipv4/tcp_rmem"
            in text)
    assert "check_kernel 'kernel pin' 6.8.12-4-pve\n" in text  # shlex: safe values stay bare
    assert "OUT=/var/lib/prometheus/node-exporter/gpunode.prom" in text


@pytest.mark.parametrize("bad", [{"verify_interval": "15 min"}, {"verify_interval": "1h;x"},
                                 {"metrics_dir": "relative"}, {"metrics_dir": "/a/../b"},
                                 {"metrics_dir": "/a b"}, {"metrics_dir": "/a$(x)"}])
def test_timer_fields_are_allow_listed(bad):
    with pytest.raises(ValueError):
        NodeProfile(**bad)


# --- the end-of-run summary ------------------------------------------------------------------


def test_run_summary_fits_100_columns_and_explains_verified():
    changed = [f"Write /etc/some/very/long/path/number-{i}.conf" for i in range(12)]
    lines = run_summary("gpu-07.example.org", changed, 9, [], CHECKS)
    assert lines[0] == "gpu-07.example.org: summary of this run"
    assert all(len("    " + line) <= 100 for line in lines)
    text = "\n".join(lines)
    assert "12 operation(s)" in text and "and 4 more" in text
    assert "pending reboot   cmdline processor.max_cstate" in text
    assert "pending restart  none" in text
    assert "refused          device 0000:01:00.0 did not accept MaxReadReq=4096 (reads 128)" in text
    label, why = verified_text(CHECKS)
    assert label == "verified 2/7"
    assert why.startswith("2 read back as the profile wants; 2 open (P0/P1), 1 minor (P2)")
    assert "1 refused by the hardware" in why and "not read here: GPU inventory" in why
    assert all(len("    " + line) <= 100 for line in open_lines("gpu-07", CHECKS))


def test_verify_timer_needs_no_python_on_the_node():
    text = render_script(NodeProfile(), CpuState(), [], None)
    assert text.startswith("#!/bin/sh\n") and "python" not in text
    assert os.linesep == "\n"


def test_run_summary_lists_each_refusal_whole_on_its_own_line():
    """Two refusals (the lab's two stand-ins): each stays one line, never cut by the wrap."""
    refusals = [
        Check(name=f"PCIe MaxReadReq {bdf} [8086:10d3]", status="limit", live="128 bytes",
              want="4096 bytes", fix=f"device {bdf} did not accept MaxReadReq=4096 (reads 128)")
        for bdf in ("0000:01:00.0", "0000:21:00.0")
    ]
    lines = run_summary("gpunode-lab", [], 3, [], refusals)
    for bdf in ("0000:01:00.0", "0000:21:00.0"):
        wanted = f"device {bdf} did not accept MaxReadReq=4096 (reads 128)"
        assert any(line.rstrip().endswith(wanted) for line in lines), lines
    assert all(len("    " + line) <= 100 for line in lines)
