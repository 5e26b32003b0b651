"""End to end on the lab VM (real kernel, systemd, SSH, setpci): dry-run, apply, reboot,
re-run with zero changes, drift repair. The steps run in order on one guest.
"""

from __future__ import annotations

import json
import shlex

import pytest

from gpunode.ops.pcie import write_and_verify_command
from gpunode.profile.loader import load_profile
from gpunode.roles.host_tuning import BOOT_SCRIPT, OWNED_FILES, SYSCTL_FILE
from lab.profile import LAB_PROFILE, LAB_SELECTOR
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
AUDIT = "deploy/audit.py"


def lab_profile():
    return load_profile("gpunode-lab", {"gpunode": LAB_PROFILE})


def pci_devices(vm) -> dict[str, str]:
    """BDF -> 'vendor:device' for every PCI function in the guest."""
    devices = {}
    for line in sh(vm, "lspci -D -n").splitlines():
        parts = line.split()
        devices[parts[0]] = parts[2]
    return devices


def device_controls(vm) -> dict[str, str]:
    """BDF -> raw Device Control register (CAP_EXP+8.w) for every PCIe function."""
    out = sh(
        vm,
        "for d in $(lspci -D -n | cut -d' ' -f1); do "
        "echo $d $(setpci -s $d CAP_EXP+8.w 2>/dev/null || echo none); done",
    )
    return dict(line.split() for line in out.splitlines())


def live_state(vm, profile) -> dict:
    keys = sorted(profile.sysctls)
    sysctls = sh(
        vm,
        "; ".join(
            f"echo {k}=$(cat /proc/sys/{k.replace('.', '/')} 2>/dev/null || echo missing)"
            for k in keys
        ),
    )
    files = sh(vm, "; ".join(f"[ -e {f} ] && echo {f} || true" for f in OWNED_FILES))
    return {
        "sysctls": dict(line.split("=", 1) for line in sysctls.splitlines()),
        # only the profile's modules: udev keeps autoloading others (kvm_amd, ccp) after boot
        "modules": sorted(set(sh(vm, "ls /sys/module").split()) & set(profile.modules)),
        "files": files.split(),
        "devctl": device_controls(vm),
        "grub": sh(vm, "cat /etc/default/grub"),
        "cmdline": sh(vm, "cat /proc/cmdline").split(),
        "memlock": sh(vm, "systemctl show --value -p DefaultLimitMEMLOCK").strip(),
        "unit": vm.ssh("systemctl is-enabled gpunode-tune.service")[1].strip(),
    }


def normalized(value: str) -> str:
    return " ".join(value.split())


def assert_profile_live(state: dict, profile) -> None:
    for key, want in profile.sysctls.items():
        live = state["sysctls"][key]
        if key == "kernel.nmi_watchdog" and live == "0":
            continue
        assert normalized(live) == normalized(want), key
    for module in profile.modules:
        assert module in state["modules"]
    assert sorted(state["files"]) == sorted(OWNED_FILES)
    assert state["memlock"] == "infinity"
    assert state["unit"] == "enabled"


@pytest.fixture(scope="module")
def cycle(lab_vm, tmp_path_factory):
    """Shared record of the steps (each test adds to it)."""
    return {
        "vm": lab_vm,
        "profile": lab_profile(),
        "reports": tmp_path_factory.mktemp("audit-reports"),
    }


def report_counts(report: dict) -> dict[str, int]:
    """Checks per status in the audit's JSON report."""
    counts: dict[str, int] = {}
    for check in report["checks"]:
        counts[check["status"]] = counts.get(check["status"], 0) + 1
    return counts


def test_1_dry_run_lists_changes_and_changes_nothing(cycle):
    vm, profile = cycle["vm"], cycle["profile"]
    before = live_state(vm, profile)
    cycle["fresh"] = before
    assert before["sysctls"]["kernel.numa_balancing"] == "1"

    run = run_pyinfra(SITE, "--dry")
    assert run.returncode == 0, run.log
    assert run.wide_lines() == []
    planned = run.planned_changes()
    for expected in (
        "Write /etc/sysctl.d/90-gpunode.conf",
        "Set sysctl values now",
        "Load kernel modules now",
        "Persist kernel cmdline",
    ):
        assert any(expected in name for name in planned), (expected, planned)
    assert live_state(vm, profile) == before
    audit = run_pyinfra(
        AUDIT, "-y", "--data", "report=json", "--data", f"report_dir={cycle['reports']}"
    )
    assert audit.returncode != 0, "a fresh node has open P0/P1 findings"
    assert "audit failed" in audit.log and "not ready" in audit.log
    assert "No hosts remaining" not in audit.log and "Error: executed" not in audit.log
    assert audit.wide_lines() == []
    report = json.loads((cycle["reports"] / "gpunode-lab.json").read_text())
    assert report_counts(report).get("P0", 0) > 0
    assert live_state(vm, profile) == before


