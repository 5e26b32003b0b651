"""The per-container plan: create, converge, and the restart / 'pending restart' rule."""

from gpunode.facts import pve_config as pc
from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing, parse_proc_devices
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu.plan import edit_config_text, plan_container
from tests.unit.lxc._data import read

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def host():
    majors = parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt"))
    nodes = parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt"))
    return majors, nodes


def spec(**kw):
    base = {
        "vmid": 110,
        "hostname": "llm-a",
        "ostemplate": TEMPLATE,
        "cores": 16,
        "memory": 65536,
        "swap": 0,
        "rootfs_size_gb": 64,
        "gpus": [0],
    }
    return ContainerSpec(**{**base, **kw})


def test_absent_container_is_created_with_its_lines_then_started():
    majors, nodes = host()
    plan = plan_container(
        spec(extra_lxc=["lxc.cgroup2.devices.allow: c 10:200 rwm"]), None, False, majors, nodes
    )
    assert plan.create[:3] == ["pct", "create", "110"]
    assert plan.append_lines[0] == "lxc.cgroup2.devices.allow: c 195:0 rwm"
    assert plan.append_lines[-2:] == [
        "lxc.prlimit.memlock: unlimited",
        "lxc.cgroup2.devices.allow: c 10:200 rwm",
    ]
    assert plan.start and plan.status == "changed"


def _converged_text(s):
    majors, nodes = host()
    return edit_config_text(read("composed-gpu-pending-snapshots-110.conf"), s, majors, nodes)


def test_converged_container_plans_nothing():
    majors, nodes = host()
    s = spec()
    text = _converged_text(s)
    plan = plan_container(
        s, text.replace("\n[pve:pending]\nmemory: 98304\n", ""), True, majors, nodes
    )
    assert not plan.changes
    assert plan.status == "ok"


def test_running_container_with_changed_lines_reports_pending_restart():
    majors, nodes = host()
    text = read("composed-gpu-pending-snapshots-110.conf")
    plan = plan_container(spec(), text, True, majors, nodes)
    assert plan.new_config_text is not None
    assert plan.restart == []
    assert plan.status == "pending restart"
    # The edit kept the snapshot and the pending section byte for byte.
    tail = text[text.index("\n[pve:pending]") :]
    assert plan.new_config_text.endswith(tail)


def test_running_container_restarts_when_allowed():
    majors, nodes = host()
    plan = plan_container(
        spec(restart_allowed=True),
        read("composed-gpu-pending-snapshots-110.conf"),
        True,
        majors,
        nodes,
    )
    assert plan.restart == ["pct", "reboot", "110"]
    assert plan.status == "changed"


def test_stopped_container_needs_no_restart():
    majors, nodes = host()
    plan = plan_container(
        spec(), read("composed-gpu-pending-snapshots-110.conf"), False, majors, nodes
    )
    assert plan.new_config_text is not None and not plan.restart and not plan.pending_restart


def test_options_already_pending_are_reported_even_without_our_changes():
    majors, nodes = host()
    s = spec()
    text = _converged_text(s)  # still has [pve:pending] memory: 98304
    plan = plan_container(s, text, True, majors, nodes)
    assert plan.new_config_text is None and plan.set_args == []
    assert plan.status == "pending restart"


def test_feature_change_on_running_container_parks_in_pending():
    majors, nodes = host()
    s = spec(features="nesting=1,keyctl=1")
    text = _converged_text(s).replace("\n[pve:pending]\nmemory: 98304\n", "")
    plan = plan_container(s, text, True, majors, nodes)
    assert plan.set_args == ["pct", "set", "110", "--features", "nesting=1,keyctl=1"]
    assert plan.status == "pending restart"


def test_immutable_mismatch_stops_the_plan():
    majors, nodes = host()
    plan = plan_container(
        spec(unprivileged=False),
        read("composed-gpu-pending-snapshots-110.conf"),
        False,
        majors,
        nodes,
    )
    assert plan.status == "error" and not plan.changes


def test_applying_the_edit_twice_changes_nothing():
    majors, nodes = host()
    s = spec(gpus="all", extra_lxc=["lxc.cgroup2.devices.allow: c 10:200 rwm"])
    for name in (
        "pve-container-rollback-105.conf",
        "pupman-idmap-snapshot-100.conf",
        "helper-scripts-frigate-100.conf",
    ):
        once = edit_config_text(read(name), s, majors, nodes)
        assert edit_config_text(once, s, majors, nodes) == once
        assert pc.get(pc.parse_pve_lxc_config(once), "lxc.prlimit.memlock") == "unlimited"
