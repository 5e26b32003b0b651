"""audit_checks() on two whole nodes built from captured outputs: ranks and fixes."""

from gpunode.roles.audit.checks import audit_checks, tuning_checks
from gpunode.roles.audit.report import exit_status, pending

from ._nodes import by_name, healthy, misconfigured


def test_healthy_node_has_nothing_open():
    profile, snap = healthy()
    checks = audit_checks(profile, snap)
    assert exit_status(checks) == 0
    assert [c.name for c in checks if c.status in ("P0", "P1")] == []
    # The only actionable line is minor, and says deploy/site.py does not apply it.
    (minor,) = [c for c in checks if c.status == "P2"]
    assert minor.name == "GPU0 persistence mode" and not minor.deploy_fixes
    assert "nvidia-persistenced" in minor.fix
    c = by_name(checks)
    assert c["PCIe MaxReadReq 0000:41:00.0 [10de:2204]"].live == "512 bytes"
    assert c["IOMMU mode"].live.startswith("passthrough: 3 IOMMU groups (identity 3)")
    assert "iommu=pt" in c["IOMMU mode"].live
    assert c["GPU0 0000:41:00.0 PCIe link width"].live == "x16 (capability x16)"
    assert c["GPU0 0000:41:00.0 PCIe link speed"].status == "ok"
    assert c["GPU0 0000:41:00.0 Resizable BAR"].live == "BAR1 131072 MiB, VRAM 81920 MiB"
    assert c["GPU0 temperature"].live == "27 C (slowdown at 89 C)"
    assert c["GPU0 power limit"].live == "500 W (default 500 W, range 100..500 W)"
    assert c["GPU0 clocks"].live == "SM 1275/1410 MHz"
    assert c["GPU0 ECC"].live == "Enabled, 0 volatile uncorrectable errors"
    assert c["NVIDIA driver"].live == "535.54.03 (module = user space)"
    assert c["kernel"].status == "ok" and c["kernel"].note == "newer installed: 6.8.12-6-pve"
    assert c["CT 110 (llm-a) memlock"].live == "unlimited (live)"
    assert c["CT 110 (llm-a) NVIDIA driver"].live == "535.54.03 (= host)"
    assert c["PCIe ACS redirect"].status == "ok"
    # Known limits are listed, not ranked.
    mps = c["GPU0 0000:41:00.0 PCIe MaxPayload"]
    assert (mps.status, mps.live) == ("limit", "256 bytes (DevCap 256 bytes)")
    assert c["NVLink"].status == "n/a"


def test_misconfigured_node_ranks_and_fixes():
    profile, snap = misconfigured()
    checks = audit_checks(profile, snap)
    c = by_name(checks)
    assert exit_status(checks) == 1
    p0 = {n for n, x in c.items() if x.status == "P0"}
    p1 = {n for n, x in c.items() if x.status == "P1"}
    sysctls = {f"sysctl {k}" for k in profile.sysctls}
    assert p0 == sysctls | {
        "module nvidia_peermem", "PCIe MaxReadReq 0000:41:00.0 [10de:2204]",
        "C-states (cpuidle)", "CPU governor", "memlock (systemd default)",
        "CT 110 (llm-a) NVIDIA driver"}
    assert p1 == {"cmdline processor.max_cstate", "cmdline intel_idle.max_cstate", "IOMMU mode",
                  "NVIDIA driver", "kernel", "CT 110 (llm-a) memlock"}
    # Exact fixes, and whether deploy/site.py applies them.
    mrrs = c["PCIe MaxReadReq 0000:41:00.0 [10de:2204]"]
    assert (mrrs.live, mrrs.want) == ("512 bytes", "4096 bytes")
    assert mrrs.fix == "setpci -s 0000:41:00.0 CAP_EXP+8.w=5000:7000 (run deploy/site.py)"
    assert mrrs.deploy_fixes
    assert c["sysctl vm.swappiness"].fix == "sysctl -w vm.swappiness='10' (run deploy/site.py)"
    assert c["cmdline intel_idle.max_cstate"].deploy_fixes
    iommu = c["IOMMU mode"]
    assert iommu.live.startswith("translated: 3 IOMMU groups (DMA-FQ 3)")
    assert "iommu=pt" in iommu.fix and not iommu.deploy_fixes
    driver = c["NVIDIA driver"]
    assert driver.live.startswith("Failed to initialize NVML: Driver/library version mismatch")
    assert "580.173.02" in driver.live and driver.pending == "reboot"
    kernel = c["kernel"]
    assert (kernel.live, kernel.want) == ("running 6.8.12-5-pve", "6.8.12-6-pve (newest installed)")
    assert not kernel.deploy_fixes and "gpunode.kernel_pin: running" in kernel.fix
    memlock = c["CT 110 (llm-a) memlock"]
    assert memlock.live == "lxc.prlimit.memlock: not set; live 8388608"
    assert "lxc.prlimit.memlock: unlimited" in memlock.fix and "pct reboot 110" in memlock.fix
    ct_driver = c["CT 110 (llm-a) NVIDIA driver"]
    assert ct_driver.want == "580.173.02" and "580.173.02 in CT 110" in ct_driver.fix
    assert not ct_driver.deploy_fixes
    # The ACS redirect of a root port on a one-GPU node is not chased.
    assert c["PCIe ACS redirect"].status == "ok"
    assert "one GPU" in c["PCIe ACS redirect"].note
    # No nvidia-smi report: GPU state checks say why instead of guessing.
    for name in ("GPU temperature", "GPU power limit", "GPU clocks", "GPU ECC", "NVLink"):
        assert c[name].status == "n/a" and "version mismatch" in c[name].live
    # Non-GPU containers are not checked.
    assert not [n for n in c if n.startswith("CT 102")]
    assert pending(checks)["reboot"] == [
        f"NVIDIA driver: {driver.live} -> module = user space",
        "kernel: running 6.8.12-5-pve -> 6.8.12-6-pve (newest installed)",
    ]


def test_tuning_checks_are_the_first_part_of_the_audit():
    profile, snap = misconfigured()
    tuning = tuning_checks(profile, snap)
    assert audit_checks(profile, snap)[: len(tuning)] == tuning


def test_audit_is_deterministic():
    profile, snap = misconfigured()
    assert audit_checks(profile, snap) == audit_checks(profile, snap)
