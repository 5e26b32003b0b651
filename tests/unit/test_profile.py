"""NodeProfile schema: defaults, merging, and errors that name host, field, value and fix."""

import pytest

from gpunode.profile.loader import (
    ProfileError,
    load_profile,
    profiles_of_run,
    validate_hosts,
)
from gpunode.profile.node import DEFAULT_SYSCTLS, NodeProfile


def test_defaults_are_the_inference_profile():
    profile = NodeProfile()
    assert profile.modules == ["nvidia_peermem"]
    assert profile.max_read_request == 4096
    assert profile.pcie_selector.vendor == "10de"
    assert profile.pcie_selector.classes == ["0300", "0302"]
    assert profile.sysctls["kernel.numa_balancing"] == "0"
    assert profile.sysctls["vm.swappiness"] == "10"
    assert profile.max_cstate == 1
    assert profile.memlock == "unlimited"
    assert profile.reboot is False
    assert profile.gpu_persistence is True
    assert profile.gpu_power_limit is None
    assert profile.nvidia_kernel_modules == "auto"
    assert profile.pcie_acs_redirect == "keep"
    assert profile.nvidia_packages is None and profile.nvidia_repository == "debian"


def test_power_limits_all_gpus_or_per_index():
    assert NodeProfile(gpu_power_limit="300W").gpu_power_limit == 300
    assert NodeProfile(gpu_power_limit="MAX").gpu_power_limit == "max"
    assert NodeProfile(gpu_power_limit={"0": 250, 3: "default"}).gpu_power_limit == {
        0: 250, 3: "default"}


def test_sysctls_merge_over_defaults_and_null_removes():
    profile = load_profile("h1", {"gpunode": {"sysctls": {"vm.swappiness": 1,
                                                           "kernel.nmi_watchdog": None}}})
    assert profile.sysctls["vm.swappiness"] == "1"
    assert "kernel.nmi_watchdog" not in profile.sysctls
    assert profile.sysctls["kernel.numa_balancing"] == DEFAULT_SYSCTLS["kernel.numa_balancing"]


def test_module_names_are_normalised():
    assert NodeProfile(modules=["nvidia-uvm"]).modules == ["nvidia_uvm"]


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"max_read_request": 3000}, "gpunode.max_read_request", "128, 256, 512, 1024, 2048, 4096"),
        ({"sysctls": {"Not A Key": 1}}, "gpunode.sysctls", "not a sysctl key"),
        ({"nvidia_driver": "latest!"}, "gpunode.nvidia_driver", "not a version"),
        ({"kernel_pin": "newest"}, "gpunode.kernel_pin", "not a kernel version"),
        ({"max_cstate": -1}, "gpunode.max_cstate", "below 0"),
        ({"maxreadreq": 4096}, "gpunode.maxreadreq", "unknown key"),
        ({"pcie_selector": {"vendor": "nvidia"}}, "gpunode.pcie_selector.vendor", "4 hex"),
        ({"required_modules": ["ib_core"]}, "gpunode", "not in modules"),
        ({"cmdline": {"iommu": "a b"}}, "gpunode.cmdline", "without spaces"),
        ({"reboot_timeout": 5}, "gpunode.reboot_timeout", "greater than or equal to 30"),
        ({"memlock": 100}, "gpunode.memlock", "too small"),
        ({"cpu_governor": "performance; reboot"}, "gpunode.cpu_governor",
         "Input should be 'performance', 'powersave'"),
        ({"sysctls": {"vm.swappiness": "10; reboot"}}, "gpunode.sysctls",
         "vm.swappiness: '10; reboot' is not a sysctl value: use an integer"),
        ({"cmdline": {"iommu": "$(reboot)"}}, "gpunode.cmdline",
         "a kernel parameter value may hold letters"),
        ({"cmdline": {"iommu": "pt;reboot"}}, "gpunode.cmdline", "no $, backquote, quote or ;"),
        ({"pcie_selector": {"vendor": "10de\n"}}, "gpunode.pcie_selector.vendor", "4 hex"),
        ({"nvidia_driver": "550.127.05\n"}, "gpunode.nvidia_driver", "line break"),
        ({"modules": ["nvidia_uvm\n"]}, "gpunode.modules", "holds a line break"),
        ({"sysctls": {"vm.swappiness\n": 1}}, "gpunode.sysctls", "not a sysctl key"),
        ({"pcie_selector": {"vendor": None, "classes": ["06"]}}, "gpunode.pcie_selector.vendor",
         "a selector must name a vendor"),
        ({"max_cstate": 99999}, "gpunode.max_cstate", "is above 10"),
        ({"kernel_pin": "6.8.12-4-pve; reboot"}, "gpunode.kernel_pin", "not a kernel version"),
        ({"nvidia_packages": ["nvidia-smi; touch x"]}, "gpunode.nvidia_packages",
         "not a Debian package name"),
        ({"memlock": 1 << 60}, "gpunode.memlock", "above 2**50"),
        ({"gpu_power_limit": "min"}, "gpunode.gpu_power_limit", "not a power limit"),
        ({"gpu_power_limit": 0}, "gpunode.gpu_power_limit", "not a power limit"),
        ({"gpu_power_limit": "300; reboot"}, "gpunode.gpu_power_limit", "not a power limit"),
        ({"gpu_power_limit": {"x": 300}}, "gpunode.gpu_power_limit", "not a GPU index"),
        ({"gpu_power_limit": {64: 300}}, "gpunode.gpu_power_limit", "not a GPU index"),
        ({"nvidia_kernel_modules": "free"}, "gpunode.nvidia_kernel_modules", "'auto'"),
        ({"pcie_acs_redirect": "disable"}, "gpunode.pcie_acs_redirect", "'keep' or 'off'"),
        ({"nvidia_packages": ["nvidia-open; rm"]}, "gpunode.nvidia_packages",
         "not a Debian package name"),
    ],
)
def test_bad_input_names_host_field_and_fix(data, field, fragment):
    with pytest.raises(ProfileError) as error:
        load_profile("gpu-node-07", {"gpunode": data})
    message = str(error.value)
    assert "gpu-node-07" in message
    assert f"{field}:" in message
    assert fragment in message


