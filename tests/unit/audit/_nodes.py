"""Two whole nodes built from captured outputs (tests/data, see tests/data/audit/SOURCES.md).

`healthy()` and `misconfigured()` return (profile, snapshot). Each field says which capture
feeds it; where a capture does not exist for a value (a sysctl, a container's one-line
nvidia-smi output) the value is typed in the tool's exact format.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpunode.facts.audit import IommuState
from gpunode.facts.boot_modules import parse_kernel_trees
from gpunode.facts.cmdline import (
    CmdlineState,
    edit_grub_default,
    grub_cmdline_value,
    merge_cmdline,
    split_cmdline,
)
from gpunode.facts.containers import ContainerState, container_state
from gpunode.facts.cpu import CpuState, parse_idle_states
from gpunode.facts.gpu_details import parse_gpu_details, parse_nvlink_status
from gpunode.facts.gpu_health import XidLog
from gpunode.facts.kernel_params import KernelParamsState
from gpunode.facts.kernels import KernelPackages, parse_kernel_packages
from gpunode.facts.nvidia import (
    NvidiaSmiReport,
    nvidia_module_is_open,
    parse_nvidia_proc_version,
    parse_nvidia_smi_xml,
)
from gpunode.facts.pcie import PcieDevice, parse_lspci_vvv
from gpunode.facts.proxmox import parse_proxmox_kernel_list, parse_pveversion
from gpunode.facts.pve_config import parse_pve_lxc_config, render, with_lxc_entry
from gpunode.ops.cpu import cpu_cmdline_params
from gpunode.profile.node import DEFAULT_SYSCTLS, NodeProfile
from gpunode.roles.audit.snapshot import NodeSnapshot

DATA = Path(__file__).resolve().parents[2] / "data"

# Kernel defaults of a stock Debian/Proxmox host for the profile's sysctls.
STOCK_SYSCTLS = {
    "kernel.numa_balancing": "1",
    "kernel.nmi_watchdog": "1",
    "kernel.sched_autogroup_enabled": "1",
    "vm.swappiness": "60",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
    "net.core.rmem_default": "212992",
    "net.core.wmem_default": "212992",
    "net.core.netdev_max_backlog": "1000",
    "net.ipv4.tcp_rmem": "4096 131072 6291456",
    "net.ipv4.tcp_wmem": "4096 16384 4194304",
    "net.ipv4.tcp_mtu_probing": "0",
}
RTX3090_BDF = "0000:41:00.0"
CT_MEMLOCK_UNLIMITED = "Max locked memory         unlimited            unlimited            bytes"
CT_MEMLOCK_8M = "Max locked memory         8388608              8388608              bytes"


def read(relative: str) -> str:
    with open(DATA / relative, encoding="utf-8", newline="") as handle:
        return handle.read()


def lspci(*relatives: str) -> list[PcieDevice]:
    return [d for r in relatives for d in parse_lspci_vvv(read(r))]


def at_bdf(report: NvidiaSmiReport, xml: str, bdf: str):
    """A one-GPU nvidia-smi report and its details moved to the lspci GPU's address (the
    captures come from different machines)."""
    gpus = [g.model_copy(update={"pci_bdf": bdf}) for g in report.gpus]
    (one,) = parse_gpu_details(xml).values()
    details = {bdf: one.model_copy(update={"bdf": bdf})}
    return report.model_copy(update={"gpus": gpus}), details


def pve8_kernels(running: str) -> KernelPackages:
    """Installed kernels of the `pveversion -v` 8.3.2 capture, as dpkg-query lines."""
    lines = []
    for line in read("proxmox/pveversion_v_8.3.2.txt").splitlines():
        match = re.match(r"^(proxmox-kernel-\S+-pve-signed): (\S+)$", line)
        if match:
            lines.append(f"{match.group(1)} {match.group(2)} ii ")
    return parse_kernel_packages(running, "\n".join(lines), "")


def icelake_cpu(c6_disabled: bool, governor: str) -> CpuState:
    text = read("cpuidle/intel-icelake-tuned-808.txt")
    if c6_disabled:
        text = text.replace("state3/disable:0", "state3/disable:1")
    return CpuState(vendor="GenuineIntel", idle_driver="intel_idle",
                    idle_states=parse_idle_states(text), cpufreq_driver="intel_pstate",
                    governors={0: governor}, available_governors=["performance", "powersave"])


def gpu_container(config: str, status: str, probe: str | None) -> ContainerState:
    return container_state(110, config, {"status": status, "lock": "", "name": "llm-a"}, probe)


def healthy() -> tuple[NodeProfile, NodeSnapshot]:
    """A converged Proxmox GPU host: nothing open (P2 and known limits only)."""
    # The A100 capture runs with persistence mode Disabled: this profile leaves it off.
    profile = NodeProfile(max_read_request=512, gpu_persistence=False)
    cpu = icelake_cpu(c6_disabled=True, governor="performance")
    wanted = cpu_cmdline_params(cpu, profile.max_cstate, profile.amd_pstate)
    grub = read("grub/debian12-default-grub")
    tokens = merge_cmdline(split_cmdline(grub_cmdline_value(grub)), {**wanted, "iommu": "pt"})
    xml = read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml")
    report, details = at_bdf(parse_nvidia_smi_xml(xml), xml, RTX3090_BDF)
    _, pinned = parse_proxmox_kernel_list(read("proxmox/boot_tool_kernel_list_pinned_1kernel.txt"))
    config = render(with_lxc_entry(
        parse_pve_lxc_config(read("lxc/composed-gpu-pending-snapshots-110.conf")),
        "lxc.prlimit.memlock", "unlimited"))
    container = gpu_container(config, "running", f"535.54.03\n{CT_MEMLOCK_UNLIMITED}\n")
    snap = NodeSnapshot(
        cmdline=CmdlineState(booted=["BOOT_IMAGE=/boot/vmlinuz-6.8.4-2-pve",
                                     "root=/dev/mapper/pve-root", "ro", *tokens],
                             grub_default_text=edit_grub_default(grub, tokens)),
        cpu=cpu,
        kernel=KernelParamsState(
            sysctls=dict(DEFAULT_SYSCTLS),
            loaded_modules=["nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_ib"],
            available_modules=["nvidia_peermem"], rdma_devices=["mlx5_0"],
            memlock_default="infinity"),
        pcie=lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt"),
        iommu=IommuState(groups=3, group_types={59: "identity", 62: "identity", 64: "identity"}),
        pci_paths={},
        nvidia=report,
        gpu_details=details,
        nvlink=[],
        driver_loaded=report.driver_version,
        driver_packages={},
        kernels=pve8_kernels("6.8.4-2-pve"),
        pve=parse_pveversion(read("proxmox/pveversion_8.0.3.txt")),
        boot_pinned=pinned,
        boot_modules=parse_kernel_trees(
            f"kernel={pinned}\nbuild={pinned}\n/lib/modules/{pinned}/updates/dkms/nvidia.ko\n"
            f"headers=proxmox-headers-{pinned}"),
        xids=XidLog(source="journal"),
        containers=[container],
        nvidia_nodes=container.device_paths,
    )
    return profile, snap


def misconfigured() -> tuple[NodeProfile, NodeSnapshot]:
    """A fresh Proxmox 8.3 GPU host with a driver upgrade waiting for its reboot."""
    profile = NodeProfile()
    mismatch = read("nvidia/nvidia_smi_error_version_mismatch.txt")
    kernels = pve8_kernels("6.8.12-5-pve")
    snap = NodeSnapshot(
        cmdline=CmdlineState(booted=["BOOT_IMAGE=/boot/vmlinuz-6.8.12-5-pve",
                                     "root=/dev/mapper/pve-root", "ro", "quiet"],
                             grub_default_text=read("grub/debian12-default-grub")),
        cpu=icelake_cpu(c6_disabled=False, governor="powersave"),
        kernel=KernelParamsState(
            sysctls=dict(STOCK_SYSCTLS), loaded_modules=["nvidia", "mlx5_ib"],
            available_modules=["nvidia_peermem"], rdma_devices=["mlx5_0"],
            memlock_default="8388608"),
        pcie=lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt",
                   "pcie/lspci_vvnn_romed8_2t_pve5.13_rootport.txt"),
        iommu=IommuState(groups=3, group_types={59: "DMA-FQ", 62: "DMA-FQ", 64: "DMA-FQ"}),
        pci_paths={},
        nvidia=parse_nvidia_smi_xml(mismatch),
        gpu_details=parse_gpu_details(mismatch),
        nvlink=parse_nvlink_status(mismatch),
        driver_loaded=parse_nvidia_proc_version(
            read("nvidia/proc_driver_nvidia_version_580.173.02.txt")),
        driver_open=nvidia_module_is_open(
            read("nvidia/proc_driver_nvidia_version_580.173.02.txt")),
        driver_packages={},
        kernels=kernels,
        pve=parse_pveversion(read("proxmox/pveversion_v_8.3.2.txt")),
        boot_pinned=None,
        containers=[
            gpu_container(read("lxc/composed-gpu-pending-snapshots-110.conf"), "running",
                          "Failed to initialize NVML: Driver/library version mismatch\n"
                          f"{CT_MEMLOCK_8M}\n"),
            container_state(102, read("lxc/frigate-7640-102.conf"),
                            {"status": "stopped", "lock": "", "name": "docker"}, None),
        ],
    )
    return profile, snap


def by_name(checks) -> dict:
    return {c.name: c for c in checks}
