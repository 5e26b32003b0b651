"""cgroup v2 only (Proxmox VE 9 has no cgroup v1): gpunode never writes lxc.cgroup.* lines, and
a container config that has them is reported with the lxc.cgroup2.* line to write instead."""

import pytest

from gpunode.facts import pve_config as pc
from gpunode.facts.proxmox import PveVersion
from gpunode.profile.container import cgroup_v1_fix, parse_extra_lxc_line
from gpunode.roles.audit.system_checks import check_containers
from gpunode.roles.lxc_gpu.plan import plan_container
from tests.unit.audit._nodes import gpu_container
from tests.unit.audit.test_rules import bare
from tests.unit.lxc._data import ALL_CONFIGS, read
from tests.unit.lxc.test_plan import host, spec

V1 = [("lxc.cgroup.devices.allow", "c 195:* rwm"), ("lxc.cgroup.devices.allow", "c 235:* rwm")]


def test_cgroup_v1_lines_of_a_real_config():
    config = pc.parse_pve_lxc_config(read("cgroup-v1-note-102.conf"))
    assert pc.cgroup_v1_entries(config) == V1


@pytest.mark.parametrize("name", [n for n in ALL_CONFIGS if n != "cgroup-v1-note-102.conf"])
def test_cgroup_v2_configs_have_no_v1_lines(name):
    assert pc.cgroup_v1_entries(pc.parse_pve_lxc_config(read(name))) == []


def test_the_fix_names_the_v2_line():
    assert cgroup_v1_fix(*V1[0]) == "write it as 'lxc.cgroup2.devices.allow: c 195:* rwm'"
    assert "lxc.cgroup2.memory.max: 1073741824" in cgroup_v1_fix(
        "lxc.cgroup.memory.limit_in_bytes", "1073741824")
    assert "lxc.cgroup2.cpu.weight" in cgroup_v1_fix("lxc.cgroup.cpu.shares", "512")
    assert "lxc.cgroup2.*" in cgroup_v1_fix("lxc.cgroup.freezer.state", "THAWED")


def test_extra_lxc_refuses_cgroup_v1_keys():
    with pytest.raises(ValueError, match=r"cgroup v1 key.*lxc\.cgroup2\.devices\.allow: c 10:200"):
        parse_extra_lxc_line("lxc.cgroup.devices.allow: c 10:200 rwm")
    assert parse_extra_lxc_line("lxc.cgroup2.devices.allow: c 10:200 rwm")[0] == (
        "lxc.cgroup2.devices.allow")


def test_gpunode_emits_no_cgroup_v1_line():
    majors, nodes = host()
    plan = plan_container(spec(gpus="all"), None, False, majors, nodes)
    assert plan.append_lines
    assert not [line for line in plan.append_lines if line.startswith("lxc.cgroup.")]


def test_plan_warns_and_keeps_the_users_v1_lines():
    majors, nodes = host()
    text = "arch: amd64\nhostname: llm-a\nunprivileged: 1\n" + read("cgroup-v1-note-102.conf")
    plan = plan_container(spec(), text, False, majors, nodes)
    (warning,) = plan.warnings
    assert "container 110" in warning and "cgroup v1" in warning
    assert "'lxc.cgroup2.devices.allow: c 195:* rwm'" in warning
    assert plan.new_config_text is not None
    assert pc.cgroup_v1_entries(pc.parse_pve_lxc_config(plan.new_config_text)) == V1


def test_audit_reports_v1_lines_with_the_fix():
    text = "arch: amd64\nhostname: llm-a\n" + read("cgroup-v1-note-102.conf")
    ct = gpu_container(text, "stopped", None)
    assert ct.cgroup_v1 == V1
    checks = check_containers(bare(containers=[ct], driver_loaded="550.54.15",
                                   pve=PveVersion(present=True)))
    (legacy,) = [c for c in checks if c.kind == "container cgroup v1 lines"]
    assert legacy.status == "P1"
    assert legacy.live == "lxc.cgroup.devices.allow: c 195:* rwm; " \
        "lxc.cgroup.devices.allow: c 235:* rwm"
    assert "lxc.cgroup2.devices.allow: c 235:* rwm" in legacy.fix
    assert "pct reboot 110" in legacy.fix


def test_audit_reports_v1_lines_of_a_container_without_gpu():
    ct = gpu_container("arch: amd64\nlxc.cgroup.cpuset.cpus: 0-3\n", "running", None)
    checks = check_containers(bare(containers=[ct], pve=PveVersion(present=True)))
    assert [c.status for c in checks] == ["n/a", "P1"]
    assert "lxc.cgroup2.cpuset.cpus: 0-3" in checks[1].fix
