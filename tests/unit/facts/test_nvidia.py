"""nvidia-smi -q -x and /proc/driver/nvidia/version parsers on real captures."""

import subprocess

import pytest

from gpunode.facts.nvidia import (
    NvidiaSmi,
    nvidia_module_is_open,
    parse_nvidia_proc_version,
    parse_nvidia_smi_xml,
)
from gpunode.facts.nvidia_modules import NvidiaKernelModule

from ._data import read


def test_a100_80gb_driver_535_new_power_and_ecc_layout():
    report = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml"))
    assert report.present
    assert (report.driver_version, report.cuda_version) == ("535.54.03", "12.2")
    (gpu,) = report.gpus
    assert gpu.index == 0
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.pci_bdf == "0000:01:00.0"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.minor_number == 1  # /dev/nvidia1 although it is index 0
    assert gpu.temperature_c == 27
    # <gpu_power_readings><current_power_limit> (535+ layout)
    assert (gpu.power_limit_w, gpu.power_max_limit_w) == (500.0, 500.0)
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (1275, 1410)
    assert gpu.ecc_mode == "Enabled"
    assert gpu.ecc_errors_uncorrected == 0  # sram_uncorrectable + dram_uncorrectable
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.persistence_mode == "Disabled"
    assert gpu.mig_mode == "Enabled"


def test_a100_40gb_mig_driver_510_volatile_ecc_not_available():
    report = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_q_x_a100_sxm4_40gb_mig_510.xml"))
    (gpu,) = report.gpus
    assert report.driver_version == "510.47.03"
    assert gpu.pci_bdf == "0000:00:04.0"
    assert gpu.power_limit_w == 400.0  # <power_readings><power_limit> (older layout)
    assert gpu.ecc_mode == "Enabled"
    assert gpu.ecc_errors_uncorrected is None  # volatile counters all N/A under MIG
    assert gpu.sm_clock_mhz == 1410


def test_tesla_p100_double_bit_ecc_layout():
    report = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_q_x_tesla_p100_510.xml"))
    (gpu,) = report.gpus
    assert gpu.name == "Tesla P100-PCIE-16GB"
    assert gpu.temperature_c == 38
    assert (gpu.power_limit_w, gpu.power_default_limit_w, gpu.power_max_limit_w) == (
        250.0,
        250.0,
        250.0,
    )
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (405, 1328)
    assert gpu.ecc_errors_uncorrected == 0  # volatile double_bit total (aggregate SBE is 3)
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (3, 16)
    assert gpu.mig_mode is None  # N/A


def test_nvml_error_is_not_present():
    report = parse_nvidia_smi_xml(read("nvidia/nvidia_smi_error_version_mismatch.txt"))
    assert not report.present
    assert report.gpus == []
    assert report.error == "Failed to initialize NVML: Driver/library version mismatch"


@pytest.mark.parametrize(
    "text",
    ["", "   \n", "<nvidia_smi_log><gpu>", "<?xml version='1.0'?><other/>", "<<<"],
)
def test_empty_and_garbage_xml(text):
    report = parse_nvidia_smi_xml(text)
    assert not report.present
    assert report.gpus == []
    assert report.driver_version is None


def test_leading_blank_line_before_xml_is_accepted():
    text = "\n" + read("nvidia/nvidia_smi_q_x_a100_sxm4_80gb_mig_535.xml")
    assert parse_nvidia_smi_xml(text).present


@pytest.mark.parametrize(
    ("relative", "version", "is_open"),
    [
        ("nvidia/proc_driver_nvidia_version_550.54.15.txt", "550.54.15", False),
        ("nvidia/proc_driver_nvidia_version_580.173.02.txt", "580.173.02", False),
        ("nvidia/proc_driver_nvidia_version_565.57.01_open.txt", "565.57.01", True),
        ("nvidia/proc_driver_nvidia_version_525.60.11_open_arch.txt", "525.60.11", True),
    ],
)
def test_proc_version(relative, version, is_open):
    text = read(relative)
    assert parse_nvidia_proc_version(text) == version
    assert nvidia_module_is_open(text) is is_open


@pytest.mark.parametrize("text", ["", "cat: /proc/driver/nvidia/version: No such file"])
def test_proc_version_absent(text):
    assert parse_nvidia_proc_version(text) is None
    assert nvidia_module_is_open(text) is None


def test_facts_never_fail_without_the_driver():
    smi = NvidiaSmi()
    assert smi.command().startswith("command -v nvidia-smi")
    assert smi.command().endswith("|| true")
    assert smi.default().present is False
    assert smi.process([]).present is False
    module = NvidiaKernelModule()
    # this machine has no NVIDIA driver: the real command exits 0, and reads as no module
    run = subprocess.run(["sh", "-c", module.command()], capture_output=True, text=True)
    assert run.returncode == 0 and run.stderr == ""
    assert module.process(run.stdout.splitlines()).loaded_version is None
