"""The container role's decisions: driver version match or refusal, the install line, the
read-back checks, and which inventory hosts are containers."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import OperationError
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

import gpunode.roles.container.ops as ops
from gpunode.facts.apt_sources import parse_apt_update_log, parse_sources_list
from gpunode.ops.apt import APT_UPDATE_COMMAND
from gpunode.roles.container.defaults import DEFAULT_PACKAGES, ContainerSettings
from gpunode.roles.container.facts import (
    CONTAINER_GPU_STATE_COMMAND,
    AptVersions,
    parse_apt_madison,
    parse_container_gpu_state,
)
from gpunode.roles.container.inventory import (
    container_target,
    declared_specs,
    validate_container_targets,
)
from gpunode.roles.container.plan import container_checks, install_command, userspace_plan
from gpunode.roles.lxc_gpu.validate import ContainerDeployError

DATA = Path(__file__).resolve().parents[2] / "data"

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages"
DEBIAN = "http://deb.debian.org/debian bookworm/non-free"
MADISON = f"""\
nvidia-smi | 550.163.01-1 | {CUDA}
nvidia-smi | 550.127.05-1 | {CUDA}
nvidia-smi | 535.216.01-1~deb12u1 | {DEBIAN} amd64 Packages
nvidia-graphics-drivers | 535.216.01-1~deb12u1 | {DEBIAN} Sources
  libcuda1 | 535.216.01-1~deb12u1 | {DEBIAN} amd64 Packages
