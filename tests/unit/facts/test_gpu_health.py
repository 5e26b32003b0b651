"""GPU health parsers on real captures: NVRM Xid lines (and another driver's "XID"), sysfs
links and AER counters, nvidia-smi's remapped rows / retired pages / replays, each kernel's
NVIDIA module, the module parameters; the facts' commands in a real shell."""

import subprocess

from gpunode.facts.boot_modules import KernelModuleTrees, boot_module_problem, parse_kernel_trees
from gpunode.facts.gpu_details import parse_gpu_details
from gpunode.facts.gpu_health import (
    KernelXids,
    PciSysfs,
    parse_pci_sysfs,
    parse_xid_lines,
    sysfs_speed,
)
from gpunode.facts.nvidia_params import NvidiaModuleParams, parse_module_params

from ._data import read


def test_xids_by_gpu_with_meaning_and_severity():
    log = parse_xid_lines("source=dmesg\n" + read("kernel/xid_dmesg_T_akash_node4_535.txt"))
    assert log.source == "dmesg" and log.total == 4
    assert [(e.bdf, e.xid) for e in log.events] == [
        ("0000:00:05.0", 43), ("0000:00:05.0", 43), ("0000:00:07.0", 31), ("0000:00:08.0", 94)]
    assert sorted(log.by_gpu()) == ["0000:00:05.0", "0000:00:07.0", "0000:00:08.0"]
    assert log.events[2].severity == "error" and "MMU" in log.events[2].meaning
    assert log.events[2].detail.startswith("pid=2512125, name=python3.10")
    assert log.events[3].meaning.startswith("contained ECC error")


def test_xid_79_is_critical_and_the_follow_up_line_is_not_an_xid():
    log = parse_xid_lines(read("kernel/xid_journalctl_79_fallen_off_bus.txt"))
    assert [(e.bdf, e.xid, e.severity) for e in log.events] == [("0000:01:00.0", 79, "critical")]


def test_xid_13_lines_and_an_unknown_xid():
    log = parse_xid_lines(read("kernel/xid_dmesg_ctime_gpud_13_109.txt"))
    assert [e.xid for e in log.events] == [13, 13, 13, 109]
    assert {e.bdf for e in log.events} == {"0000:cb:00.0"}
    assert log.events[3].severity == "error" and "catalogue" in log.events[3].meaning


def test_journalctl_k_xid_45_info():
    log = parse_xid_lines(read("kernel/xid_journalctl_k_open_gpu_1150_45.txt"))
    assert len(log.events) == 7 and {e.severity for e in log.events} == {"info"}
    assert len(log.by_gpu()) == 4


def test_r8169_xid_is_not_an_nvidia_xid():
    log = parse_xid_lines(read("kernel/r8169_unknown_chip_xid.txt") + "total=0\n")
    assert log.events == [] and log.total == 0


def test_bounded_total_counts_lines_not_kept():
    text = read("kernel/xid_journalctl_79_fallen_off_bus.txt") + "total=350\n"
    assert parse_xid_lines(text).total == 350


def _grep_h(capture: str) -> str:
    """The GB10 capture ("path BDF FILE: VALUE") as PciSysfs prints it (grep -H)."""
    lines = []
    for line in capture.splitlines():
        if line.startswith("path "):
            _, bdf, rest = line.split(" ", 2)
            file, value = rest.split(": ", 1)
            lines.append(f"/sys/bus/pci/devices/{bdf}/{file}:{value}")
        else:
            file, value = line.split(": ", 1)
            lines.append(f"/sys/bus/pci/devices/000f:01:00.0/{file}:{value}")
    return "\n".join(lines)


def test_sysfs_gb10_downtrained_link_and_port():
    capture = read("pcie/sysfs_link_gb10_spark_downtrained.txt")
    state = parse_pci_sysfs("lspci=no\n" + _grep_h(capture))
    assert state.lspci is False
    gpu, port = state.devices["000f:01:00.0"], state.devices["000f:00:00.0"]
    assert (gpu.vendor_id, gpu.device_id, gpu.class_id) == ("10de", "2e12", "0300")
    assert (gpu.link_speed, gpu.link_width, gpu.max_link_speed, gpu.max_link_width) == (
        "2.5GT/s", 1, "2.5GT/s", 16)
    assert (port.link_speed, port.link_width, port.max_link_speed) == (None, None, "32GT/s")
    assert [g.bdf for g in state.gpus()] == ["000f:01:00.0"]
    device = gpu.as_pcie_device()
    assert (device.lnksta_width, device.lnkcap_width, device.vendor_id) == (1, 16, "10de")


