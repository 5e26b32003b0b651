"""GPU runtime checks (persistence, power limits, module flavour) on captured nvidia-smi
reports, /proc/driver/nvidia/version and modinfo outputs."""

import pytest

from gpunode.facts.gpu_details import UnitState, parse_unit_state
from gpunode.facts.nvidia import nvidia_module_is_open, parse_nvidia_proc_version
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.runtime_checks import (
    check_module_flavour,
    check_persistence,
    check_power_limits,
)

from ._nodes import by_name, lspci, read
from .test_rules import ESC8000A, P100_XML, bare, smi

A100_XML = "nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml"
OPEN_565 = "nvidia/proc_driver_nvidia_version_565.57.01_open.txt"
PROPRIETARY_550 = "nvidia/proc_driver_nvidia_version_550.54.15.txt"
RUNNING = UnitState(installed=True, enabled="enabled", active="active")


def loaded(relative: str) -> dict:
    text = read(relative)
    return {"driver_loaded": parse_nvidia_proc_version(text),
            "driver_open": nvidia_module_is_open(text)}


# --- persistence ----------------------------------------------------------------------------


def test_no_driver_is_not_applicable_never_a_failure():
    for check in (check_persistence(NodeProfile(), bare())
                  + check_power_limits(NodeProfile(gpu_power_limit=300), bare())
                  + check_module_flavour(NodeProfile(), bare())):
        assert check.status == "n/a", check
        assert "no NVIDIA driver" in check.live


def test_persistence_disabled_in_the_capture_is_p0_fixed_by_the_deploy():
    checks = by_name(check_persistence(NodeProfile(), bare(**smi(P100_XML), persistenced=RUNNING)))
    assert checks["nvidia-persistenced"].status == "ok"
    mode = checks["GPU0 persistence mode"]
    assert (mode.status, mode.live, mode.want) == ("P0", "Disabled", "Enabled")
    assert mode.deploy_fixes and "nvidia-smi -pm 1" in mode.fix


def test_persistence_off_in_the_profile_is_only_minor():
    (mode,) = check_persistence(NodeProfile(gpu_persistence=False),
                                bare(**smi(P100_XML), persistenced=UnitState()))
    assert mode.status == "P2" and not mode.deploy_fixes


@pytest.mark.parametrize("text", [
    "installed=no\nUnitFileState=\nActiveState=inactive\n",  # systemctl show, the audit's read
    "installed=no\nenabled=\nactive=inactive\n",  # is-enabled / is-active (earlier gpunode)
])
def test_persistenced_missing(text):
    checks = by_name(check_persistence(NodeProfile(), bare(**smi(P100_XML, persistence_mode=
                                                                  "Enabled"),
                                                           persistenced=parse_unit_state(text))))
    daemon = checks["nvidia-persistenced"]
    assert daemon.status == "P0" and daemon.live == "not installed, not enabled, inactive"
    assert checks["GPU0 persistence mode"].status == "ok"


# --- power limits ----------------------------------------------------------------------------


def test_power_limit_read_with_range():
    (check,) = check_power_limits(NodeProfile(), bare(**smi(P100_XML)))
    assert (check.status, check.live) == ("ok", "250 W (default 250 W, range 125..250 W)")


@pytest.mark.parametrize(("setting", "status", "want"), [
    (200, "P0", "200 W"), ("default", "ok", "250 W"), ("max", "ok", "250 W"),
    ({0: 150}, "P0", "150 W"),
])
def test_power_limit_against_the_profile(setting, status, want):
    check = by_name(check_power_limits(NodeProfile(gpu_power_limit=setting),
                                       bare(**smi(P100_XML))))["GPU0 power limit"]
    assert (check.status, check.want) == (status, want)
    if status == "P0":
        assert check.deploy_fixes and f"nvidia-smi -i 0 -pl {want[:-2]}" in check.fix


def test_power_limit_outside_the_range_names_gpu_value_and_range():
    checks = check_power_limits(NodeProfile(gpu_power_limit=400), bare(**smi(P100_XML)))
    problem = by_name(checks)["GPU power limit"]
    assert problem.status == "P1"
    assert problem.live == "GPU0 (Tesla P100-PCIE-16GB): 400 W is outside its range 125..250 W"


def test_power_limit_below_default_without_a_profile_value():
    check = by_name(check_power_limits(NodeProfile(), bare(**smi(P100_XML,
                                                                  power_limit_w=200.0))))
    assert check["GPU0 power limit"].status == "P0"
    assert "gpu_power_limit: default" in check["GPU0 power limit"].fix


# --- kernel module flavour -------------------------------------------------------------------


