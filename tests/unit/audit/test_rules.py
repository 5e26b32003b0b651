"""The audit's rules one at a time, each on captured outputs (a field changed where a capture
with that fault does not exist; the change is named in the test)."""

import pytest

from gpunode.facts.cmdline import CmdlineState
from gpunode.facts.cpu import CpuState
from gpunode.facts.kernel_params import KernelParamsState
from gpunode.facts.kernels import parse_installed_kernels, parse_kernel_packages
from gpunode.facts.nvidia import parse_nvidia_smi_xml
from gpunode.facts.proxmox import PveVersion, parse_proxmox_boot_tool_status
from gpunode.facts.pve_config import parse_pve_lxc_config, render, with_lxc_entry
from gpunode.ops.cmdline import set_grub_default_entry
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.checks import audit_checks
from gpunode.roles.audit.facts import IommuState
from gpunode.roles.audit.gpu_checks import NO_NVLINK, check_gpu_state, check_nvlink
from gpunode.roles.audit.gpu_facts import parse_gpu_details, parse_nvlink_status
from gpunode.roles.audit.pcie_checks import (
    check_acs,
    check_iommu,
    check_max_payload,
    check_pcie_links,
    check_rebar,
)
from gpunode.roles.audit.snapshot import NodeSnapshot
from gpunode.roles.audit.system_checks import (
    check_boot_esps,
    check_containers,
    check_driver,
    check_kernel,
)

from ._nodes import (
    CT_MEMLOCK_8M,
    CT_MEMLOCK_UNLIMITED,
    at_bdf,
    by_name,
    gpu_container,
    healthy,
    lspci,
    misconfigured,
    pve8_kernels,
    read,
)

ESC8000A = "pcie/lspci_vvv_esc8000a_rtx6000ada.txt"  # idle RTX 6000 Ada, BDF 0000:01:00.0
A100_XML = "nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml"  # GPU at 0000:01:00.0
P100_XML = "nvidia/nvidia_smi_q_x_tesla_p100_510.xml"


def bare(**fields) -> NodeSnapshot:
    """A snapshot with empty tuning facts and the given audit fields."""
    values = {"cmdline": CmdlineState(), "cpu": CpuState(), "kernel": KernelParamsState(),
              "pcie": [], "iommu": IommuState(), "pci_paths": {},
              "nvidia": parse_nvidia_smi_xml(""), "nvlink": [], "driver_packages": {},
              "kernels": parse_kernel_packages("", "", ""), "pve": PveVersion(present=False)}
    values.update(fields)
    return NodeSnapshot(**values)


def smi(relative: str, bdf: str | None = None, **gpu_changes):
    """nvidia-smi report + details of a capture, optionally moved to bdf, GPU fields changed."""
    xml = read(relative)
    report, details = parse_nvidia_smi_xml(xml), parse_gpu_details(xml)
    if bdf:
        report, details = at_bdf(report, xml, bdf)
    if gpu_changes:
        report = report.model_copy(update={"gpus": [g.model_copy(update=gpu_changes)
                                                    for g in report.gpus]})
    return {"nvidia": report, "gpu_details": details}


# --- PCIe links: the idle GPU is not a P0 --------------------------------------------------------


def test_idle_link_without_nvidia_smi_is_p2_with_a_note_never_p0():
    checks = by_name(check_pcie_links(bare(pcie=lspci(ESC8000A))))
    width = checks["GPU 0000:01:00.0 PCIe link width"]
    speed = checks["GPU 0000:01:00.0 PCIe link speed"]
    assert (width.status, width.live) == ("ok", "x16 (capability x16)")
    assert (speed.status, speed.live) == ("P2", "2.5GT/s (capability 16GT/s)")
    assert "idle GPUs train their link down" in speed.note
    assert "nvidia-smi -q -d PCIE" in speed.fix


def test_idle_link_when_nvidia_smi_reads_full_speed_is_ok():
    # Same BDF in both captures: the A100 report reads current Gen4 = the Gen4 capability.
    checks = by_name(check_pcie_links(bare(pcie=lspci(ESC8000A), **smi(A100_XML))))
    speed = checks["GPU0 0000:01:00.0 PCIe link speed"]
    assert speed.status == "ok" and "nvidia-smi reads Gen4 now" in speed.note


