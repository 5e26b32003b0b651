"""'pending restart' is read from the live node: the declared lines against the LXC config
the running container was started with (/var/lib/lxc/VMID/config)."""

from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing, parse_proc_devices
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu.plan import (
    desired_lxc_lines,
    edit_config_text,
    parse_lxc_line,
    restart_reasons,
)
from tests.unit.lxc._data import read

BASE = (
    "arch: amd64\ncores: 8\nfeatures: nesting=1\nhostname: llm-a\nmemory: 32768\n"
    "net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,type=veth\n"
    "onboot: 1\nrootfs: local-lvm:vm-110-disk-0,size=64G\nswap: 0\nunprivileged: 1\n"
)


def host():
    return (
        parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt")),
        parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt")),
    )


def spec(**kw):
    return ContainerSpec(
        vmid=110,
        hostname="llm-a",
        ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
        gpus=[0],
        **kw,
    )


def started(entries) -> str:
    """What pct start writes: generated keys around the raw ones, as `key = value`."""
    raw = "".join(f"{k} = {v}\n" for k, v in entries)
    return "lxc.arch = amd64\nlxc.idmap = u 0 100000 65536\n" + raw + "lxc.net.0.type = veth\n"


def test_lxc_line_round_trip():
    assert parse_lxc_line("lxc.prlimit.memlock: unlimited") == ("lxc.prlimit.memlock", "unlimited")
    assert parse_lxc_line("lxc.mount.entry = /a a bind") == ("lxc.mount.entry", "/a a bind")


def test_started_with_every_line_needs_nothing_before_or_after_the_write():
    majors, nodes = host()
    s = spec()
    live = started(desired_lxc_lines(s, majors, nodes))
    converged = edit_config_text(BASE, s, majors, nodes)
    assert restart_reasons(s, converged, live, majors, nodes) == []


def test_a_refused_restart_stays_pending_on_the_next_run():
    majors, nodes = host()
    s = spec(memlock=68719476736)
    old = started(desired_lxc_lines(spec(), majors, nodes))  # started with 'unlimited'
    converged = edit_config_text(BASE, s, majors, nodes)
    for config in (BASE, converged):  # before the write, and on every run after it
        reasons = restart_reasons(s, config, old, majors, nodes)
        assert reasons == [
            "not live yet: lxc.prlimit.memlock: 68719476736",
            "still live, no longer declared: lxc.prlimit.memlock: unlimited",
        ]


def test_extra_lines_count_and_user_lines_of_the_live_config_are_not_stale():
    majors, nodes = host()
    s = spec(extra_lxc=["lxc.cgroup2.devices.allow: c 226:* rwm"])
    live = started(
        desired_lxc_lines(s, majors, nodes)
        + [("lxc.mount.entry", "/dev/dri dev/dri none bind,optional,create=dir")]
    )
    reasons = restart_reasons(s, edit_config_text(BASE, s, majors, nodes), live, majors, nodes)
    assert reasons == ["not live yet: lxc.cgroup2.devices.allow: c 226:* rwm"]


def test_options_pending_or_to_be_parked():
    majors, nodes = host()
    s = spec(features="nesting=1,keyctl=1")
    live = started(desired_lxc_lines(s, majors, nodes))
    converged = edit_config_text(BASE, s, majors, nodes)
    # Before pct set: features would be parked (not hot-pluggable).
    assert restart_reasons(s, converged, live, majors, nodes) == [
        "options waiting in [pve:pending]: features"
    ]
    parked = converged + "\n[pve:pending]\nfeatures: keyctl=1,nesting=1\nmemory: 65536\n"
    assert restart_reasons(s, parked, live, majors, nodes) == [
        "options waiting in [pve:pending]: features, memory"
    ]


def test_unreadable_live_config_falls_back_to_would_the_file_change():
    majors, nodes = host()
    s = spec()
    assert restart_reasons(s, BASE, None, majors, nodes) == [
        "its lxc.* lines change (/var/lib/lxc/VMID/config unreadable)"
    ]
    converged = edit_config_text(BASE, s, majors, nodes)
    assert restart_reasons(s, converged, None, majors, nodes) == []