def test_ampere_on_open_modules_is_ok():
    (check,) = check_module_flavour(NodeProfile(), bare(**smi(A100_XML), **loaded(OPEN_565)))
    assert check.status == "ok"
    assert check.live == "open (loaded); GPUs: Ampere"


def test_ampere_on_proprietary_is_a_recommendation_with_the_package_names():
    (check,) = check_module_flavour(NodeProfile(), bare(**smi(A100_XML),
                                                       **loaded(PROPRIETARY_550)))
    assert (check.status, check.want) == ("P2", "open")
    assert "nvidia-driver nvidia-open-kernel-dkms" in check.fix
    (cuda,) = check_module_flavour(NodeProfile(nvidia_repository="cuda"),
                                   bare(**smi(A100_XML), **loaded(PROPRIETARY_550)))
    assert "install nvidia-open (" in cuda.fix


def test_pascal_needs_proprietary():
    (check,) = check_module_flavour(NodeProfile(), bare(**smi(P100_XML), **loaded(OPEN_565)))
    assert (check.status, check.want) == ("P2", "proprietary")
    (forced,) = check_module_flavour(NodeProfile(nvidia_kernel_modules="open"),
                                     bare(**smi(P100_XML), **loaded(OPEN_565)))
    assert forced.status == "P1" and "do not support Pascal" in forced.fix


def test_blackwell_on_proprietary_is_p1():
    smi_fields = smi(A100_XML, architecture="Blackwell")
    (check,) = check_module_flavour(NodeProfile(), bare(**smi_fields, **loaded(PROPRIETARY_550)))
    assert (check.status, check.want) == ("P1", "open")
    assert "Blackwell" in check.note


def test_flavour_from_lspci_names_and_modinfo_without_a_loaded_driver():
    # RTX 6000 Ada, no driver loaded, the open module installed (modinfo license).
    (check,) = check_module_flavour(NodeProfile(), bare(pcie=lspci(ESC8000A),
                                                       module_installed_flavour="open"))
    assert check.status == "ok" and check.live == "open (installed (modinfo)); GPUs: Ada Lovelace"


def test_installed_flavour_differs_from_the_loaded_one_waits_for_a_reboot():
    (check,) = check_module_flavour(NodeProfile(), bare(**smi(A100_XML), **loaded(PROPRIETARY_550),
                                                       module_installed_flavour="open"))
    assert check.status == "P1" and check.pending == "reboot"


# --- measured bandwidth (active mode) ---------------------------------------------------------


def test_measured_bandwidth_against_the_links():
    from gpunode.facts.bandwidth import BandwidthResults, parse_nccl_perf, parse_p2p_bandwidth
    from gpunode.roles.audit.bandwidth_checks import check_measured_bandwidth

    assert check_measured_bandwidth(bare()) == []  # active mode off: no rows
    (none,) = check_measured_bandwidth(bare(bandwidth=BandwidthResults()))
    assert none.status == "n/a" and "p2pBandwidthLatencyTest" in none.live
    # Eight idle RTX 6000 Ada links (LnkSta 2.5GT/s downgraded -> LnkCap 16GT/s x16).
    (gpu,) = lspci(ESC8000A)
    gpus = [gpu.model_copy(update={"bdf": f"0000:{b:02x}:00.0"}) for b in range(1, 9)]
    off = BandwidthResults(ran=["p2pBandwidthLatencyTest", "all_reduce_perf"],
                           p2p=parse_p2p_bandwidth(read("bandwidth/p2pBandwidthLatencyTest_"
                                                        "8x4090_p2p_off.txt")),
                           all_reduce=parse_nccl_perf(read("bandwidth/all_reduce_perf_8x4090_"
                                                           "p2p_off.txt")))
    checks = by_name(check_measured_bandwidth(bare(pcie=gpus, bandwidth=off)))
    pair = checks["GPU0-GPU1 P2P bandwidth"]
    assert pair.status == "P2" and "no P2P" in pair.note
    assert pair.live.startswith("18.83 GB/s unidirectional, 20.86 GB/s bidirectional (PCIe link "
                                "31.51 GB/s per direction: 60%)")
    ring = checks["NCCL all-reduce bus bandwidth"]
    assert ring.status == "P2" and "(slowest GPU link 31.51 GB/s: 48%)" in ring.live
    on = off.model_copy(update={"p2p": parse_p2p_bandwidth(read(
        "bandwidth/p2pBandwidthLatencyTest_8x4090_p2p_on.txt"))})
    assert by_name(check_measured_bandwidth(bare(pcie=gpus, bandwidth=on)))[
        "GPU0-GPU1 P2P bandwidth"].status == "ok"