def test_idle_gpu_below_its_link_speed_is_ok_when_nvidia_smi_max_reaches_it():
    # P100 report (gpu_idle Active) on the Ada's address, its link read at Gen1 of max Gen4.
    fields = smi(P100_XML, "0000:01:00.0", pcie_gen_current=1, pcie_gen_max=4)
    speed = by_name(check_pcie_links(bare(pcie=lspci(ESC8000A), **fields)))[
        "GPU0 0000:01:00.0 PCIe link speed"]
    assert speed.status == "ok" and "idle GPU trains down" in speed.note


def test_platform_capped_link_is_p2():
    # The P100 report says max Gen3 on a slot whose device advertises 16GT/s.
    fields = smi(P100_XML, "0000:01:00.0")
    speed = by_name(check_pcie_links(bare(pcie=lspci(ESC8000A), **fields)))[
        "GPU0 0000:01:00.0 PCIe link speed"]
    assert speed.status == "P2" and "BIOS PCIe speed" in speed.fix


def test_narrow_link_is_p1():
    (gpu,) = lspci(ESC8000A)
    narrow = gpu.model_copy(update={"lnksta_width": 8})  # changed: trained at x8
    width = by_name(check_pcie_links(bare(pcie=[narrow])))["GPU 0000:01:00.0 PCIe link width"]
    assert (width.status, width.live, width.want) == ("P1", "x8 (capability x16)", "x16")
    assert "reseat" in width.fix and not width.deploy_fixes


def test_link_from_nvidia_smi_when_lspci_hides_the_capabilities():
    # lspci as non-root (H100 capture) and an nvidia-smi report at the same address.
    (hidden,) = lspci("pcie/lspci_vvv_nonroot_h100.txt")
    fields = smi(A100_XML, hidden.bdf)
    checks = by_name(check_pcie_links(bare(pcie=[hidden], **fields)))
    assert checks[f"GPU0 {hidden.bdf} PCIe link width"].live == "x16 (capability x16)"
    assert checks[f"GPU0 {hidden.bdf} PCIe link speed"].status == "ok"
    alone = check_pcie_links(bare(pcie=[hidden]))
    assert [(c.status, c.live) for c in alone] == [("n/a", "capabilities hidden: lspci needs root")]


# --- MaxPayload, ACS, Resizable BAR --------------------------------------------------------------


def test_max_payload_at_devcap_is_a_known_limit_below_it_p2():
    (gpu,) = lspci("pcie/lspci_vvvnn_a100_sxm4_partial.txt")
    (limit,) = check_max_payload(bare(pcie=[gpu]))
    assert (limit.status, limit.live) == ("limit", "256 bytes (DevCap 256 bytes)")
    assert limit.fix.startswith("none:") and "DevCap" in limit.fix
    lowered = gpu.model_copy(update={"devctl_max_payload": 128})  # changed: path minimum 128
    (minor,) = check_max_payload(bare(pcie=[lowered]))
    assert minor.status == "P2" and "pci=pcie_bus_perf" in minor.fix


def test_acs_redirect_above_two_gpus_is_p0_fixed_by_pcie_acs_redirect_off():
    pcie = lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt",
                 "pcie/lspci_vvnn_romed8_2t_pve5.13_rootport.txt")
    nvlink = parse_nvlink_status(read("audit/nvlink_s_a100_pcie_x2_no_nvlink_555.txt"))
    topology = {"0000:41:00.0": ["0000:00:03.1"]}  # composed: the GPU under that root port
    (acs,) = check_acs(NodeProfile(), bare(pcie=pcie, nvlink=nvlink, pci_paths=topology))
    assert acs.status == "P0"
    assert acs.live == "on at 0000:00:03.1 (ReqRedir+CmpltRedir)"
    assert acs.fix.startswith("set gpunode.pcie_acs_redirect: off")
    assert not acs.deploy_fixes and "VMs" in acs.fix
    (fixed,) = check_acs(NodeProfile(pcie_acs_redirect="off"),
                         bare(pcie=pcie, nvlink=nvlink, pci_paths=topology))
    assert fixed.deploy_fixes and fixed.fix.startswith("run deploy/site.py")
    (unknown,) = check_acs(NodeProfile(), bare(pcie=pcie, nvlink=nvlink))
    assert unknown.status == "P2" and "topology" in unknown.note
    # A bridge with only SrcValid (the RTX 3090 server's root port) redirects nothing.
    (clean,) = check_acs(NodeProfile(), bare(pcie=lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt"),
                                             nvlink=nvlink))
    assert clean.status == "ok"


