"""ContainerSpec schema, validate_containers errors, and pct command construction."""

import pytest
from pydantic import ValidationError

from gpunode.facts import pve_config as pc
from gpunode.profile.container import (
    ContainerSpec,
    ContainerSpecError,
    immutable_mismatches,
    parse_property_string,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
    validate_containers,
)
from tests.unit.lxc._data import read

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def spec(**kw):
    base = {"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE}
    return ContainerSpec(**{**base, **kw})


def test_defaults():
    s = spec()
    assert (s.unprivileged, s.gpus, s.memlock, s.restart_allowed) == (
        True,
        "all",
        "unlimited",
        False,
    )
    assert s.net0 == "name=eth0,bridge=vmbr0,ip=dhcp"
    assert s.gpu_indices is None
    assert spec(gpus=[3, 1]).gpu_indices == [1, 3]


def test_every_field_is_documented():
    for name, info in ContainerSpec.model_fields.items():
        assert info.description and len(info.description) > 20, name


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vmid", 99),
        ("vmid", 1_000_000_000),
        ("vmid", "110"),
        ("vmid", True),
        ("hostname", "llm_a"),
        ("hostname", "-llm"),
        ("hostname", "a" * 64),
        ("hostname", "llm.example.com"),
        ("ostemplate", "debian-12.tar.zst"),
        ("ostemplate", "local:iso/debian.iso"),
        ("cores", 0),
        ("memory", 8),
        ("swap", -1),
        ("rootfs_storage", "bad storage"),
        ("rootfs_size_gb", 0),
        ("net0", "bridge=vmbr0,ip=dhcp"),
        ("net0", "name=eth0,colour=blue"),
        ("features", "nesting=1,wings=1"),
        ("gpus", "some"),
        ("gpus", []),
        ("gpus", [0, 0]),
        ("gpus", [-1]),
        ("gpus", [True]),
        ("memlock", "lots"),
        ("memlock", 0),
        ("extra_lxc", ["not an lxc line"]),
        ("extra_lxc", ["lxc.rootfs.path: /srv/x"]),
        ("extra_lxc", ["lxc.made.up: 1"]),
        ("extra_lxc", ["lxc.prlimit.memlock: unlimited"]),
        ("extra_lxc", ["lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind"]),
        ("nvidia_driver", "latest"),
        ("colour", "blue"),
    ],
)
def test_bad_values_are_rejected(field, value):
    with pytest.raises(ValidationError):
        spec(**{field: value})


def test_good_values_are_accepted():
    s = spec(
        hostname="LLM-01",
        ostemplate="nfs-templates:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.gz",
        gpus=[0, 7],
        memlock=68719476736,
        extra_lxc=[
            "lxc.cgroup2.devices.allow: c 10:200 rwm",
            "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file",
            "lxc.apparmor.profile: unconfined",
        ],
        i_know=["lxc.apparmor.profile"],  # unconfined is allowed when said (issue 28.7)
        nvidia_driver="550.127.05",
        net0="name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1,tag=20,firewall=1",
    )
    assert s.extra_lxc_entries[1] == (
        "lxc.mount.entry",
        "/dev/net/tun dev/net/tun none bind,create=file",
    )


# --- validate_containers ---------------------------------------------------------


def good(**kw):
    return {"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE, **kw}


def test_validate_returns_specs():
    specs = validate_containers("pve1", [good(), good(vmid=111, hostname="llm-b")], {}, 8)
    assert [s.vmid for s in specs] == [110, 111]


def test_existing_vmid_with_same_hostname_is_this_container():
    assert validate_containers("pve1", [good()], {110: "llm-a"}, 2)[0].vmid == 110


def test_vmid_in_use_by_another_container():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [good(), good(vmid=101, hostname="b")], {101: "pihole"}, 2)
    message = str(err.value)
    assert err.value.host == "pve1"
    assert err.value.field == "containers[1].vmid"
    assert message.startswith("pve1: containers[1].vmid = 101: ")
    assert "'pihole'" in message and "pick a free vmid (e.g. 100)" in message


def test_gpu_index_the_host_lacks():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("gpu-node-3", [good(gpus=[0, 4])], {}, 4)
    assert str(err.value) == (
        "gpu-node-3: containers[0].gpus[1] = 4: no such GPU: the host has 4 (indices 0..3: "
        "/dev/nvidiaN). Fix: use indices 0..3, or 'all'"
    )


