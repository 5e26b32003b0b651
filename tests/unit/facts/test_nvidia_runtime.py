"""Kernel module flavour, GPU topology matrices and power limit plans on real captures."""

import pytest

from gpunode.facts.gpu_topology import parse_gpu_topology, parse_topo_matrix
from gpunode.facts.nvidia import parse_nvidia_smi_xml
from gpunode.facts.nvidia_modules import (
    MODULE_STATE_COMMAND,
    architecture_from_name,
    flavour_of_license,
    flavour_packages,
    parse_modinfo_license,
    parse_module_state,
    wanted_flavour,
)
from gpunode.facts.pcie import parse_lspci_vvv
from gpunode.facts.sections import MARKER
from gpunode.ops.nvidia import power_limit_command, power_limit_targets

from ._data import read


@pytest.mark.parametrize(("relative", "license_", "flavour"), [
    ("nvidia/modinfo_nvidia_590.44.01_open.txt", "Dual MIT/GPL", "open"),
    ("nvidia/modinfo_nvidia_current_295.53_proprietary.txt", "NVIDIA", "proprietary"),
])
def test_modinfo_license(relative, license_, flavour):
    assert parse_modinfo_license(read(relative)) == license_
    assert flavour_of_license(license_) == flavour


def test_modinfo_bare_value_and_errors():
    assert parse_modinfo_license("Dual MIT/GPL\n") == "Dual MIT/GPL"
    assert parse_modinfo_license("modinfo: ERROR: Module nvidia not found.\n") is None
    assert parse_modinfo_license("") is None


def test_module_state_of_both_sections():
    text = (f"{MARKER}proc_version\n{read('nvidia/proc_driver_nvidia_version_550.54.15.txt')}\n"
            f"{MARKER}modinfo\n{read('nvidia/modinfo_nvidia_590.44.01_open.txt')}\n")
    state = parse_module_state(text)
    assert (state.loaded_version, state.loaded_flavour) == ("550.54.15", "proprietary")
    assert (state.installed_version, state.installed_flavour) == ("590.44.01", "open")
    assert parse_module_state("").loaded_flavour is None
    assert "modinfo nvidia" in MODULE_STATE_COMMAND


def test_architecture_from_lspci_names():
    (ada,) = [d for d in parse_lspci_vvv(read("pcie/lspci_vvv_esc8000a_rtx6000ada.txt"))]
    assert architecture_from_name(ada.name) == "Ada Lovelace"
    gpus = [d for d in parse_lspci_vvv(read("pcie/lspci_vvnn_g482z54_rtx3090.txt"))
            if d.class_id == "0300"]
    assert [architecture_from_name(d.name) for d in gpus] == ["Ampere"]
    assert architecture_from_name("NVIDIA Corporation GB202 [GeForce RTX 5090]") == "Blackwell"
    assert architecture_from_name("ASPEED Graphics Family") is None


@pytest.mark.parametrize(("setting", "archs", "flavour"), [
    ("auto", ["Ampere", "Hopper"], "open"),
    ("auto", ["Pascal"], "proprietary"),
    ("auto", ["Blackwell"], "open"),
    ("auto", [], "open"),
    ("proprietary", ["Ampere"], "proprietary"),
    ("proprietary", ["Blackwell"], None),
    ("open", ["Volta"], None),
    ("auto", ["Blackwell", "Pascal"], None),
])
def test_wanted_flavour(setting, archs, flavour):
    assert wanted_flavour(setting, archs)[0] == flavour


def test_flavour_packages_per_repository():
    assert flavour_packages("open", "debian") == ["nvidia-driver", "nvidia-open-kernel-dkms"]
    assert flavour_packages("proprietary", "debian") == ["nvidia-driver", "nvidia-kernel-dkms"]
    assert flavour_packages("open", "cuda") == ["nvidia-open"]
    assert flavour_packages("proprietary", "cuda") == ["cuda-drivers"]


# --- topology matrices ---------------------------------------------------------------------


