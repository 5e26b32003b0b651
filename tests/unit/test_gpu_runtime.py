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


def test_modprobe_file_groups_options_by_module_and_undo_covers_the_boot_files():
    from gpunode.deploys.undo import undo_targets
    from gpunode.ops.files import render_template
    from gpunode.profile.node import NodeProfile as Profile
    from gpunode.roles.gpu_runtime.driver_boot import (
        INITRAMFS_REFRESH,
        MODPROBE_FILE,
        NODES_SCRIPT,
        NODES_UNIT,
        NODES_UNIT_FILE,
        options_by_module,
    )
    profile = Profile(nvidia_module_options={"uvm_disable_hmm": 1,
                                             "NVreg_DynamicPowerManagement": 0,
                                             "NVreg_EnableGpuFirmware": 1})
    text = render_template("modprobe/gpunode-nvidia.conf.j2",
                           modules=options_by_module(profile.nvidia_module_options))
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "options nvidia NVreg_DynamicPowerManagement=0 NVreg_EnableGpuFirmware=1",
        "options nvidia_uvm uvm_disable_hmm=1"]
    targets = undo_targets(profile)
    assert targets.owned_files[MODPROBE_FILE] == INITRAMFS_REFRESH
    assert NODES_SCRIPT in targets.owned_files and NODES_UNIT in targets.timers
    assert targets.owned_files[NODES_UNIT_FILE] == "systemctl daemon-reload"
    unit = render_template("systemd/gpunode-nvidia-nodes.service.j2", script=NODES_SCRIPT)
    assert "Before=pve-guests.service lxc.service" in unit