"""


def test_madison():
    assert parse_apt_madison(MADISON) == {
        "nvidia-smi": ["550.163.01-1", "550.127.05-1", "535.216.01-1~deb12u1"],
        "libcuda1": ["535.216.01-1~deb12u1"],
    }
    assert AptVersions().command(["nvidia-smi", "libcuda1"]) == (
        "apt-cache madison nvidia-smi libcuda1 2>/dev/null; true"
    )


def test_installed_at_the_host_version_is_converged():
    installed = {p: "550.127.05-1" for p in DEFAULT_PACKAGES}
    assert userspace_plan("ct", "550.127.05", DEFAULT_PACKAGES, installed, {}).ok


def test_installable_when_apt_offers_the_version_for_every_package():
    available = {p: ["550.163.01-1", "550.127.05-1"] for p in DEFAULT_PACKAGES}
    plan = userspace_plan("ct", "550.127.05", DEFAULT_PACKAGES, {}, available)
    assert not plan.ok and plan.refusal is None


def test_refusal_names_container_host_version_and_what_apt_offers():
    available = parse_apt_madison(MADISON)
    plan = userspace_plan(
        "CT 110 (llm-a) on pve1", "550.127.05", ["nvidia-smi", "libcuda1"], {}, available
    )
    assert plan.refusal is not None
    assert plan.refusal.startswith(
        "CT 110 (llm-a) on pve1: refusing to install the NVIDIA userspace driver: the Proxmox "
        "host runs 550.127.05"
    )
    assert "offers no 550.127.05 for libcuda1: 535.216.01." in plan.refusal
    assert "nvidia-smi:" not in plan.refusal  # it does offer that one
    empty = userspace_plan("ct", "550.127.05", ["libcuda1"], {}, {})
    assert "libcuda1: nothing" in (empty.refusal or "")


def test_install_line_pins_every_package_without_recommends():
    command = install_command(["nvidia-smi", "libcuda1"], "550.127.05").get_raw_value()
    assert command == (
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "--allow-downgrades --allow-change-held-packages "
        "'nvidia-smi=550.127.05-*' 'libcuda1=550.127.05-*'"
    )


def test_refusal_after_a_fresh_look_when_executing(monkeypatch):
    """At execution: apt-get update runs first, then the second look refuses."""
    facts = {
        "node_read.NodeRead": {"parts": {"apt_versions": {"libcuda1": ["535.216.01-1~deb12u1"]}}},
        "facts.AptVersions": {"packages=['libcuda1']": {"libcuda1": ["535.216.01-1~deb12u1"]}},
        "apt_sources.AptUpdateLog": {"rc": 0, "problems": [], "tail": []},
    }
    state = FakeState()
    monkeypatch.setattr(state, "is_executing", True, raising=False)
    host = create_host(state, facts=facts)
    commands = []
    with ctx_state.use(state), ctx_host.use(host), pytest.raises(OperationError) as info:
        for command in ops.nvidia_userspace._inner("550.127.05", ["libcuda1"], "CT 110"):
            commands.append(command.get_raw_value())
    assert commands == [APT_UPDATE_COMMAND]
    assert "CT 110: refusing" in str(info.value) and "libcuda1: 535.216.01" in str(info.value)


def test_refusal_names_a_rejected_repository_signature(monkeypatch):
    """The CUDA repository's SHA1-bound key rejected by apt 3 (a real apt-get update, see
    tests/data/apt): the refusal says so, with the repository, its file and the fix."""
    log = (DATA / "apt" / "apt_update_sqv_sha1_cuda_ubuntu2404.txt").read_text()
    result = parse_apt_update_log(log + "gpunode-apt-update-rc=100\n")
    source = "deb [signed-by=/k.gpg] https://developer.download.nvidia.com/compute/cuda/repos/" \
        "ubuntu2404/x86_64/ /\n"
    facts = {
        "node_read.NodeRead": {"parts": {"apt_versions": {}}},
        "facts.AptVersions": {"packages=['libcuda1']": {}},
        "apt_sources.AptUpdateLog": result.to_json(),
        "apt_sources.AptSources": [s.to_json() for s in parse_sources_list(
            source, "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list")],
    }
    state = FakeState()
    monkeypatch.setattr(state, "is_executing", True, raising=False)
    host = create_host(state, facts=facts)
    with ctx_state.use(state), ctx_host.use(host), pytest.raises(OperationError) as info:
        list(ops.nvidia_userspace._inner("550.127.05", ["libcuda1"], "CT 110"))
    message = str(info.value)
    assert "CT 110: refusing" in message
    assert ("apt rejects the signature of https://developer.download.nvidia.com/compute/cuda/"
            "repos/ubuntu2404/x86_64 (defined in /etc/apt/sources.list.d/"
            "cuda-ubuntu2404-x86_64.list, key EB693B3035CD5710E231E123A4B469963BF863CC): SHA1 "
            "is not considered secure since 2026-02-01T00:00:00Z") in message
    assert "debian13" in message


STATE_OK = """== smi
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a1b)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2c3d)
rc=0
== memlock
unlimited
== init
Max locked memory         unlimited            unlimited            bytes
== nodes
character special file|c3|0|/dev/nvidia0
character special file|c3|1|/dev/nvidia1
character special file|c3|ff|/dev/nvidiactl
character special file|1fe|0|/dev/nvidia-uvm
== module
NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024
GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)
"""

STATE_MISMATCH = """== smi
Failed to initialize NVML: Driver/library version mismatch
NVML library version: 550.163
rc=18
== memlock
8192
== init
Max locked memory         8388608              8388608              bytes
== nodes
character special file|c3|0|/dev/nvidia0
== module
NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024
"""


def test_gpu_state_parser():
    state = parse_container_gpu_state(STATE_OK)
    assert state["smi_rc"] == 0 and len(state["gpus"]) == 2
    assert state["memlock"] == "unlimited" and state["init_memlock"] == "unlimited"
    assert [n["path"] for n in state["nodes"]][:2] == ["/dev/nvidia-uvm", "/dev/nvidia0"]
    assert state["module_version"] == "550.127.05"
    assert "ulimit -l" in CONTAINER_GPU_STATE_COMMAND
    assert "nvidia-smi -L" in CONTAINER_GPU_STATE_COMMAND


def test_checks_all_ok():
    state = parse_container_gpu_state(STATE_OK)
    installed = {"nvidia-smi": "550.127.05-1", "libcuda1": "550.127.05-1"}
    checks = container_checks(state, None, "550.127.05", installed)
    assert [(c.name, c.status) for c in checks] == [
        ("container GPUs", "ok"),
        ("container memlock", "ok"),
        ("container NVIDIA userspace", "ok"),
    ]
    assert checks[0].live == "nvidia-smi lists 2"


def test_checks_mismatch_memlock_and_count():
    state = parse_container_gpu_state(STATE_MISMATCH)
    installed = {"nvidia-smi": "550.163.01-1"}
    gpus, memlock, driver = container_checks(state, None, None, installed)
    assert gpus.status == "P0" and "Driver/library version mismatch" in gpus.live
    assert memlock.status == "P1" and memlock.pending == "restart"
    assert memlock.live == "ulimit -l 8192; init 8388608"
    assert driver.status == "P0" and (driver.live, driver.want) == ("550.163.01", "550.127.05")
    # nvidia-smi works but lists fewer GPUs than were passed.
    ok_state = parse_container_gpu_state(STATE_OK)
    (count, *_) = container_checks(ok_state, 4, "550.127.05", {})
    assert count.status == "P0" and count.live == "nvidia-smi lists 2"


def test_memlock_lowered_by_a_login_limit_says_so():
    state = parse_container_gpu_state(STATE_OK.replace("== memlock\nunlimited", "== memlock\n64"))
    memlock = container_checks(state, None, "550.127.05", {})[1]
    assert memlock.status == "P1" and "limits.d" in memlock.fix


def h(name, **data):
    return SimpleNamespace(name=name, data=SimpleNamespace(get=data.get))


TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
PVE = h(
    "pve1",
    ssh_hostname="10.0.0.5",
    gpunode_containers=[
        {"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE, "gpus": [0, 1]},
        {"vmid": 111, "hostname": "llm-b", "ostemplate": TEMPLATE, "nvidia_driver": "550.127.05"},
        {"vmid": 112, "hostname": "bad", "ostemplate": "nope"},
    ],
)


def test_declared_specs_skip_malformed_items():
    specs = declared_specs([PVE, h("web1")])
    assert [s.vmid for s in specs["pve1"]] == [110, 111]


def test_pct_container_takes_gpu_count_and_driver_from_its_hosts_spec():
    specs = declared_specs([PVE])
    hosts = {"pve1": PVE}
    a = container_target("@pct/pve1:110", h("", pct_vmid=110, ssh_hostname="pve1").data,
                         specs, hosts)
    assert (a.expected_gpus, a.declared_driver, a.label) == (2, None, "CT 110 (llm-a) on pve1")
    b = container_target("@pct/10.0.0.5:111", h("", pct_vmid=111, ssh_hostname="10.0.0.5").data,
                         specs, hosts)
    assert (b.expected_gpus, b.declared_driver) == (None, "550.127.05")  # gpus: all
    ssh = container_target("llm-c", h("", gpunode_container={"gpus": 1}).data, specs, hosts)
    assert (ssh.expected_gpus, ssh.label) == (1, "llm-c")


def test_container_settings_errors_name_the_host():
    hosts = [h("llm-c", gpunode_container={"gpus": -1, "driver": "x"}), h("llm-d",
             gpunode_container=["nvidia-smi"]), h("web1")]
    with pytest.raises(ContainerDeployError) as info:
        validate_container_targets(hosts, {})
    text = str(info.value)
    assert "llm-c: gpunode_container.gpus" in text
    assert "llm-c: gpunode_container.driver: unknown key" in text
    assert "llm-d: gpunode_container must be a mapping" in text
    assert "web1" not in text


def test_settings_defaults():
    assert ContainerSettings().nvidia_packages == DEFAULT_PACKAGES
    with pytest.raises(ValueError):
        ContainerSettings(nvidia_driver="latest")
