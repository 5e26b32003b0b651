"""NUMA placement of a container's GPUs, parsed from real captures (tests/data/lxc/SOURCES.md)."""

import pytest

from gpunode.facts.gpu_numa import (
    GpuNuma,
    format_cpulist,
    gpu_nodes,
    local_cpuset,
    parse_cpulist,
    parse_gpu_numa,
)
from gpunode.facts.sections import section_command
from tests.unit.lxc._data import read


def sections(**bodies: str) -> str:
    """Fact output as GPU_NUMA_COMMAND prints it (a marker line before each section)."""
    text = ""
    for name, body in bodies.items():
        marker = section_command(name, "true").split(";")[0]
        text += marker.removeprefix("echo '").removesuffix("'") + "\n" + body + "\n"
    return text


def xeon_8gpu() -> GpuNuma:
    """The 2-socket Xeon 8470Q node lists, the 8-GPU minor map; GPUs 0-3 (buses 07-4c) on
    node 0 and 4-7 (88-cb) on node 1, as their PCI addresses say on such boards."""
    pci = "\n".join(
        f"/sys/bus/pci/devices/0000:{bus}:00.0/numa_node:{0 if bus < '80' else 1}"
        for bus in ("07", "0b", "48", "4c", "88", "8b", "c8", "cb")
    )
    return parse_gpu_numa(sections(
        node_cpus=read("numa-node-cpulist-xeon-8470q.txt"),
        gpu_minors=read("grep-device-minor-8gpu.txt"),
        char_devices="/dev/nvidia0|\n/dev/nvidia1|",
        pci_nodes=pci,
    ))


def test_real_captures_parse():
    numa = xeon_8gpu()
    assert format_cpulist(numa.node_cpus[1]) == "52-103,156-207"
    assert len(numa.cpus) == 208
    assert numa.gpu_bdf[2] == "0000:07:00.0"  # minor 2 is the first PCI address
    assert numa.gpu_bdf[4] == "0000:c8:00.0"


def test_each_capture_also_parses_alone():
    numa = parse_gpu_numa(read("grep-device-minor-8gpu.txt"))
    assert sorted(numa.gpu_bdf) == list(range(8))
    assert parse_gpu_numa(read("numa-node-cpulist-xeon-8470q.txt")).node_cpus[0][:2] == [0, 1]


def test_the_gpus_node_gives_the_cpuset():
    numa = xeon_8gpu()
    assert gpu_nodes(numa, [4, 5]) == [1]
    assert local_cpuset(numa, [4, 5]) == ("52-103,156-207", "1")
    assert local_cpuset(numa, [0, 7]) == ("0-207", "0-1")


def test_a_sysfs_link_names_the_gpu_when_the_driver_does_not():
    """The lab's stand-in nodes: /dev/nvidia1 is a ptp clock of a device behind a pxb-pcie
    expander; its /sys/dev/char link names that device."""
    numa = parse_gpu_numa(sections(
        node_cpus="/sys/devices/system/node/node0/cpulist:0\n"
                  "/sys/devices/system/node/node1/cpulist:1",
        char_devices="/dev/nvidia0|/sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0\n"
                     "/dev/nvidia1|/sys/devices/pci0000:20/0000:20:00.0/0000:21:00.0\n"
                     "/dev/nvidiactl|",
        pci_nodes="/sys/bus/pci/devices/0000:01:00.0/numa_node:-1\n"
                  "/sys/bus/pci/devices/0000:21:00.0/numa_node:1",
    ))
    assert numa.gpu_bdf == {0: "0000:01:00.0", 1: "0000:21:00.0"}
    assert local_cpuset(numa, [1]) == ("1", "1")
    assert local_cpuset(numa, [0]) is None  # the firmware gives no node: nothing to pin


def test_one_node_or_nothing_known_pins_nothing():
    assert local_cpuset(None, [0]) is None
    assert local_cpuset(GpuNuma(node_cpus={0: [0, 1]}), [0]) is None
    assert parse_gpu_numa("") == GpuNuma()


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]), ("1", [1]), ("", []), ("0,2-3", [0, 2, 3]),
])
def test_cpulists(text, cpus):
    assert parse_cpulist(text) == cpus
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize("bad", ["3-1", "a", "1;2", "-1"])
def test_bad_cpulists(bad):
    with pytest.raises(ValueError):
        parse_cpulist(bad)