def test_topo_m_tab_layout_five_gpus():
    links = parse_topo_matrix(read("nvidia/topo_m_5gpu_epyc_node_phb.txt"))
    assert len(links) == 10
    assert links["3-4"] == "PHB" and links["0-1"] == "NODE"


def test_topo_m_space_layout_with_nvlink_pairs():
    links = parse_topo_matrix(read("nvidia/topo_m_4x3090_nvlink_pairs.txt"))
    assert links == {"0-1": "PHB", "0-2": "NV4", "0-3": "NODE", "1-2": "NODE", "1-3": "NV4",
                     "2-3": "PHB"}


def test_p2p_matrices():
    assert set(parse_topo_matrix(read("nvidia/topo_p2p_p_5gpu_epyc_ok.txt")).values()) == {"OK"}
    topo = parse_gpu_topology(read("nvidia/topo_m_2x5090_phb.txt"),
                              read("nvidia/topo_p2p_rw_2x5090_gns.txt"), "")
    assert (topo.links, topo.p2p_read, topo.p2p_write) == ({"0-1": "PHB"}, {"0-1": "GNS"}, {})
    assert parse_topo_matrix(read("nvidia/topo_m_2x_l4_sys.txt")) == {"0-1": "SYS"}
    assert parse_topo_matrix(read("nvidia/nvidia_smi_error_version_mismatch.txt")) == {}
    assert parse_topo_matrix("") == {}


# --- power limit plan ----------------------------------------------------------------------


def test_power_limit_targets_on_a_captured_p100():
    gpus = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_q_x_tesla_p100_510.xml")).gpus
    assert power_limit_targets(200, gpus) == ({0: 200}, [])
    assert power_limit_targets("default", gpus) == ({0: 250}, [])
    assert power_limit_targets({0: "max"}, gpus) == ({0: 250}, [])
    targets, problems = power_limit_targets(100, gpus)
    assert targets == {} and problems == [
        "gpu_power_limit: GPU0 (Tesla P100-PCIE-16GB): 100 W is outside its range 125..250 W"]
    _, missing = power_limit_targets({3: 200}, gpus)
    assert missing == ["gpu_power_limit: GPU3 is not on this node (GPUs: GPU0)"]


def test_power_limit_not_supported_mig_module_readings():
    # The A100 80GB report's <gpu_power_readings> has limits: its range is 100..500 W.
    gpus = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml")).gpus
    assert (gpus[0].power_min_limit_w, gpus[0].power_max_limit_w) == (100.0, 500.0)
    assert power_limit_targets(400, gpus) == ({0: 400}, [])


def test_power_limit_command_reads_back():
    command = power_limit_command(1, 300)
    assert command.startswith("nvidia-smi -i 1 -pl 300 >/dev/null && ")
    assert "--query-gpu=power.limit" in command and "exit 1" in command


# --- ACS on the lab guest's QEMU root ports (real captures of this project's lab) -----------


def test_lab_root_ports_acs_and_the_bridges_above_the_standins():
    from gpunode.facts.pcie import parse_pci_paths
    from gpunode.ops.pcie import acs_redirecting, bridges_above
    from gpunode.profile.node import PcieSelector

    devices = parse_lspci_vvv(read("pcie/lspci_vvvnnD_lab_qemu_root_ports_acs_off.txt"))
    (on,) = parse_lspci_vvv(read("pcie/lspci_vvvnnD_lab_qemu_root_port_acs_on.txt"))
    assert on.bdf == "0000:00:03.0" and on.device_id == "000c"
    assert acs_redirecting(on) == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    devices = [on if d.bdf == on.bdf else d for d in devices]
    paths = parse_pci_paths(read("pcie/readlink_sys_bus_pci_devices_lab_qemu.txt"))
    assert paths["0000:01:00.0"] == ["0000:00:03.0"]
    lab = PcieSelector(vendor="8086", device="10d3", classes=["0200"])
    bridges = bridges_above(devices, paths, lab)
    assert [b.bdf for b in bridges] == ["0000:00:03.0", "0000:00:04.0"]  # not the NIC's 05.0
    assert [acs_redirecting(b) for b in bridges] == [
        ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"], []]
