"""The GPU health and boot-lifecycle checks (gpunode.roles.audit.health_checks) as tables:
snapshot parts from real captures in, statuses and fixes out."""

from gpunode.facts.boot_modules import parse_kernel_trees
from gpunode.facts.containers import ContainerState
from gpunode.facts.gpu_details import GpuDetails, RemappedRows, RetiredPages, parse_gpu_details
from gpunode.facts.gpu_health import PciSysfsState, SysfsPciDevice, XidLog, parse_xid_lines
from gpunode.facts.kernels import KernelPackages
from gpunode.facts.nvidia import parse_nvidia_smi_xml
from gpunode.facts.pcie import PcieDevice
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.gpu_checks import check_gpu_inventory, lspci_gpus
from gpunode.roles.audit.health_checks import (
    check_container_device_nodes,
    check_links_vs_port,
    check_memory_repair,
    check_module_options,
    check_next_boot_module,
    check_pcie_errors,
    check_pciutils,
    check_xids,
)
from gpunode.roles.audit.pcie_checks import check_acs
from gpunode.roles.audit.snapshot import NodeSnapshot

from ..facts._data import read

L4 = "nvidia/nvidia_smi_q_x_l4_555_remapped_rows.xml"


def test_xids_rank_by_worst_severity_per_gpu():
    log = parse_xid_lines("source=journal\n" + read("kernel/xid_dmesg_T_akash_node4_535.txt")
                          + read("kernel/xid_journalctl_79_fallen_off_bus.txt"))
    checks = {c.name: c for c in check_xids(NodeSnapshot(xids=log))}
    assert checks["GPU 0000:01:00.0 Xid events"].status == "P0"
    assert "Xid 79 x1 (GPU has fallen off the bus)" in checks["GPU 0000:01:00.0 Xid events"].live
    assert checks["GPU 0000:00:05.0 Xid events"].status == "P2"
    assert checks["GPU 0000:00:05.0 Xid events"].live.startswith("2 since boot: Xid 43 x2")


def test_xids_none_unread_and_not_read():
    assert check_xids(NodeSnapshot(xids=XidLog(source="journal")))[0].status == "ok"
    assert check_xids(NodeSnapshot(xids=XidLog(source="none")))[0].status == "n/a"
    assert check_xids(NodeSnapshot())[0].live.startswith("not read")


def _with_details(**repair) -> NodeSnapshot:
    xml = read(L4)
    details = parse_gpu_details(xml)["0000:01:00.0"]
    return NodeSnapshot(nvidia=parse_nvidia_smi_xml(xml),
                        gpu_details={"0000:01:00.0": details.model_copy(update=repair)})


def test_memory_repair_pending_and_failure_are_p0():
    assert check_memory_repair(_with_details())[0].status == "ok"
    pending = check_memory_repair(_with_details(remapped_rows=RemappedRows(pending=True)))[0]
    assert (pending.status, pending.pending) == ("P0", "reboot")
    failed = check_memory_repair(_with_details(remapped_rows=RemappedRows(failure=True)))[0]
    assert failed.status == "P0" and "RMA" in failed.fix
    retire = check_memory_repair(_with_details(remapped_rows=None,
                                               retired_pages=RetiredPages(pending=True)))[0]
    assert retire.status == "P0" and retire.live.startswith("retired pages")


GPU = SysfsPciDevice(bdf="0000:41:00.0", vendor_id="10de", device_id="2204", class_id="0300",
                     link_speed="2.5GT/s", link_width=8, max_link_speed="16GT/s",
                     max_link_width=16)
PORT = SysfsPciDevice(bdf="0000:40:01.1", vendor_id="1022", device_id="1483", class_id="0604",
                      link_speed="2.5GT/s", link_width=8, max_link_speed="16GT/s",
                      max_link_width=16)


def _sysfs(gpu: SysfsPciDevice = GPU, port: SysfsPciDevice = PORT, **extra) -> NodeSnapshot:
    return NodeSnapshot(pci_paths={gpu.bdf: [port.bdf]}, pci_sysfs=PciSysfsState(
        devices={gpu.bdf: gpu, port.bdf: port}), **extra)


def test_narrow_link_below_both_ends_is_p1_speed_at_idle_is_not():
    check = check_links_vs_port(_sysfs())[0]
    assert check.status == "P1" and check.want == "x16"
    full = check_links_vs_port(_sysfs(GPU.model_copy(update={"link_width": 16})))[0]
    assert full.status == "ok" and "idle" in full.note
    narrow_port = check_links_vs_port(_sysfs(port=PORT.model_copy(update={"max_link_width": 8})))
    assert narrow_port[0].status == "ok"  # x8 is all the port supports


def test_busy_gpu_below_the_speed_both_support_is_p2():
    busy = GpuDetails(bdf=GPU.bdf, active_clock_reasons=[])
    check = check_links_vs_port(_sysfs(GPU.model_copy(update={"link_width": 16}),
                                       gpu_details={GPU.bdf: busy}))[0]
    assert check.status == "P2" and check.want == "Gen4"


