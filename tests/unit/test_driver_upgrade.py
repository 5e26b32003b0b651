"""The driver upgrade's plan (roles/nvidia_driver/upgrade_plan.py) from real package sets,
its read's parsers (facts/driver_upgrade.py) and its script (driver-upgrade.sh.j2) as sh
reads it. Sources of tests/data/nvidia/: tests/data/SOURCES.md."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpunode.facts.boot_modules import BootModules, KernelTree
from gpunode.facts.driver_upgrade import (
    ContainerPackages,
    DriverUpgradeState,
    GpuHolder,
    driver_upgrade_command,
    holder_from_line,
    parse_driver_upgrade,
    parse_pct_status,
    parse_policy_versions,
)
from gpunode.ops.shell import script_text
from gpunode.profile.node import NodeProfile
from gpunode.roles.nvidia_driver.upgrade import script_variables
from gpunode.roles.nvidia_driver.upgrade_plan import new_version_of, plan_upgrade
from tests.unit.test_nvidia_driver import dpkg_query_view

APT = Path(__file__).parents[1] / "data" / "nvidia" / "apt"
CUDA_DEB12 = parse_policy_versions(
    (APT / "apt_cache_policy_nvidia_driver_cuda_repo_debian12_555_de.txt").read_text())
KERNEL = "6.1.0-21-amd64"
TREES = BootModules(kernels={KERNEL: KernelTree(nvidia_modules=[], build=True)})


def cuda_repo_state(installed: dict[str, str], **kw) -> DriverUpgradeState:
    """apt's table for every installed package: nvidia-driver's real one (the CUDA repository
    publishes each package of a release together: assumed for the others)."""
    table = CUDA_DEB12["nvidia-driver"]
    return DriverUpgradeState(versions={n: table for n in installed}, **kw)


def plan(installed, state, new="550.90.07", containers=(), drain="refuse", loaded=None,
         next_kernel=KERNEL, trees=TREES):
    return plan_upgrade(host="gpu1", new=new, installed=installed, state=state,
                        containers=list(containers), drain=drain, reboot=False, loaded=loaded,
                        running_kernel=KERNEL, next_kernel=next_kernel, trees=trees)


def test_policy_versions_real_cuda_repo_table_translated_labels():
    # German labels (Versionstabelle): the version lines are told by shape; the installed
    # 555.42.06-1 is offered by the repository too, so it stays.
    assert CUDA_DEB12["nvidia-driver"][:3] == ["560.28.03-1", "555.42.06-1", "555.42.02-1"]
    assert "545.23.08-1" in CUDA_DEB12["nvidia-driver"]


def test_policy_versions_real_fabricmanager_table():
    text = (APT / "apt_cache_policy_cuda_drivers_fabricmanager_ubuntu.txt").read_text()
    assert parse_policy_versions(text)["cuda-drivers-fabricmanager"] == [
        "550.54.14-1", "545.23.08-1", "545.23.06-1", "535.161.07-1", "535.154.05-1"]


def test_installed_only_version_is_no_way_back():
    text = ("libcuda1:\n  Installed: 525.147.05-4~deb12u1\n  Candidate: 525.147.05-4~deb12u1\n"
            "  Version table:\n *** 525.147.05-4~deb12u1 100\n        100 /var/lib/dpkg/status\n")
    assert parse_policy_versions(text) == {"libcuda1": []}


def test_cuda_repo_545_to_550_plan_value_by_value():
    installed = dpkg_query_view("dpkg_l_debian12_cuda_repo_545_toolkit.txt")
    p = plan(installed, cuda_repo_state(installed))
    assert p.refusals == []
    assert p.old == "545.23.08"
    names = {s.name for s in p.packages}
    assert "nvidia-driver" in names and "nvidia-container-toolkit" not in names
    assert all((s.old, s.new) == ("545.23.08-1", "550.90.07-1") for s in p.packages)
    assert "host nvidia-driver 545.23.08-1 -> 550.90.07-1" in p.lines()
    assert p.module_action == "none" and p.changes


def test_version_apt_does_not_offer_is_refused_naming_package_and_fix():
    installed = dpkg_query_view("dpkg_l_debian12_cuda_repo_545_toolkit.txt")
    p = plan(installed, cuda_repo_state(installed), new="560.35.03")
    assert any("apt offers no 560.35.03 for nvidia-driver" in r and "fix:" in r
               for r in p.refusals)


def test_debian_revision_kept_when_both_repos_offer_the_release():
    offered = ["535.183.01-1", "535.183.01-1~deb12u1"]
    assert new_version_of("525.147.05-4~deb12u1", offered, "535.183.01") == "535.183.01-1~deb12u1"
    assert new_version_of("545.23.08-1", offered, "535.183.01") == "535.183.01-1"


def test_debian_525_without_a_way_back_is_refused():
    installed = dpkg_query_view("dpkg_l_debian12_525_deb12u1.txt")
    state = DriverUpgradeState(versions={n: ["535.183.01-1~deb12u1"] for n in installed})
    p = plan(installed, state, new="535.183.01")
    assert any("no way back" in r for r in p.refusals)


def test_dkms_next_kernel_without_headers_refused():
    installed = {"nvidia-driver": "545.23.08-1", "nvidia-kernel-dkms": "545.23.08-1"}
    trees = BootModules(kernels={KERNEL: KernelTree(build=True),
                                 "6.1.0-22-amd64": KernelTree(build=False)})
    p = plan(installed, cuda_repo_state(installed), next_kernel="6.1.0-22-amd64", trees=trees)
    assert [m.role for m in p.modules] == ["running", "next"]
    assert any("6.1.0-22-amd64" in r and "headers" in r for r in p.refusals)


def test_gpu_processes_refused_then_drained_in_reverse_start_order():
    installed = {"libnvidia-ml1": "545.23.08-1"}
    cts = {v: ContainerPackages(status="running", read=True,
                                packages={"libnvidia-ml1": "545.23.08-1"},
                                versions={"libnvidia-ml1": CUDA_DEB12["nvidia-driver"]})
           for v in (101, 102, 103)}
    holders = [GpuHolder(pid=4242, command="vllm", container=101),
               GpuHolder(pid=4343, command="python3", container=103)]
    state = cuda_repo_state(installed, holders=holders, containers=cts)
    refused = plan(installed, state, containers=(101, 102, 103), loaded="545.23.08")
    assert any("GPU processes run" in r and "nvidia_driver_drain" in r for r in refused.refusals)
    assert refused.module_action == "pending reboot"
    drained = plan(installed, state, containers=(101, 102, 103), drain="stop-containers",
                   loaded="545.23.08")
    assert drained.refusals == [] and drained.stop == [103, 101]
    assert drained.module_action == "reload"
    assert "container 102 libnvidia-ml1 545.23.08-1 -> 550.90.07-1" in drained.lines()


def test_host_process_is_never_drained():
    installed = {"libnvidia-ml1": "545.23.08-1"}
    state = cuda_repo_state(installed, holders=[GpuHolder(pid=7, command="nvidia-persistenced")])
    p = plan(installed, state, drain="stop-containers")
    assert any("host processes hold" in r and "7 (nvidia-persistenced)" in r
               for r in p.refusals)


def test_stopped_container_refused_with_fix():
    installed = {"libnvidia-ml1": "545.23.08-1"}
    state = cuda_repo_state(installed, containers={105: ContainerPackages(status="stopped")})
    p = plan(installed, state, containers=(105,))
    assert any("container 105 is stopped" in r and "pct start 105" in r for r in p.refusals)


def test_pct_status_real_shapes():
    # pct status prints "status: running" / "status: stopped" (Proxmox VE pct(1)).
    assert parse_pct_status("status: running\n") == "running"
    assert parse_pct_status("Configuration file 'nodes/pve/lxc/999.conf' does not exist") == ""


@pytest.mark.parametrize(("line", "container"), [
    ("4242\tvllm\t0::/lxc/101/ns/system.slice/vllm.service", 101),  # Proxmox cgroup v2
    ("17\tnvidia-persisten\t0::/system.slice/nvidia-persistenced.service", None),
    ("99\tpython3\t0::/lxc.payload.102/init.scope", 102),
])
def test_holder_lines(line, container):
    holder = holder_from_line(line)
    assert holder is not None and holder.container == container


def test_read_runs_in_sh_and_parses():
    out = subprocess.run(["sh", "-c", driver_upgrade_command(("no-such-gpunode-pkg",), ())],
                         capture_output=True, text=True, check=True).stdout
    state = parse_driver_upgrade(out)
    assert state.previous is None and state.containers == {}


def test_settings_validated():
    assert NodeProfile(nvidia_driver_containers=[101, 102]).nvidia_driver_drain == "refuse"
    for bad in ([99], [101, 101], ["101; rm"]):
        with pytest.raises(ValueError):
            NodeProfile(nvidia_driver_containers=bad)
    with pytest.raises(ValueError):
        NodeProfile(nvidia_driver_drain="kill")


def test_script_parses_in_sh_and_quotes_every_value():
    installed = {"libnvidia-ml1": "545.23.08-1"}
    cts = {101: ContainerPackages(status="running", read=True, packages=installed,
                                  versions={"libnvidia-ml1": CUDA_DEB12["nvidia-driver"]})}
    state = cuda_repo_state(installed, containers=cts,
                            holders=[GpuHolder(pid=1, command="x", container=101)])
    p = plan(installed, state, containers=(101,), drain="stop-containers")
    text = script_text("driver-upgrade.sh.j2", **script_variables(p, KERNEL))
    subprocess.run(["sh", "-n", "-c", text], check=True)
    assert "libnvidia-ml1=550.90.07-1" in text and "libnvidia-ml1=545.23.08-1" in text
    assert "pct stop 101" in text and "pct reboot 101" in text
    assert text.index("pct start 101") < text.index("gn_ct_install 101 libnvidia-ml1=550")