def test_yaml_profile_file_with_inline_override(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("max_read_request: 2048\nmax_cstate: 2\n")
    profile = load_profile("h", {"gpunode_profile_file": str(path), "gpunode": {"max_cstate": 1}})
    assert profile.max_read_request == 2048
    assert profile.max_cstate == 1


def test_unreadable_yaml_file_names_host_and_key(tmp_path):
    with pytest.raises(ProfileError, match="h: gpunode_profile_file: cannot read"):
        load_profile("h", {"gpunode_profile_file": str(tmp_path / "missing.yaml")})


class _Host:
    def __init__(self, name, data):
        self.name, self.data = name, data


def test_validate_hosts_reports_every_bad_host_at_once():
    hosts = [_Host("a", {"gpunode": {"max_read_request": 1}}), _Host("b", {}),
             _Host("c", {"gpunode": {"vm.swappiness": 1}})]
    with pytest.raises(ProfileError) as error:
        validate_hosts(hosts)
    assert "a: gpunode.max_read_request" in str(error.value)
    assert "c: gpunode.vm.swappiness" in str(error.value)
    assert "b:" not in str(error.value)


def test_gpunode_data_must_be_a_mapping():
    with pytest.raises(ProfileError, match="h: gpunode: must be a mapping"):
        load_profile("h", {"gpunode": ["max_read_request", 4096]})


def test_a_pasted_4k_value_is_shown_cut():
    with pytest.raises(ProfileError) as error:
        load_profile("h", {"gpunode": {"kernel_pin": "6" * 4096}})
    assert "(4096 characters)" in str(error.value)
    assert len(str(error.value)) < 400


@pytest.mark.parametrize(
    ("data", "value"),
    [
        ({"kernel_pin": "6.12.117+deb13-amd64"}, "6.12.117+deb13-amd64"),
        ({"kernel_pin": "6.1.0-28-cloud-amd64"}, "6.1.0-28-cloud-amd64"),
        ({"kernel_pin": "7.0.0-3-pve"}, "7.0.0-3-pve"),
        ({"sysctls": {"net.ipv4.tcp_congestion_control": "bbr"}}, "bbr"),
        ({"sysctls": {"kernel.perf_event_paranoid": -1}}, "-1"),
        ({"cmdline": {"vfio-pci.ids": "10de:2204,10de:1aef"}}, "10de:2204,10de:1aef"),
        ({"cmdline": {"isolcpus": "managed_irq,domain,2-7"}}, "managed_irq,domain,2-7"),
        ({"nvidia_packages": ["cuda-drivers-550", "libcuda1:amd64"]}, "libcuda1:amd64"),
    ],
)
def test_real_values_pass(data, value):
    profile = load_profile("h", {"gpunode": data})
    assert value in str(profile.model_dump())


def test_a_run_validates_its_inventory_once(monkeypatch):
    """Each host's deploy asks for its profile: the inventory is validated once per run, not
    once per host (N hosts x N validations would grow with the square of the fleet)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_state

    import gpunode.profile.loader as loader

    state = State(Inventory(([("a", {"gpunode": {}}), ("b", {"gpunode": {}})], {})), Config())
    calls = []
    real = loader.validate_hosts
    monkeypatch.setattr(loader, "validate_hosts", lambda hosts: calls.append(1) or real(hosts))
    with ctx_state.use(state):
        first = profiles_of_run(state)
        assert profiles_of_run(state) is first
    assert sorted(first) == ["a", "b"] and len(calls) == 1


def test_nvidia_module_options_allow_list_and_ranges():
    from gpunode.profile.node import NodeProfile as Profile
    ok = Profile(nvidia_module_options={"NVreg_DynamicPowerManagement": 0,
                                        "uvm_disable_hmm": True})
    assert ok.nvidia_module_options == {"NVreg_DynamicPowerManagement": 0, "uvm_disable_hmm": 1}
    for bad, words in (({"NVreg_Bogus": 1}, "not a known NVIDIA module option"),
                       ({"NVreg_DynamicPowerManagement": 7}, "integer 0..3"),
                       ({"NVreg_DynamicPowerManagement": "0; reboot"}, "is not allowed"),
                       ({"NVreg_EnableGpuFirmware": True}, "is not allowed")):
        with pytest.raises(ValueError, match=words):
            Profile(nvidia_module_options=bad)
