"""Declared containers checked against each Proxmox host's facts, before any change."""

from types import SimpleNamespace

import pytest

from gpunode.facts.gpu_numa import GpuNuma
from gpunode.facts.lxc import PveGuest
from gpunode.facts.node_read import NodeRead
from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing, parse_proc_devices
from gpunode.facts.snapshot import Snapshot
from gpunode.profile.container import ContainerSpecError
from gpunode.roles.lxc_gpu.validate import (
    ContainerDeployError,
    HostFacts,
    check_host_containers,
    validate_container_hosts,
)
from tests.unit.lxc._data import read

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def facts(**kw) -> HostFacts:
    base = dict(
        node="pve1",
        guests={
            100: PveGuest(100, "ct", "pve1", "pihole"),
            110: PveGuest(110, "ct", "pve1", "llm-a"),
            200: PveGuest(200, "vm", "pve2", "win11"),
        },
        majors=parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt")),
        devices=parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt")),
        driver="550.127.05",
    )
    return HostFacts(**{**base, **kw})


def item(**kw):
    return {"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE, "gpus": [0, 1], **kw}


def problems(raw, host_facts) -> list[str]:
    with pytest.raises(ContainerSpecError) as info:
        check_host_containers("pve1", raw, host_facts)
    return str(info.value).splitlines()


def test_valid_containers_come_back_as_specs():
    specs = check_host_containers("pve1", [item(), item(vmid=111, hostname="llm-b")], facts())
    assert [s.vmid for s in specs] == [110, 111]


def test_nothing_declared_is_fine_on_any_host():
    assert check_host_containers("web1", None, HostFacts(node=None)) == []
    assert check_host_containers("web1", [], HostFacts(node=None)) == []


def test_containers_on_a_host_without_proxmox_name_the_host():
    (line,) = problems([item()], HostFacts(node=None))
    assert line.startswith(
        "pve1: gpunode_containers (vmids) = [110]: pve1 is not a Proxmox VE host"
    )
    assert "remove gpunode_containers from pve1's data" in line


def test_vmid_of_another_guest_gpu_missing_and_unknown_key_all_reported():
    lines = problems(
        [item(vmid=100), item(vmid=200, hostname="llm-c", gpus=[8], gpu=1)], facts()
    )
    assert any("containers[0].vmid = 100: is already used by another guest named 'pihole'"
               in line for line in lines)
    assert any("containers[1].vmid = 200" in line and "win11 (VM on node pve2)" in line
               for line in lines)
    assert any("containers[1].gpus[0] = 8: no such GPU: the host has 8" in line for line in lines)
    assert any("containers[1].gpu" in line and "unknown key" in line for line in lines)


def test_passthrough_impossible_without_nvidia_uvm():
    majors = {k: v for k, v in facts().majors.items() if k != "nvidia-uvm"}
    (line,) = problems([item()], facts(majors=majors))
    assert "containers[0].gpus = [0, 1]: GPU passthrough is not possible" in line
    assert "modprobe nvidia-uvm" in line


def test_declared_driver_must_be_the_hosts():
    (line,) = problems([item(nvidia_driver="535.216.01")], facts())
    assert "containers[0].nvidia_driver = '535.216.01': the host runs 550.127.05" in line
    assert "set it to '550.127.05'" in line


def test_changes_proxmox_cannot_make_are_refused_before_any_change():
    config = "hostname: llm-a\nrootfs: local-lvm:vm-110-disk-0,size=128G\nunprivileged: 1\n"
    lines = problems([item(unprivileged=False)], facts(configs={110: config}))
    assert any("unprivileged is 1 but the spec says 0" in line for line in lines)
    assert any("rootfs is 128 GiB" in line for line in lines)


FACT_NAMES = {"PveGuests", "NvidiaDevices", "PveLxcConfigText", "PveVersionFact",
              "GpuNumaTopology"}


class FakeHost:
    def __init__(self, name, data, host_facts=None):
        self.name = name
        self.data = SimpleNamespace(get=data.get)
        self._facts = host_facts
        self.reads = 0

    def get_fact(self, cls, **kwargs):
        if cls is NodeRead:  # the one read: each part as the fact below answers it
            needs = kwargs["needs"]
            parts = {part.name: self.get_fact(part.fact, **dict(part.kwargs))
                     for part in needs.parts if part.fact.__name__ in FACT_NAMES}
            return Snapshot(parts=parts, driver_loaded=self._facts.driver)
        self.reads += 1
        f = self._facts
        name = cls.__name__
        if name == "PveGuests":
            if f.node is None:
                return None
            return {"node": f.node, "guests": {k: vars(g) for k, g in f.guests.items()}}
        if name == "NvidiaDevices":
            return {"majors": f.majors, "devices": [vars(d) for d in f.devices]}
        if name == "PveLxcConfigText":
            return f.configs.get(kwargs["vmid"])
        if name == "PveVersionFact":
            return {"present": f.pve_version is not None, "manager_version": f.pve_version}
        if name == "GpuNumaTopology":
            return f.numa
        raise AssertionError(name)


def test_all_hosts_are_validated_together_and_hosts_without_containers_not_read():
    web = FakeHost("web1", {}, HostFacts(node=None))
    plain = FakeHost("db1", {"gpunode_containers": [item()]}, HostFacts(node=None))
    pve = FakeHost("pve1", {"gpunode_containers": [item(gpus=[9])]}, facts())
    with pytest.raises(ContainerDeployError) as info:
        validate_container_hosts([web, plain, pve])
    text = str(info.value)
    assert "nothing was changed" in text
    assert "db1: gpunode_containers (vmids) = [110]: db1 is not a Proxmox VE host" in text
    assert "pve1: containers[0].gpus[0] = 9: no such GPU" in text
    assert web.reads == 0


def test_existing_container_config_is_read_for_the_checks():
    config = "hostname: llm-a\nrootfs: local-lvm:vm-110-disk-0,size=64G\nunprivileged: 1\n"
    pve = FakeHost("pve1", {"gpunode_containers": [item()]}, facts(configs={110: config}))
    assert [s.vmid for s in validate_container_hosts([pve])["pve1"]] == [110]


def test_locked_container_is_refused():
    config = (
        "hostname: llm-a\nlock: backup\nrootfs: local-lvm:vm-110-disk-0,size=64G\n"
        "unprivileged: 1\n"
    )
    (line,) = problems([item()], facts(configs={110: config}))
    assert "containers[0].vmid = 110: the container is locked (backup)" in line


TWO_NODES = GpuNuma(
    node_cpus={0: list(range(0, 52)) + list(range(104, 156)),
               1: list(range(52, 104)) + list(range(156, 208))},
)


def test_devn_keys_need_proxmox_8_2():
    lines = problems([item(gpu_passthrough="dev")], facts(pve_version="8.1.10"))
    assert lines == [
        "pve1: containers[0].gpu_passthrough = 'dev': pve-manager 8.1.10 has no devN keys "
        "(Proxmox VE 8.2 and later). Fix: use 'auto' or 'mount', or upgrade Proxmox VE"
    ]
    assert check_host_containers("pve1", [item(gpu_passthrough="dev")], facts(pve_version="8.2.4"))


def test_a_cpuset_is_checked_against_the_hosts_cpus_and_nodes():
    lines = problems(
        [item(cpuset_cpus="0-3,200-215", cpuset_mems="1-2")], facts(numa=TWO_NODES)
    )
    assert lines == [
        "pve1: containers[0].cpuset_cpus = '0-3,200-215': the host has no CPUs 208-215 "
        "(it has 0-207). Fix: use CPUs of 0-207, or 'auto'",
        "pve1: containers[0].cpuset_mems = '1-2': the host has no NUMA nodes 2 "
        "(it has 0-1). Fix: use NUMA nodes of 0-1, or 'auto'",
    ]
    ok = [item(cpuset_cpus="52-103", cpuset_mems="1")]
    assert check_host_containers("pve1", ok, facts(numa=TWO_NODES))


def test_a_gpu_index_missing_from_the_middle_is_named_with_the_indices_the_host_has():
    """GPU 1 fell off the bus (/dev/nvidia1 gone, 0 and 2..7 left): a container declaring
    GPU 1 is refused before any change, on its host, naming the field and the indices."""
    host_facts = facts(devices=[d for d in facts().devices if d.path != "/dev/nvidia1"])
    pve = FakeHost("pve1", {"gpunode_containers": [item(gpus=[1, 9])]}, host_facts)
    with pytest.raises(ContainerDeployError) as info:
        validate_container_hosts([pve])
    lines = str(info.value).splitlines()
    assert lines[0].endswith("(nothing was changed):")
    assert lines[1:] == [
        f"pve1: containers[0].gpus[{j}] = {n}: no such GPU: the host has 7 (indices 0, 2..7: "
        "/dev/nvidiaN). Fix: use indices 0, 2..7, or 'all'" for j, n in ((0, 1), (1, 9))
    ]
