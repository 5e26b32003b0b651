"""gpu_runtime: a power limit outside a GPU's range stops the run before any change."""

from pathlib import Path

import pytest

from gpunode.facts.nvidia import parse_nvidia_smi_xml
from gpunode.ops import nvidia
from gpunode.profile.loader import ProfileError
from gpunode.profile.node import NodeProfile
from gpunode.roles import gpu_runtime

P100 = Path(__file__).parent.parent / "data/nvidia/nvidia_smi_q_x_tesla_p100_510.xml"


@pytest.fixture
def p100(monkeypatch):
    report = parse_nvidia_smi_xml(P100.read_text())
    monkeypatch.setattr(nvidia, "smi_report", lambda: report)
    return report


def test_out_of_range_power_limit_is_refused_naming_gpu_value_and_range(p100):
    with pytest.raises(ProfileError) as error:
        gpu_runtime.gpu_runtime_problems("gpu-07", NodeProfile(gpu_power_limit=400))
    assert str(error.value) == ("gpu-07: gpunode.gpu_power_limit: GPU0 (Tesla P100-PCIE-16GB): "
                                "400 W is outside its range 125..250 W")


def test_in_range_and_unset_pass(p100):
    gpu_runtime.gpu_runtime_problems("gpu-07", NodeProfile(gpu_power_limit={0: "default"}))
    gpu_runtime.gpu_runtime_problems("gpu-07", NodeProfile())


def test_no_driver_is_never_refused(monkeypatch):
    monkeypatch.setattr(nvidia, "smi_report", lambda: parse_nvidia_smi_xml(""))
    gpu_runtime.gpu_runtime_problems("gpu-07", NodeProfile(gpu_power_limit=9999))