def test_host_without_gpus():
    with pytest.raises(ContainerSpecError, match=r"containers\[0\]\.gpus = 'all': the host has no"):
        validate_containers("pve1", [good()], {}, 0)


def test_unknown_key_names_the_allowed_ones():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [good(), good(vmid=111, hostname="b", gpu=[0])], {}, 2)
    problem = err.value.problems[0]
    assert problem.field == "containers[1].gpu"
    assert problem.value == [0]
    assert problem.problem == "unknown key"
    assert "gpus" in problem.fix and "memlock" in problem.fix


def test_item_errors_point_at_the_item():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers(
            "pve1",
            [good(gpus=[0, "1"], extra_lxc=["lxc.idmap: u 0 100000 65536", "lxc.rootfs.path: /x"])],
            {},
            2,
        )
    fields = {p.field: p for p in err.value.problems}
    assert fields["containers[0].gpus[1]"].value == "1"
    assert fields["containers[0].extra_lxc[1]"].value == "lxc.rootfs.path: /x"
    assert "generated by Proxmox" in fields["containers[0].extra_lxc[1]"].problem


def test_missing_required_field_and_all_problems_at_once():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [{"vmid": 110, "hostname": "x"}, good(vmid=5)], {}, 1)
    fields = [p.field for p in err.value.problems]
    assert fields == ["containers[0].ostemplate", "containers[1].vmid"]
    assert "is required" in str(err.value)
    assert "pveam list local" in str(err.value)


def test_duplicates_within_the_declaration():
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [good(), good(), good(vmid=112)], {}, 1)
    assert [p.field for p in err.value.problems] == [
        "containers[1].vmid",
        "containers[1].hostname",
        "containers[2].hostname",
    ]


@pytest.mark.parametrize("raw", [{"vmid": 1}, "containers", [42]])
def test_wrong_shapes(raw):
    with pytest.raises(ContainerSpecError):
        validate_containers("pve1", raw, {}, 1)


def test_no_containers_is_fine():
    assert validate_containers("pve1", None, {}, 0) == []


def test_error_is_a_value_error():
    assert issubclass(ContainerSpecError, ValueError)


# --- pct command lines -----------------------------------------------------------


def test_pct_create_args():
    assert pct_create_args(spec(cores=16, memory=65536, rootfs_size_gb=100)) == [
        "pct", "create", "110", TEMPLATE,
        "--hostname", "llm-a",
        "--cores", "16",
        "--memory", "65536",
        "--swap", "0",
        "--rootfs", "local-lvm:100",
        "--net0", "name=eth0,bridge=vmbr0,ip=dhcp",
        "--unprivileged", "1",
        "--features", "nesting=1",
        "--onboot", "1",
        "--start", "0",
    ]  # fmt: skip


def _current(name):
    return pc.main_options(pc.parse_pve_lxc_config(read(name)))


def _spec_matching_composed():
    return spec(cores=16, memory=65536, swap=0, rootfs_size_gb=64)


def test_pct_set_nothing_when_converged():
    current = _current("composed-gpu-pending-snapshots-110.conf")
    assert pct_set_args(_spec_matching_composed(), current) == []
    assert pct_resize_args(_spec_matching_composed(), current) == []
    assert immutable_mismatches(_spec_matching_composed(), current) == []


def test_pct_set_only_what_differs_and_keeps_the_mac():
    current = _current("composed-gpu-pending-snapshots-110.conf")
    s = spec(
        cores=32, memory=65536, swap=0, rootfs_size_gb=64, net0="name=eth0,bridge=vmbr1,ip=dhcp"
    )
    assert pct_set_args(s, current) == [
        "pct", "set", "110",
        "--cores", "32",
        "--net0", "name=eth0,bridge=vmbr1,ip=dhcp,hwaddr=BC:24:11:5E:7A:01",
    ]  # fmt: skip


def test_pct_set_on_a_real_helper_script_container():
    current = _current("frigate-7640-102.conf")
    s = spec(
        vmid=102, hostname="docker", cores=2, memory=2048, swap=512, features="nesting=1,keyctl=1"
    )
    # net0 has hwaddr and type=veth added by Proxmox: not a difference. features order
    # doesn't matter either.
    assert pct_set_args(s, current) == []
    assert pct_set_args(spec(vmid=102, hostname="docker2", cores=2, memory=2048, swap=512,
                             features="nesting=1", onboot=False), current) == [
        "pct", "set", "102",
        "--hostname", "docker2",
        "--features", "nesting=1",
        "--onboot", "0",
    ]  # fmt: skip