def test_rebar_from_lspci_and_nvidia_smi():
    (ok_,) = check_rebar(bare(pcie=lspci(ESC8000A)))
    assert (ok_.status, ok_.live) == ("ok", "BAR sizes 16MB, 64GB, 32MB")
    (gpu,) = lspci(ESC8000A)
    small = gpu.model_copy(update={"resizable_bar": ["16MB", "256MB", "32MB"]})  # changed
    (p1,) = check_rebar(bare(pcie=[small]))
    assert p1.status == "P1" and "Above 4G Decoding" in p1.fix and "reboot" in p1.fix
    (p100,) = check_rebar(bare(**smi(P100_XML)))
    assert (p100.status, p100.live) == ("ok", "BAR1 16384 MiB, VRAM 16384 MiB")


# --- GPU state -----------------------------------------------------------------------------------


def test_gpu_state_of_a_captured_p100():
    checks = by_name(check_gpu_state(bare(**smi(P100_XML))))
    assert checks["GPU0 temperature"].live == "38 C (slowdown at 82 C)"
    assert checks["GPU0 clocks"].live == "SM 405/1328 MHz"
    assert checks["GPU0 clocks"].note == "idle: clocks rise under load"
    assert checks["GPU0 ECC"].live == "Enabled, 0 volatile uncorrectable errors"


@pytest.mark.parametrize(("changes", "name", "status", "fix_part"), [
    ({"ecc_errors_uncorrected": 2}, "GPU0 ECC", "P1", "nvidia-smi -r -i 0"),
    ({"temperature_c": 80}, "GPU0 temperature", "P2", "cooling"),
    ({"ecc_mode": None}, "GPU0 ECC", "n/a", ""),
])
def test_gpu_faults(changes, name, status, fix_part):
    check = by_name(check_gpu_state(bare(**smi(P100_XML, **changes))))[name]
    assert check.status == status and fix_part in check.fix


def test_clock_reasons():
    fields = smi(P100_XML)
    details = fields["gpu_details"]["0000:00:04.0"]
    capped = details.model_copy(update={"active_clock_reasons": ["applications_clocks_setting"]})
    fields["gpu_details"] = {"0000:00:04.0": capped}
    clocks = by_name(check_gpu_state(bare(**fields)))["GPU0 clocks"]
    assert clocks.status == "P0" and clocks.fix.startswith("nvidia-smi -i 0 -rac")
    hot = details.model_copy(update={"active_clock_reasons": ["hw_thermal_slowdown"]})
    fields["gpu_details"] = {"0000:00:04.0": hot}
    clocks = by_name(check_gpu_state(bare(**fields)))["GPU0 clocks"]
    assert clocks.status == "P2" and "hw_thermal_slowdown" in clocks.live


def test_pending_ecc_mode_is_a_pending_reboot():
    fields = smi(P100_XML)
    details = fields["gpu_details"]["0000:00:04.0"]
    fields["gpu_details"] = {"0000:00:04.0": details.model_copy(update={"ecc_pending": "Disabled"})}
    ecc = by_name(check_gpu_state(bare(**fields)))["GPU0 ECC"]
    assert (ecc.status, ecc.pending) == ("P1", "reboot")


# --- NVLink --------------------------------------------------------------------------------------


