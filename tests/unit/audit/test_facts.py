"""AuditFacts parsers on captured outputs (tests/data/audit, nvidia, lxc, proxmox, kernels)."""

import base64

import pytest

from gpunode.facts.audit import (
    AUDIT_COMMAND,
    SHARED_PARTS,
    AuditFacts,
    parse_audit_sections,
    parse_iommu,
)
from gpunode.facts.containers import parse_container_exec
from gpunode.facts.gpu_details import parse_gpu_details, parse_nvlink_status
from gpunode.facts.pcie import parse_pci_paths
from gpunode.facts.sections import MARKER

from ._nodes import CT_MEMLOCK_8M, CT_MEMLOCK_UNLIMITED, read


def test_nvlink_h100_pcie_bridged_pair():
    gpus = parse_nvlink_status(read("audit/nvlink_s_h100_pcie_x2_nvlink_555.txt"))
    assert [(g.index, g.name, g.active_links, g.inactive_links) for g in gpus] == [
        (0, "NVIDIA H100 PCIe", 12, 6), (1, "NVIDIA H100 PCIe", 12, 6)]
    assert {g.link_speed_gbs for g in gpus} == {26.562}
    assert all(g.message is None for g in gpus)


def test_nvlink_a100_pcie_without_nvlink():
    gpus = parse_nvlink_status(read("audit/nvlink_s_a100_pcie_x2_no_nvlink_555.txt"))
    assert [(g.index, g.active_links) for g in gpus] == [(0, 0), (1, 0)]
    assert gpus[0].message == (
        "NVML: Unable to retrieve NVLink information as all links are inActive")


def test_nvlink_partially_bridged_a6000s():
    gpus = parse_nvlink_status(read("audit/nvlink_s_rtx_a6000_x3_partial.txt"))
    assert [(g.index, g.active_links, g.link_speed_gbs) for g in gpus] == [
        (0, 4, 14.062), (1, 4, 14.062), (2, 0, None)]


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed because it couldn't communicate",
                                  read("nvidia/nvidia_smi_error_version_mismatch.txt")])
def test_nvlink_other_text_is_no_gpu(text):
    assert parse_nvlink_status(text) == []