FLEET_INVENTORY = """\
from inventories.lab import lab_nodes

_name, _data = lab_nodes[0]
fleet = [(f"audit-{i}", _data) for i in (1, 2, 3)]
"""


def test_1b_audit_reports_every_failing_host_of_a_fleet(cycle, tmp_path):
    """Three names for the lab node, one host at a time (--parallel 1): each failing host is
    audited and named, not only the first, and the run exits 1."""
    inventory = tmp_path / "fleet.py"
    inventory.write_text(FLEET_INVENTORY)
    audit = run_pyinfra(AUDIT, "-y", "--parallel", "1", inventory=str(inventory))
    assert audit.returncode == 1, audit.log
    for name in ("audit-1", "audit-2", "audit-3"):
        assert f"{name}: audit failed:" in audit.log, audit.log
    assert live_state(cycle["vm"], cycle["profile"]) == cycle["fresh"]


BUNDLE = "gpunode.facts.node_read.NodeRead"


def test_2_apply_sets_live_values_and_reports_refused_maxreadreq(cycle):
    """The first converge reads the node twice: the deploy's snapshot, and the verify's second
    snapshot of what the operations changed (no fact read on its own, none twice before)."""
    vm, profile = cycle["vm"], cycle["profile"]
    run = run_pyinfra(SITE, "-y", "-v")
    assert run.returncode == 0, run.log
    assert run.errors() == []
    assert run.loaded_facts() == [BUNDLE, BUNDLE], run.loaded_facts()
    state = live_state(vm, profile)
    assert_profile_live(state, profile)
    assert "processor.max_cstate=1" in state["grub"]
    assert "pending reboot" in run.log
    # every file gpunode owns: root's, with its explicit mode (the boot script executable)
    for line in sh(vm, "stat -c '%n %U:%G %a' " + " ".join(OWNED_FILES)).splitlines():
        path, owner, mode = line.split()
        assert (owner, mode) == ("root:root", "755" if path == BOOT_SCRIPT else "644"), line

    devices = pci_devices(vm)
    stand_in = f"{LAB_SELECTOR['vendor']}:{LAB_SELECTOR['device']}"
    matched = [bdf for bdf, ids in devices.items() if ids == stand_in]
    assert len(matched) == 2
    refused = sh(vm, "ls /run/gpunode/mrrs-refused").split()
    assert sorted(refused) == sorted(matched)
    assert state["devctl"] == cycle["fresh"]["devctl"], "a Device Control register changed"
    for bdf in matched:
        assert f"device {bdf} did not accept MaxReadReq=4096 (reads 128)" in run.log
    cycle["matched"] = matched


def test_3_masked_write_keeps_the_other_device_control_bits(cycle):
    """The op's own command on a root port, whose error-report bits (0x000f) are writable."""
    vm = cycle["vm"]
    ports = [bdf for bdf, ids in pci_devices(vm).items() if ids == "1b36:000c"]
    assert ports, "no QEMU pcie-root-port in the guest"
    port = ports[0]
    before = sh(vm, f"setpci -s {port} CAP_EXP+8.w").strip()
    assert int(before, 16) & 0x000F == 0x000F
    rc, _, err = vm.ssh(write_and_verify_command(port, 4096))
    assert rc == 0
    assert f"device {port} did not accept MaxReadReq=4096 (reads 128)" in err
    assert sh(vm, f"setpci -s {port} CAP_EXP+8.w").strip() == before
    sh(vm, f"rm -f /run/gpunode/mrrs-refused/{shlex.quote(port)}")