def test_swap_absent_means_proxmox_default_512():
    assert (
        pct_set_args(
            spec(swap=512),
            {
                "hostname": "llm-a",
                "cores": "8",
                "memory": "32768",
                "net0": "name=eth0,bridge=vmbr0,ip=dhcp",
                "features": "nesting=1",
                "onboot": "1",
            },
        )
        == []
    )


def test_resize_grows_and_shrink_is_a_mismatch():
    current = {"rootfs": "local-lvm:vm-110-disk-0,size=64G", "unprivileged": "1"}
    assert pct_resize_args(spec(rootfs_size_gb=128), current) == [
        "pct", "resize", "110", "rootfs", "128G",
    ]  # fmt: skip
    problems = immutable_mismatches(spec(rootfs_size_gb=32), current)
    assert len(problems) == 1 and "can't shrink" in problems[0]
    assert pct_resize_args(spec(rootfs_size_gb=32), current) == []


def test_unprivileged_cannot_change():
    problems = immutable_mismatches(spec(), _current("pve-container-rollback-105.conf"))
    assert any("unprivileged is 0" in p for p in problems)


def test_property_string():
    assert parse_property_string("name=eth0,bridge=vmbr0,,firewall") == {
        "name": "eth0",
        "bridge": "vmbr0",
        "firewall": "",
    }


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("net0", "name=eth0,bridge=vmbr0,ip=dhcp;reboot",
         "net0 ip='dhcp;reboot' is not an IPv4 address/prefix or dhcp, manual"),
        ("net0", "name=eth0,bridge=vmbr0 ,ip=10.0.0.5", "is not an IPv4 address/prefix"),
        ("net0", "name=eth0,tag=5000", "net0 tag='5000' is not an integer from 1 to 4094"),
        ("net0", "name=$(id),bridge=vmbr0", "is not an interface name"),
        ("features", "nesting=yes", "feature nesting='yes' is not 0 or 1"),
        ("features", "mount=nfs`id`", "feature mount="),
        ("ostemplate", "local:vztmpl/$(id).tar.zst", "must be 'STORAGE:vztmpl/FILE.tar.zst'"),
        ("hostname", "llm-a\n", "holds a line break"),
        ("rootfs_storage", "local-lvm\n", "holds a line break"),
        ("nvidia_driver", "550.127.05\n", "holds a line break"),
        ("memory", 1 << 40, "less than or equal to"),
        ("extra_lxc", ["lxc.mount.entry: /dev/../dev/nvidia0 dev/nvidia0 none bind"],
         "'/dev/../dev/nvidia0' is not a mount source"),
        ("extra_lxc", ["lxc.cap.drop: x\nlxc.hook.start: /bin/sh"], "holds a line break"),
        ("extra_lxc", ["lxc.cgroup2.devices.allow: c 1:1 rwm; id"], "is not a lxc.cgroup2"),
    ],
)
def test_hostile_container_values_name_host_field_and_value(field, value, fragment):
    raw = {"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE, field: value}
    with pytest.raises(ContainerSpecError) as error:
        validate_containers("pve1", [raw], {}, 8)
    message = str(error.value)
    assert f"pve1: containers[0].{field}" in message
    assert fragment in message


def test_hook_lines_are_accepted_and_named_for_the_dry_run():
    s = spec(extra_lxc=["lxc.hook.pre-start: /usr/local/bin/gpu-check"])
    assert s.hook_note == (" (extra_lxc lxc.hook.pre-start: runs commands as root on this "
                           "Proxmox host)")
    assert spec().hook_note == ""


def test_real_net0_values_pass():
    for net0 in ["name=eth0,bridge=vmbr0,firewall=1,gw=192.168.1.1,hwaddr=BC:24:11:5E:7A:01,"
                 "ip=192.168.1.50/24,ip6=auto,tag=20,type=veth,mtu=9000",
                 "name=eth1,bridge=vmbr1,ip=manual,ip6=fd00::5/64,gw6=fd00::1,rate=125,"
                 "trunks=10;20-30,link_down=0"]:
        assert spec(net0=net0).net0 == net0