def test_gpu_details_535_layout():
    (details,) = parse_gpu_details(
        read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml")).values()
    assert details.bdf == "0000:01:00.0"
    assert details.active_clock_reasons == []
    assert (details.temp_slowdown_c, details.temp_shutdown_c) == (89, 92)
    assert details.ecc_pending == "Enabled"
    # The GPU's own BAR1/framebuffer, not the MIG devices' (32767 MiB / 19968 MiB).
    assert (details.bar1_total_mib, details.fb_total_mib) == (131072, 81920)
    assert details.performance_state == "P0"


def test_gpu_details_510_throttle_reason_layout():
    (details,) = parse_gpu_details(read("nvidia/nvidia_smi_q_x_tesla_p100_510.xml")).values()
    assert details.bdf == "0000:00:04.0"
    assert details.active_clock_reasons == ["gpu_idle"]
    assert details.temp_slowdown_c == 82
    assert (details.bar1_total_mib, details.fb_total_mib) == (16384, 16384)


@pytest.mark.parametrize("text", ["", read("nvidia/nvidia_smi_error_version_mismatch.txt"),
                                  "<nvidia_smi_log><gpu>"])
def test_gpu_details_not_a_report(text):
    assert parse_gpu_details(text) == {}


def test_iommu_groups_and_types():
    state = parse_iommu("0\n1\n12\n45\n", "/sys/kernel/iommu_groups/0/type:DMA-FQ\n"
                        "/sys/kernel/iommu_groups/1/type:identity\n"
                        "/sys/kernel/iommu_groups/45/type:unmanaged\n")
    assert state.groups == 4
    assert state.group_types == {0: "DMA-FQ", 1: "identity", 45: "unmanaged"}
    assert state.type_counts() == {"DMA-FQ": 1, "identity": 1, "unmanaged": 1}
    assert parse_iommu("", "").groups == 0


def test_pci_paths_from_sysfs():
    paths = parse_pci_paths(
        "/sys/devices/pci0000:00/0000:00:00.0\n"
        "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0\n"
        "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:08.0/0000:c3:00.0\n")
    assert paths == {
        "0000:00:00.0": [],
        "0000:41:00.0": ["0000:40:01.1"],
        "0000:c3:00.0": ["0000:c0:01.1", "0000:c1:00.0", "0000:c2:08.0"],
    }


@pytest.mark.parametrize(("text", "expected"), [
    (f"550.54.15\n{CT_MEMLOCK_UNLIMITED}\n", ("550.54.15", None, "unlimited")),
    ("Failed to initialize NVML: Driver/library version mismatch\n" + CT_MEMLOCK_8M,
     (None, "Failed to initialize NVML: Driver/library version mismatch", "8388608")),
    ("sh: 1: nvidia-smi: not found\n", (None, "sh: 1: nvidia-smi: not found", None)),
    ("", (None, None, None)),
])
def test_container_probe(text, expected):
    assert parse_container_exec(text) == expected


def _section(name: str, text: str) -> str:
    return f"{MARKER}{name}\n{text}\n\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_whole_output_of_a_proxmox_gpu_host():
    """The fact's output as the host prints it, sections filled with captures."""
    xml = read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml")
    gpu_conf = read("lxc/composed-gpu-pending-snapshots-110.conf")
    text = "".join([
        _section("iommu_groups", "0\n1"),
        _section("iommu_types", "/sys/kernel/iommu_groups/0/type:identity\n"
                 "/sys/kernel/iommu_groups/1/type:identity"),
        _section("pci_paths", "/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0"),
        _section("nvidia_smi", xml),
        _section("nvlink", read("audit/nvlink_s_h100_pcie_x2_nvlink_555.txt")),
        _section("persistenced", "installed=yes"),
        _section("units", "Id=gpunode-tune.service\nSubState=exited\nUnitFileState=enabled\n"
                 "ActiveState=active\n\nId=nvidia-persistenced.service\nSubState=dead\n"
                 "UnitFileState=disabled\nActiveState=inactive"),
        _section("pveversion", read("proxmox/pveversion_8.0.3.txt")),
        _section("boot_kernels", read("proxmox/boot_tool_kernel_list_pinned_3kernels.txt")),
        _section("has_pct", "yes"),
        _section("pct_list", "VMID       Status     Lock         Name\n"
                 "102        stopped                 docker\n110        running     llm-a\n"),
        _section("containers", ""),
        f"{MARKER}ct_config:102\n{_b64(read('lxc/frigate-7640-102.conf'))}\n",
        f"{MARKER}ct_config:110\n{_b64(gpu_conf)}\n",
        f"{MARKER}ct_exec:110\n550.54.15\n{CT_MEMLOCK_8M}\n\n",
    ])
    extras = AuditFacts().process(text.splitlines())
    assert extras == parse_audit_sections(text)
    assert extras.iommu.groups == 2 and extras.iommu.type_counts() == {"identity": 2}
    assert extras.pci_paths == {"0000:01:00.0": ["0000:00:01.1"]}
    assert extras.nvidia.present and extras.nvidia.driver_version == "535.54.03"
    assert list(extras.gpu_details) == ["0000:01:00.0"]
    assert [g.active_links for g in extras.nvlink] == [12, 12]
    assert (extras.persistenced.installed, extras.persistenced.enabled,
            extras.persistenced.active) == (True, "disabled", "inactive")
    assert extras.pve.manager_version == "8.0.3"
    assert extras.boot_pinned == "6.5.13-6-pve"
    ct102, ct110 = extras.containers
    assert (ct102.vmid, ct102.status, ct102.gpu, ct102.exec_ran) == (102, "stopped", False, False)
    assert (ct110.vmid, ct110.name, ct110.gpu, ct110.memlock_config) == (110, "llm-a", True, None)
    assert (ct110.driver_version, ct110.memlock_live) == ("550.54.15", "8388608")


def test_host_without_anything():
    """A container without GPUs, Proxmox or sysfs: every section empty."""
    names = ["iommu_groups", "iommu_types", "pci_paths", "nvidia_smi", "nvlink", "units",
             "pveversion", "boot_kernels", "has_pct", "pct_list", "containers"]
    extras = parse_audit_sections("".join(_section(n, "") for n in names))
    assert extras.iommu.groups == 0
    assert not extras.nvidia.present and extras.nvlink == []
    assert not extras.persistenced.installed and not extras.pve.present
    assert extras.containers is None
    assert AuditFacts().process([]) == AuditFacts.default()


def test_unreadable_container_config_is_not_a_gpu_verdict():
    text = _section("has_pct", "yes") + _section("pct_list", "") + f"{MARKER}ct_config:110\n\n"
    (ct,) = parse_audit_sections(text).containers
    assert (ct.vmid, ct.config_read, ct.gpu) == (110, False, False)


def test_command_shares_the_units_part_and_probes_only_running_gpu_containers():
    assert "systemctl" not in AUDIT_COMMAND and "modinfo" not in AUDIT_COMMAND  # the snapshot's
    assert SHARED_PARTS["units"] == "units"
    assert "pct status \"$id\" 2>/dev/null | grep -q running" in AUDIT_COMMAND
    assert "grep -q '/dev/nvidia'" in AUDIT_COMMAND
    assert "nvidia-smi --query-gpu=driver_version --format=csv,noheader" in AUDIT_COMMAND
    assert "proxmox-boot-tool status" not in AUDIT_COMMAND  # it mounts the ESPs


FAKE_PCT = """#!/bin/sh
case "$1" in
  list) echo 'VMID       Status     Lock         Name'
        echo '102        stopped                 docker'
        echo '110        running                 llm-a' ;;
  status) [ "$2" = 110 ] && echo "status: running" || echo "status: stopped" ;;
  exec) [ "$2" = 110 ] && [ "$3" = "--" ] || exit 2; shift 3; exec "$@" ;;
  *) exit 2 ;;
esac
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
[ "$1" = --query-gpu=driver_version ] && echo 550.54.15
"""


def test_container_loop_runs_in_a_real_shell(tmp_path):
    """The whole command run by sh, with stand-ins for `pct` and nvidia-smi and a config
    folder in place of /etc/pve/lxc."""
    import os
    import subprocess

    conf_dir = tmp_path / "lxc"
    conf_dir.mkdir()
    (conf_dir / "110.conf").write_text(read("lxc/composed-gpu-pending-snapshots-110.conf"))
    (conf_dir / "102.conf").write_text(read("lxc/frigate-7640-102.conf"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("pct", FAKE_PCT), ("nvidia-smi", FAKE_NVIDIA_SMI)):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    command = AUDIT_COMMAND.replace("/etc/pve/lxc", str(conf_dir))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                         check=True).stdout
    ct102, ct110 = parse_audit_sections(out).containers
    assert (ct102.vmid, ct102.gpu, ct102.exec_ran, ct102.status) == (102, False, False, "stopped")
    assert (ct110.vmid, ct110.gpu, ct110.exec_ran) == (110, True, True)
    # The probe ran through `pct exec 110 -- sh -c "..."`: the stand-in nvidia-smi and this
    # machine's own /proc/1/limits.
    assert ct110.driver_version == "550.54.15" and ct110.driver_error is None
    assert ct110.memlock_live is not None
    assert ct110.config_read and ct110.memlock_config is None
