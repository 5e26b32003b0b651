"""Values that are valid but dangerous, typos that would do nothing, pins that match too much
(issue 28, item 7)."""

from __future__ import annotations

import fnmatch

import pytest

from gpunode.ops.files import render_template
from gpunode.profile.container import ContainerSpecError, validate_containers
from gpunode.profile.loader import ProfileError, load_profile
from gpunode.profile.node import NodeProfile

NODE_DANGERS = [
    ("kernel.randomize_va_space", {"sysctls": {"kernel.randomize_va_space": "0"}}),
    ("fs.suid_dumpable", {"sysctls": {"fs.suid_dumpable": "2"}}),
    ("vm.nr_hugepages", {"sysctls": {"vm.nr_hugepages": "10000000"}}),
    ("cmdline.init", {"cmdline": {"init": "/bin/sh"}}),
    ("cmdline.root", {"cmdline": {"root": "/dev/sdb1"}}),
    ("cmdline.module_blacklist", {"cmdline": {"module_blacklist": "nouveau,nvidia"}}),
    ("cmdline.modprobe.blacklist", {"cmdline": {"modprobe.blacklist": "nvidia_uvm"}}),
    ("pcie_selector.bridges", {"pcie_selector": {"vendor": "10de", "classes": ["0604"]}}),
]


@pytest.mark.parametrize(("name", "profile"), NODE_DANGERS)
def test_dangerous_node_setting_needs_i_know(name, profile):
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode": profile})
    text = str(err.value)
    assert "gpu-07: gpunode" in text and name in text and "i_know" in text and "Fix:" in text
    assert isinstance(load_profile("gpu-07", {"gpunode": {**profile, "i_know": [name]}}),
                      NodeProfile)


def test_harmless_values_of_those_keys_pass():
    load_profile("gpu-07", {"gpunode": {"sysctls": {"kernel.randomize_va_space": "2",
                                                    "vm.nr_hugepages": "1024"},
                                        "cmdline": {"module_blacklist": "nouveau"}}})


def test_i_know_names_only_known_dangers():
    with pytest.raises(ProfileError, match="is not a setting that needs i_know"):
        load_profile("gpu-07", {"gpunode": {"i_know": ["everything"]}})


BASE = {"vmid": 110, "hostname": "llm-a",
        "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}


@pytest.mark.parametrize(("name", "line"), [
    ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.allow: a"),
    ("lxc.apparmor.profile", "lxc.apparmor.profile: unconfined"),
])
def test_dangerous_extra_lxc_needs_i_know(name, line):
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [{**BASE, "extra_lxc": [line]}], {}, 8)
    assert "pve1: containers[0]" in str(err.value) and name in str(err.value)
    ok = validate_containers("pve1", [{**BASE, "extra_lxc": [line], "i_know": [name]}], {}, 8)
    assert ok[0].extra_lxc == [line]


def _pin_glob(version: str) -> str:
    text = render_template("apt/90-gpunode-nvidia.pref.j2", version=version, patterns=["x"])
    return next(line for line in text.splitlines() if line.startswith("Pin:")).split()[-1]


def test_driver_pin_matches_whole_version_components():
    glob = _pin_glob("550.12")
    assert not fnmatch.fnmatchcase("550.127.05-1~deb12u1", glob)
    assert fnmatch.fnmatchcase("550.12-1", glob)
    assert fnmatch.fnmatchcase("550.127.05-1~deb12u1", _pin_glob("550.127.05"))


MEMINFO_24G = {"MemTotal": 24_576_000, "Hugepagesize": 2048}


@pytest.mark.parametrize(("sysctls", "i_know", "meminfo", "refused"), [
    ({"vm.nr_hugepages": "12000"}, [], MEMINFO_24G, False),       # exactly MemTotal
    ({"vm.nr_hugepages": "12001"}, [], MEMINFO_24G, True),        # one page more
    ({"vm.nr_hugepages": "11000"}, [], MEMINFO_24G, False),
    ({"vm.nr_hugepages": "20000"}, ["vm.nr_hugepages"], MEMINFO_24G, False),  # acknowledged
    ({"vm.nr_hugepages": "20000"}, [], {}, False),                # no meminfo read: no bound
    ({"vm.swappiness": "10"}, [], MEMINFO_24G, False),
    ({"vm.nr_hugepages": "13"}, [], {"MemTotal": 24_576, "Hugepagesize": 1_048_576}, True),
])
def test_hugepages_above_the_hosts_memory_are_refused(sysctls, i_know, meminfo, refused):
    """The bound needs the host (issue 28.7): pages x Hugepagesize against MemTotal."""
    from gpunode.profile.danger import hugepages_above_memory

    text = hugepages_above_memory(sysctls, i_know, meminfo)
    assert (text is not None) == refused, text
    if refused:
        assert "gpunode.sysctls.vm.nr_hugepages" in text and "Fix:" in text and "i_know" in text


def test_meminfo_of_this_machine_parses():
    """The real /proc/meminfo here: MemTotal and Hugepagesize in KiB, counts as numbers."""
    from pathlib import Path

    from gpunode.facts.memory import parse_meminfo

    values = parse_meminfo(Path("/proc/meminfo").read_text().splitlines())
    assert values["MemTotal"] > 0 and values["Hugepagesize"] in (2048, 1048576)
    assert "HugePages_Total" in values
    assert parse_meminfo(["MemTotal:       16384 kB", "garbage", "Hugepagesize: 2048 kB"]) == {
        "MemTotal": 16384, "Hugepagesize": 2048}