def test_4_reboot_allowed_applies_cmdline_and_boot_unit_reapplies(cycle):
    vm, profile = cycle["vm"], cycle["profile"]
    boot_before = vm.boot_id()
    run = run_pyinfra(SITE, "-y", env={"GPUNODE_LAB_REBOOT": "1"})
    assert run.returncode == 0, run.log
    assert run.wide_lines() == []
    assert any("Reboot" in name for name in run.changed()), run.changed()
    assert vm.boot_id() != boot_before
    state = live_state(vm, profile)
    assert_profile_live(state, profile)
    assert "processor.max_cstate=1" in state["cmdline"]
    assert sh(vm, "cat /sys/module/processor/parameters/max_cstate").strip() == "1"
    # kernel_pin: running -> GRUB_DEFAULT names the pinned entry, and GRUB really booted it
    kernel = sh(vm, "uname -r").strip()
    assert f"with Linux {kernel}'" in vm.console_tail(400)
    journal = sh(vm, "journalctl -b -u gpunode-tune.service --no-pager -o cat")
    for bdf in cycle["matched"]:
        assert f"{bdf}: device did not accept MaxReadReq=4096 (reads 128)" in journal
    for bdf, ids in pci_devices(vm).items():
        if bdf not in cycle["matched"]:
            assert bdf not in journal, f"unmatched device {bdf} ({ids}) was touched"
    modules_log = sh(vm, "journalctl -b -u systemd-modules-load.service --no-pager -o cat")
    assert "Failed" not in modules_log
    for module in profile.modules:
        assert module in state["modules"]


def test_5_rerun_changes_nothing(cycle):
    """Zero changes, and the converged node is read in one remote command (the deploy's
    snapshot, which holds the verify's parts too: nothing changed, so nothing is read again)."""
    run = run_pyinfra(SITE, "-y", "-v", env={"GPUNODE_LAB_REBOOT": "1"})
    assert run.returncode == 0, run.log
    assert run.changed() == []
    assert run.loaded_facts() == [BUNDLE], run.loaded_facts()
    host_only = run_pyinfra("deploy/host.py", "-y", "-v")
    assert host_only.returncode == 0 and host_only.changed() == [], host_only.log
    assert host_only.loaded_facts() == [BUNDLE], host_only.loaded_facts()
    dry = run_pyinfra(SITE, "--dry", "-v", env={"GPUNODE_LAB_REBOOT": "1"})
    assert dry.returncode == 0, dry.log
    assert dry.planned_changes() == []
    assert dry.loaded_facts() == [BUNDLE], dry.loaded_facts()
    assert "verified" in run.log and " 0 open" in run.log
    audit = run_pyinfra(
        AUDIT, "-y", "-v", "--data", "report=json", "--data", f"report_dir={cycle['reports']}"
    )
    assert audit.returncode == 0, audit.log
    assert audit.loaded_facts() == [BUNDLE], audit.loaded_facts()
    report = json.loads((cycle["reports"] / "gpunode-lab.json").read_text())
    assert report_counts(report).get("P0", 0) == 0 and report_counts(report).get("P1", 0) == 0


def test_6_drift_is_named_exactly_and_repaired(cycle):
    vm, profile = cycle["vm"], cycle["profile"]
    module = profile.modules[0]
    sh(
        vm,
        f"sysctl -w kernel.numa_balancing=1 && sed -i '/vm.swappiness/d' {SYSCTL_FILE} "
        f"&& rmmod {module}",
    )
    dry = run_pyinfra(SITE, "--dry", "--diff")
    assert dry.returncode == 0, dry.log
    assert dry.wide_lines() == []
    planned = sorted(name.rsplit(" | ", 1)[-1] for name in dry.planned_changes())
    assert planned == sorted(
        [f"Write {SYSCTL_FILE}", "Set sysctl values now", "Load kernel modules now"]
    )
    run = run_pyinfra(SITE, "-y")
    assert run.returncode == 0, run.log
    assert run.wide_lines() == []
    assert_profile_live(live_state(vm, profile), profile)
    assert sh(vm, f"ls /var/lib/gpunode/backups{SYSCTL_FILE}.2*").strip()
    assert sh(vm, f"ls /var/lib/gpunode/originals{SYSCTL_FILE}.absent").strip()
    assert run_pyinfra(SITE, "--dry").planned_changes() == []