def test_sysfs_aer_counters_keep_what_grep_left():
    lines = [line for line in read("pcie/sysfs_aer_dev_correctable_kernel_abi_sample.txt")
             .splitlines() if not line.endswith(" 0")]  # what `grep -v ' 0$'` prints
    text = "\n".join(f"/sys/bus/pci/devices/0000:00:1c.0/aer_dev_correctable:{line}"
                     for line in lines)
    port = parse_pci_sysfs(text).devices["0000:00:1c.0"]
    assert port.aer == {"aer_dev_correctable": {"Receiver Error": 2, "TOTAL_ERR_COR": 2}}
    assert port.aer_total("aer_dev_correctable") == 2 and port.aer_total("aer_dev_fatal") == 0


def test_sysfs_speed_spellings():
    assert [sysfs_speed(v) for v in ("16.0 GT/s PCIe", "8.0 GT/s PCIe", "2.5 GT/s PCIe",
                                     "Unknown")] == ["16GT/s", "8GT/s", "2.5GT/s", None]


def test_remapped_rows_and_replays_ampere_class():
    details = parse_gpu_details(read("nvidia/nvidia_smi_q_x_l4_555_remapped_rows.xml"))
    gpu = details["0000:01:00.0"]
    assert gpu.remapped_rows is not None and gpu.retired_pages is None
    assert (gpu.remapped_rows.correctable, gpu.remapped_rows.uncorrectable,
            gpu.remapped_rows.pending, gpu.remapped_rows.failure) == (0, 0, False, False)
    assert gpu.replay_counter == 0


def test_retired_pages_pascal_and_na_sections():
    p100 = parse_gpu_details(read("nvidia/nvidia_smi_q_x_tesla_p100_510.xml"))
    pages = next(iter(p100.values())).retired_pages
    assert pages is not None
    assert (pages.single_bit, pages.double_bit, pages.pending) == (0, 0, False)
    a100 = parse_gpu_details(read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml"))
    only = next(iter(a100.values()))
    assert only.remapped_rows is None and only.retired_pages is None  # MIG: N/A everywhere


def test_kernel_trees_and_the_missing_module():
    trees = parse_kernel_trees(
        "kernel=6.8.12-4-pve\nbuild=6.8.12-4-pve\n"
        "/lib/modules/6.8.12-4-pve/updates/dkms/nvidia.ko\nkernel=6.8.12-9-pve\n"
        "headers=proxmox-headers-6.8.12-4-pve\n")
    assert boot_module_problem("6.8.12-4-pve", trees, proxmox=True) is None
    problem = boot_module_problem("6.8.12-9-pve", trees, proxmox=True) or ""
    assert problem.startswith("kernel 6.8.12-9-pve: no NVIDIA kernel module built for it")
    assert "proxmox-headers-6.8.12-9-pve is not installed" in problem
    assert "Fix: apt install proxmox-headers-6.8.12-9-pve && dkms autoinstall" in problem
    debian = boot_module_problem("6.12.69+deb13-amd64", trees, proxmox=False) or ""
    assert "headers" not in debian.split(" Fix: ")[0]


def test_module_params_proc_and_sysfs():
    text = ("@proc\nResmanDebugLevel: 4294967295\nDynamicPowerManagement: 3\n@sys\n"
            "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm:N\n")
    assert parse_module_params(text) == {
        "nvidia/NVreg_ResmanDebugLevel": "4294967295",
        "nvidia/NVreg_DynamicPowerManagement": "3", "nvidia_uvm/uvm_disable_hmm": "N"}


def _run(command: str) -> list[str]:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_facts_commands_run_in_a_real_shell():
    xids = KernelXids().process(_run(KernelXids().command()))
    assert xids.source in ("journal", "dmesg", "none") and xids.events == []
    sysfs = PciSysfs().process(_run(PciSysfs().command()))
    assert isinstance(sysfs.lspci, bool)
    assert all(d.bdf.count(":") == 2 for d in sysfs.devices.values())
    trees = KernelModuleTrees().process(_run(KernelModuleTrees().command()))
    assert all(not t.nvidia_modules for t in trees.kernels.values())  # no NVIDIA here
    params = NvidiaModuleParams()
    assert params.process(_run(params.command(params=["nvidia_uvm/uvm_disable_hmm",
                                                       "bad name/x"]))) == {}
