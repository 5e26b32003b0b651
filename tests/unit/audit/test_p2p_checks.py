"""The P2P path of each GPU pair: PCIe tree from sysfs, ACS on the bridges, the driver's
topo matrices. Devices are real lspci captures; switch ports are the ROMED8-2T root port's
capture moved to other addresses (changed, as marked), the sysfs paths synthetic strings in
`readlink -f` form."""

from gpunode.facts.gpu_topology import parse_gpu_topology
from gpunode.facts.pcie import parse_pci_paths
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.p2p_checks import check_p2p_paths, split_path

from ._nodes import by_name, lspci, read
from .test_rules import ESC8000A, bare, smi

G482 = "pcie/lspci_vvnn_g482z54_rtx3090.txt"
ROMED8 = "pcie/lspci_vvnn_romed8_2t_pve5.13_rootport.txt"
ADA, AMPERE = "0000:01:00.0", "0000:41:00.0"


def _devices(redirect: bool):
    ampere = [d for d in lspci(G482) if d.bdf == AMPERE]
    ada = ampere[0].model_copy(update={"bdf": ADA})  # changed: a second GPU at 01:00.0
    (redirecting,) = [d for d in lspci(ROMED8) if (d.acs_ctl or {}).get("ReqRedir")]
    quiet = redirecting.model_copy(update={"acs_ctl": {**redirecting.acs_ctl, "ReqRedir": False,
                                                        "CmpltRedir": False}})  # changed
    port = redirecting if redirect else quiet
    switch = [port.model_copy(update={"bdf": bdf}) for bdf in  # changed: switch ports
              ("0000:05:00.0", "0000:06:08.0", "0000:06:10.0")]
    return [ada, *ampere, *switch]


SWITCH_PATHS = parse_pci_paths(
    "/sys/devices/pci0000:00/0000:00:03.1/0000:05:00.0/0000:06:08.0/0000:01:00.0\n"
    "/sys/devices/pci0000:00/0000:00:03.1/0000:05:00.0/0000:06:10.0/0000:41:00.0\n")
ROOT_PORT_PATHS = parse_pci_paths(
    "/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0\n"
    "/sys/devices/pci0000:40/0000:40:08.1/0000:41:00.0\n")


def test_split_path_at_the_lowest_common_bridge():
    a, b = SWITCH_PATHS[ADA], SWITCH_PATHS[AMPERE]
    assert split_path(a, b) == (["0000:00:03.1", "0000:05:00.0"], ["0000:06:08.0"],
                                ["0000:06:10.0"])


def test_switch_with_acs_redirect_is_p0_naming_the_ports():
    (pair,) = check_p2p_paths(NodeProfile(), bare(pcie=_devices(True), pci_paths=SWITCH_PATHS))
    assert pair.name == f"GPU {ADA}-GPU {AMPERE} P2P path"
    assert pair.status == "P0" and not pair.deploy_fixes
    assert "below bridge 0000:05:00.0 (ports 0000:06:08.0, 0000:06:10.0)" in pair.live
    assert "ACS redirect on 0000:06:08.0 (ReqRedir+CmpltRedir)" in pair.live
    assert pair.fix.startswith("set gpunode.pcie_acs_redirect: off")
    (fixed,) = check_p2p_paths(NodeProfile(pcie_acs_redirect="off"),
                               bare(pcie=_devices(True), pci_paths=SWITCH_PATHS))
    assert fixed.deploy_fixes


def test_switch_without_redirect_is_ok():
    (pair,) = check_p2p_paths(NodeProfile(), bare(pcie=_devices(False), pci_paths=SWITCH_PATHS))
    assert pair.status == "ok"


def test_gpus_on_two_root_complexes_go_through_the_cpu():
    (pair,) = check_p2p_paths(NodeProfile(), bare(pcie=_devices(False),
                                                  pci_paths=ROOT_PORT_PATHS))
    assert pair.status == "limit"
    assert pair.live == ("through the CPU (two host bridges; root ports 0000:00:01.1, "
                         "0000:40:08.1)")


def test_driver_matrices_name_the_link_and_blocked_p2p():
    topo = parse_gpu_topology(read("nvidia/topo_m_2x5090_phb.txt"),
                              read("nvidia/topo_p2p_rw_2x5090_gns.txt"),
                              read("nvidia/topo_p2p_rw_2x5090_gns.txt"))
    fields = {"pcie": _devices(False), "pci_paths": ROOT_PORT_PATHS, "topology": topo}
    snap = bare(**fields)
    # Without nvidia-smi indexes the matrices can't be matched to BDFs: PCIe only.
    (pair,) = check_p2p_paths(NodeProfile(), snap)
    assert "p2p" not in pair.live
    a100 = smi("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml", bdf=ADA)
    p100 = smi("nvidia/nvidia_smi_q_x_tesla_p100_510.xml", bdf=AMPERE)
    gpus = [a100["nvidia"].gpus[0], p100["nvidia"].gpus[0].model_copy(update={"index": 1})]
    report = a100["nvidia"].model_copy(update={"gpus": gpus})
    (pair,) = check_p2p_paths(NodeProfile(), bare(**fields, nvidia=report))
    assert pair.name == "GPU0-GPU1 P2P path"
    assert pair.live.startswith("PHB: through the CPU")
    assert pair.live.endswith("; p2p read GNS, write GNS")
    assert pair.status == "limit" and "GeForce" in pair.fix


def test_one_gpu_and_no_gpu():
    (ada,) = lspci(ESC8000A)
    (one,) = check_p2p_paths(NodeProfile(), bare(pcie=[ada]))
    assert one.status == "n/a" and "one GPU" in one.live
    (none,) = check_p2p_paths(NodeProfile(), bare())
    assert none.status == "n/a"
    assert by_name([one])["GPU P2P path"] is one