def test_nvlink_present():
    nvlink = parse_nvlink_status(read("audit/nvlink_s_h100_pcie_x2_nvlink_555.txt"))
    (check,) = check_nvlink(bare(nvlink=nvlink))
    assert (check.status, check.live) == ("ok", "GPU 0, 1: 12 active links at 26.562 GB/s")


def test_no_nvlink_is_a_known_limit():
    nvlink = parse_nvlink_status(read("audit/nvlink_s_a100_pcie_x2_no_nvlink_555.txt"))
    (check,) = check_nvlink(bare(nvlink=nvlink))
    assert check.status == "limit"
    assert check.fix == f"none: {NO_NVLINK}"
    assert NO_NVLINK == "no NVLink, custom allreduce off; NCCL over PCIe P2P/SHM"


def test_partial_nvlink_names_the_unlinked_gpu():
    nvlink = parse_nvlink_status(read("audit/nvlink_s_rtx_a6000_x3_partial.txt"))
    (check,) = check_nvlink(bare(nvlink=nvlink))
    assert check.status == "limit"
    assert check.live == "GPU 0, 1: 4 active links at 14.062 GB/s; GPU 2: none"


# --- IOMMU ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("types", "status", "mode"), [
    ({}, "n/a", "off"),  # no IOMMU at all: not a confirmed good value
    ({1: "identity", 2: "identity"}, "ok", "passthrough"),
    ({1: "unmanaged"}, "ok", "vfio"),
    ({1: "DMA", 2: "DMA"}, "P2", "translated"),  # one GPU, no RDMA: minor
])
def test_iommu_modes(types, status, mode):
    snap = bare(iommu=IommuState(groups=len(types), group_types=types),
                pcie=lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt"))
    (check,) = check_iommu(NodeProfile(), snap)
    assert check.status == status and check.live.startswith(mode)


def test_translated_iommu_with_iommu_in_the_profile_is_applied_by_deploy_with_reboot():
    snap = bare(iommu=IommuState(groups=1, group_types={1: "DMA-FQ"}),
                nvlink=parse_nvlink_status(read("audit/nvlink_s_h100_pcie_x2_nvlink_555.txt")))
    profile = NodeProfile(cmdline={"iommu": "pt"}, reboot=True)
    (check,) = check_iommu(profile, snap)
    assert check.status == "P1" and check.deploy_fixes


# --- driver, kernel, containers ------------------------------------------------------------------


def test_driver_pin_differs_from_installed():
    profile = NodeProfile(nvidia_driver="550.54.15")
    snap = bare(pcie=lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt"), **smi(A100_XML),
                driver_loaded="535.54.03", driver_packages={"nvidia-driver": "535.54.03-1"})
    (check,) = check_driver(profile, snap)
    assert check.status == "P1" and check.want == "550.54.15"
    assert "nvidia_driver_change: true" in check.fix and not check.deploy_fixes
    (allowed,) = check_driver(profile.model_copy(update={"nvidia_driver_change": True}), snap)
    assert allowed.deploy_fixes


def test_gpus_without_a_loaded_module():
    (gpu,) = [d for d in lspci("pcie/lspci_vvnn_g482z54_rtx3090.txt") if d.class_id == "0300"]
    unbound = gpu.model_copy(update={"driver": None})  # changed: no driver bound
    (p1,) = check_driver(NodeProfile(), bare(pcie=[unbound]))
    assert p1.status == "P1" and "install the NVIDIA driver" in p1.fix
    (p0,) = check_driver(NodeProfile(), bare(pcie=[unbound],
                                             driver_packages={"nvidia-driver": "550.54.15-1"}))
    assert p0.status == "P0" and p0.fix.startswith("modprobe nvidia")
    vfio = gpu.model_copy(update={"driver": "vfio-pci"})  # changed: passed to a VM
    (na,) = check_driver(NodeProfile(), bare(pcie=[vfio]))
    assert na.status == "n/a" and "vfio-pci" in na.live


def test_kernel_pin_cases():
    kernels = pve8_kernels("6.8.12-5-pve")
    # Pin wanted and running, but not pinned on the host nor held: deploy pins it now.
    (p0,) = check_kernel(NodeProfile(kernel_pin="6.8.12-5-pve"), bare(kernels=kernels))
    assert (p0.status, p0.deploy_fixes) == ("P0", True)
    assert "not held: proxmox-kernel-6.8.12-5-pve-signed" in p0.live
    # Pinned and held, another kernel running: a reboot finishes it.
    held = kernels.model_copy(update={"held_packages": ["proxmox-kernel-6.8.4-2-pve-signed"]})
    snap = bare(kernels=held, boot_pinned="6.8.4-2-pve")
    (p1,) = check_kernel(NodeProfile(kernel_pin="6.8.4-2-pve", reboot=True), snap)
    assert (p1.status, p1.pending, p1.deploy_fixes) == ("P1", "reboot", True)
    (missing,) = check_kernel(NodeProfile(kernel_pin="6.11.11-2-pve"), bare(kernels=kernels))
    assert missing.status == "P1" and "not installed" in missing.live


def test_debian_grub_default_pin_is_the_host_pin():
    entry = "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-50-amd64"
    grub = set_grub_default_entry(read("grub/debian12-default-grub"), entry)
    kernels = parse_kernel_packages("6.1.0-50-amd64", read("kernels/dpkg_l_debian12_zabbly.txt"),
                                    "")
    assert kernels.newest == "7.1.3-zabbly+"
    (check,) = check_kernel(NodeProfile(), bare(kernels=kernels,
                                                cmdline=CmdlineState(grub_default_text=grub)))
    assert (check.status, check.live) == ("ok", "6.1.0-50-amd64 (pinned on the host)")


def test_container_without_packages_has_no_kernel_to_check():
    kernels = parse_installed_kernels(
        read("kernels/installed_kernels_fact_firecracker_container.txt"))
    (check,) = check_kernel(NodeProfile(), bare(kernels=kernels))
    assert check.status == "n/a" and "6.18.44-fc-v1098" in check.live


def test_container_states():
    conf = read("lxc/composed-gpu-pending-snapshots-110.conf")
    host = {"driver_loaded": "550.54.15", "pve": PveVersion(present=True)}
    stopped = check_containers(bare(containers=[gpu_container(conf, "stopped", None)], **host))
    assert [(c.name, c.status) for c in stopped] == [
        ("CT 110 (llm-a) memlock", "P1"), ("CT 110 (llm-a) NVIDIA driver", "n/a")]
    other = check_containers(bare(containers=[gpu_container(conf, "running",
                                                            f"535.54.03\n{CT_MEMLOCK_8M}")],
                                  **host))
    assert other[1].status == "P0" and other[1].live == "535.54.03 (host 550.54.15)"
    # Appending would land in the last snapshot section: edit the main section.
    done = render(with_lxc_entry(parse_pve_lxc_config(conf), "lxc.prlimit.memlock", "unlimited"))
    restart = check_containers(bare(containers=[gpu_container(done, "running",
                                                              f"550.54.15\n{CT_MEMLOCK_8M}")],
                                    **host))
    assert (restart[0].status, restart[0].pending) == ("P1", "restart")
    assert restart[1].status == "ok"
    declared = check_containers(
        bare(containers=[gpu_container(conf.replace("swap: 0", "lxc.prlimit.memlock: 65536"),
                                       "running", f"550.54.15\n{CT_MEMLOCK_UNLIMITED}")], **host),
        {110: 65536})
    assert declared[0].status == "P1" and "live unlimited" in declared[0].live


def test_no_proxmox_and_no_containers():
    (none,) = check_containers(bare())
    assert (none.status, none.live) == ("n/a", "not present: no Proxmox VE (pct)")
    (empty,) = check_containers(bare(containers=[], pve=PveVersion(present=True)))
    assert empty.live == "no container on this node"


# --- a node with nothing: every check applies or says why not ------------------------------------


def test_node_without_gpu_proxmox_or_systemd():
    snap = bare(pcie=lspci("pcie/lspci_vvvnnD_firecracker_vm_nogpu.txt"),
                kernels=parse_installed_kernels(
                    read("kernels/installed_kernels_fact_firecracker_container.txt")))
    checks = audit_checks(NodeProfile(), snap)
    hardware = [c for c in checks if not c.name.startswith(("sysctl", "module", "cmdline"))]
    assert {c.status for c in hardware} <= {"n/a", "ok"}
    c = by_name(checks)
    for name in ("GPUs", "PCIe link", "PCIe MaxPayload", "PCIe ACS redirect", "Resizable BAR",
                 "GPU temperature", "NVLink"):
        assert c[name].live == "not present: no NVIDIA GPU on this node"
    assert c["Proxmox VE"].live == "not present"
    assert c["GPU containers"].live == "not present: no Proxmox VE (pct)"
    assert c["NVIDIA driver"].live == "not present: no NVIDIA GPU or driver"


def test_tuning_only_snapshot_says_not_read():
    _, full = healthy()
    old = NodeSnapshot(cmdline=full.cmdline, cpu=full.cpu, kernel=full.kernel, pcie=full.pcie)
    checks = by_name(audit_checks(NodeProfile(max_read_request=512), old))
    assert checks["IOMMU mode"].status == "n/a" and "not read" in checks["IOMMU mode"].live
    assert checks["kernel"].status == "n/a" and checks["NVLink"].status == "n/a"
    assert checks["GPU containers"].status == "n/a"
    assert not [c for c in checks.values() if c.open]


def test_misconfigured_node_is_still_misconfigured_after_a_no_op():
    profile, snap = misconfigured()
    assert audit_checks(profile, snap) == audit_checks(profile, snap.model_copy())


def test_container_cpuset_not_local_to_its_gpus():
    """GPU 0 of the composed config sits on node 1 of a two-socket host (the Xeon 8470Q node
    lists): unpinned, and pinned to node 0, it is reported; pinned to node 1 it is ok."""
    from gpunode.facts.gpu_numa import parse_gpu_numa
    from gpunode.roles.audit.container_facts import container_state

    numa = parse_gpu_numa(
        read("lxc/numa-node-cpulist-xeon-8470q.txt")
        + "\n/proc/driver/nvidia/gpus/0000:98:00.0/information:Device Minor: \t 0\n"
        + "/sys/bus/pci/devices/0000:98:00.0/numa_node:1\n"
    )
    conf = read("lxc/composed-gpu-pending-snapshots-110.conf")
    host = {"driver_loaded": "550.54.15", "pve": PveVersion(present=True)}
    row = {"status": "stopped", "lock": "", "name": "llm-a"}

    def numa_check(config):
        ct = container_state(110, config, row, None, numa)
        return check_containers(bare(containers=[ct], **host))[-1]

    unpinned = numa_check(conf)
    assert (unpinned.name, unpinned.status, unpinned.pending) == (
        "CT 110 (llm-a) NUMA placement", "P1", "restart")
    assert unpinned.live == "cpus not set, mems not set"
    assert unpinned.want == "cpus 52-103,156-207, mems 1 (GPU 0)"
    assert "pvestatd" in unpinned.note
    pinned = "lxc.cgroup2.cpuset.cpus: {}\nlxc.cgroup2.cpuset.mems: {}\n"
    main, rest = conf.split("\n[pve:pending]", 1)
    wrong = main + pinned.format("0-51", "0") + "\n[pve:pending]" + rest
    assert numa_check(wrong).status == "P1"
    right = main + pinned.format("52-60", "1") + "\n[pve:pending]" + rest
    assert numa_check(right).status == "ok"


def test_skipped_esps_are_audit_findings():
    status = read("proxmox/boot_tool_status_grub_legacy_mount_failed_tanaka.txt")
    problems = parse_proxmox_boot_tool_status(status).esp_problems
    (check,) = check_boot_esps(bare(cmdline=CmdlineState(esp_problems=problems)))
    assert (check.name, check.status, check.kind) == ("ESP 1FDE-91BC", "P0", "boot ESP")
    assert check.live.startswith("mount failed: proxmox-boot-tool could not mount it")
    assert "`proxmox-boot-tool init /dev/sdc2`" in check.fix
    assert check_boot_esps(bare()) == []