def test_aer_counters_of_gpu_and_port_and_replays():
    clean = check_pcie_errors(_sysfs())[0]
    assert clean.status == "ok"
    port = PORT.model_copy(update={"aer": {"aer_dev_correctable": {"RxErr": 3,
                                                                  "TOTAL_ERR_COR": 3}}})
    check = check_pcie_errors(_sysfs(port=port, gpu_details={
        GPU.bdf: GpuDetails(bdf=GPU.bdf, replay_counter=12)}))[0]
    assert check.status == "P2" and "port 0000:40:01.1 correctable 3" in check.live
    assert "12 replays" in check.live
    fatal = GPU.model_copy(update={"aer": {"aer_dev_fatal": {"TOTAL_ERR_FATAL": 1}}})
    assert check_pcie_errors(_sysfs(fatal))[0].status == "P1"


def test_the_gpus_are_found_once_per_snapshot():
    """Every check family takes the one list (Snapshot.gpus); a copy with other devices
    finds its own."""
    snap = _sysfs().model_copy(update={"pci_sysfs": PciSysfsState(
        lspci=False, devices={GPU.bdf: GPU, PORT.bdf: PORT})})
    assert snap.gpus is snap.gpus and [d.bdf for d in snap.gpus] == [GPU.bdf]
    none = snap.model_copy(update={"pci_sysfs": PciSysfsState(lspci=False, devices={})})
    assert none.gpus == ()


def test_without_pciutils_the_gpus_come_from_sysfs_and_acs_is_unknown():
    snap = _sysfs().model_copy(update={"pci_sysfs": PciSysfsState(
        lspci=False, devices={GPU.bdf: GPU, PORT.bdf: PORT})})
    assert [d.bdf for d in lspci_gpus(snap)] == [GPU.bdf]
    assert check_gpu_inventory(snap)[0].status == "ok"
    assert check_pciutils(snap)[0].status == "P2"
    assert check_pciutils(snap)[0].live.startswith("not installed")
    acs = check_acs(NodeProfile(), snap)[0]
    assert acs.status == "n/a" and acs.live == "unknown: lspci not installed"


def test_acs_unknown_when_lspci_ran_without_root():
    denied = PcieDevice(bdf="0000:41:00.0", vendor_id="10de", device_id="2204",
                        class_id="0300", name="NVIDIA", caps_access_denied=True)
    acs = check_acs(NodeProfile(), NodeSnapshot(pcie=[denied]))[0]
    assert acs.live.startswith("unknown: lspci could not read") and acs.status == "n/a"


def test_container_gpu_nodes_missing_on_the_host():
    ct = ContainerState(vmid=110, gpu=True,
                        device_paths=["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"])
    checks = check_container_device_nodes(NodeSnapshot(
        containers=[ct], nvidia_nodes=["/dev/nvidia0", "/dev/nvidiactl"]))
    assert checks[0].status == "P0" and checks[0].live == "missing on the host: /dev/nvidia-uvm"
    assert "gpunode-nvidia-nodes.service" in checks[0].fix
    assert check_container_device_nodes(NodeSnapshot(containers=[ct])) == []


TREES = parse_kernel_trees("kernel=6.8.12-4-pve\n/lib/modules/6.8.12-4-pve/updates/dkms/"
                           "nvidia.ko\nkernel=6.8.12-9-pve\nheaders=proxmox-headers-6.8.12-4-pve")


def _kernels(newest: str) -> KernelPackages:
    return KernelPackages(running="6.8.12-4-pve", installed=[newest, "6.8.12-4-pve"],
                          newest=newest)


def test_next_boot_without_the_nvidia_module_is_p1():
    from gpunode.facts.proxmox import PveVersion
    snap = NodeSnapshot(kernels=_kernels("6.8.12-9-pve"), boot_modules=TREES,
                        driver_loaded="550.54.15", pve=PveVersion(present=True))
    check = check_next_boot_module(snap, None)[0]
    assert check.status == "P1" and check.live.startswith("next boot has no NVIDIA module")
    assert check.fix.startswith("apt install proxmox-headers-6.8.12-9-pve")
    pinned = snap.model_copy(update={"boot_pinned": "6.8.12-4-pve"})
    assert check_next_boot_module(pinned, None)[0].status == "ok"
    no_driver = snap.model_copy(update={"driver_loaded": None})
    assert check_next_boot_module(no_driver, None)[0].status == "n/a"


def test_module_options_pending_until_the_module_shows_them():
    profile = NodeProfile(nvidia_module_options={"NVreg_DynamicPowerManagement": 0,
                                                 "uvm_disable_hmm": True})
    pending = check_module_options(profile, NodeSnapshot(module_params={
        "nvidia/NVreg_DynamicPowerManagement": "3", "nvidia_uvm/uvm_disable_hmm": "Y"}))
    assert [(c.status, c.pending) for c in pending] == [("P1", "reboot"), ("ok", "")]
    assert "pending driver reload / reboot" in pending[0].fix
