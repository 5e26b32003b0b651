"""The lxc_gpu role's wiring on a pyinfra State (facts patched, nothing run): a fresh host
gets create + lines + start, a converged host gets no command at all."""

from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy

from gpunode.facts.node_read import NodeRead
from gpunode.facts.nvidia_devices import DeviceNode
from gpunode.facts.snapshot import Snapshot
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu import lxc_gpu
from gpunode.roles.lxc_gpu.plan import edit_config_text
from tests.unit._planned import planned_commands

DEVICES = {
    "majors": {"nvidia": 195, "nvidiactl": 195, "nvidia-uvm": 510},
    "devices": [
        {"path": "/dev/nvidia0", "kind": "char", "major": 195, "minor": 0},
        {"path": "/dev/nvidia1", "kind": "char", "major": 195, "minor": 1},
        {"path": "/dev/nvidiactl", "kind": "char", "major": 195, "minor": 255},
    ],
}
# Proxmox 8.1: no devN keys yet, so gpu_passthrough 'auto' writes mount lines.
HOST = {
    "NvidiaDevices": DEVICES,
    "PveVersionFact": {"present": True, "manager_version": "8.1.10"},
    "GpuNumaTopology": {},
    "LxcGpuRecords": {},
}
SPEC = ContainerSpec(
    vmid=110,
    hostname="llm-a",
    ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    gpus=[1],
)
CONFIG = (
    "arch: amd64\ncores: 8\nfeatures: nesting=1\nhostname: llm-a\nmemory: 32768\n"
    "net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,type=veth\nonboot: 1\n"
    "rootfs: local-lvm:vm-110-disk-0,size=64G\nswap: 0\nunprivileged: 1\n"
)


PARTS = {"NvidiaDevices": "nvidia_devices", "PveVersionFact": "pve",
         "GpuNumaTopology": "gpu_numa", "LxcGpuRecords": "lxc_records", "PctList": "pct_list",
         "PveLxcConfigText": "config:110", "LxcStartedConfig": "started:110"}


def run_role(facts: dict) -> list[tuple[str, list[str]]]:
    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host("@local")

    def get_fact(self, cls, *args, **kwargs):
        if cls is NodeRead:  # the role's one read: each fact's value as the part it reads
            return Snapshot(parts={part: facts[name] for name, part in PARTS.items()
                                   if name in facts})
        return facts[cls.__name__]

    with patch("pyinfra.api.host.Host.get_fact", get_fact):
        add_deploy(state, lxc_gpu, [SPEC])
        plan = planned_commands(state, host)
    return plan


@pytest.fixture(autouse=True)
def _not_cli(monkeypatch):
    monkeypatch.setattr("pyinfra.is_cli", False)


def test_fresh_host_creates_with_the_gpu_lines_then_starts():
    plan = run_role({**HOST, "PctList": {}, "PveLxcConfigText": None})
    assert [name for name, _ in plan] == [
        "Create container 110 (llm-a)",
        "GPU lines in /etc/pve/lxc/110.conf",
        "Options of container 110 (llm-a)",
        "Restart container 110 (llm-a) if needed (report only)",
    ]
    create = plan[0][1]
    assert create[0].startswith("pct create 110 ") and create[-2] == "pct start 110"
    assert create[-1] == "FunctionCommand(mark_stale, (), {})"  # the new container is read again
    # What gpunode appended is recorded for undo before the first start (lxc_gpu.record).
    record = "/var/lib/gpunode/lxc/110.json"
    temp = f"{record}.gpunode-new.test-run"
    assert create[2] == "mkdir -p /var/lib/gpunode/lxc" and create[4] == (
        f'sync {temp} && mv -f {temp} {record} && sync "$(dirname {record})"')
    assert "'lxc.cgroup2.devices.allow: c 195:1 rwm'" in create[1]
    assert "'lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file'" in create[1]
    assert "nvidia0" not in create[1]
    assert all(commands == [] for _, commands in plan[1:])


def test_converged_host_yields_no_command():
    nodes = [DeviceNode(**d) for d in DEVICES["devices"]]
    text = edit_config_text(CONFIG, SPEC, DEVICES["majors"], nodes, pve_version="8.1.10")
    started = "".join(
        f"{k.strip()} = {v.strip()}\n"
        for k, _, v in (ln.partition(":") for ln in text.splitlines() if ln.startswith("lxc."))
    )
    plan = run_role({
        **HOST,
        "PctList": {110: {"status": "running", "lock": "", "name": "llm-a"}},
        "PveLxcConfigText": text,
        "LxcStartedConfig": "lxc.arch = amd64\n" + started,
    })
    assert len(plan) == 4
    assert all(commands == [] for _, commands in plan)


def test_the_run_names_each_hand_written_gpu_line_it_changes_keeps_or_leaves(caplog):
    """Take over, don't fight: a hand-written block for both GPUs, nvidia-modeset included;
    the spec declares GPU 1. Every line the edit drops or keeps is named, with its reason."""
    hand_written = CONFIG + (
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file\n"
    )
    caplog.set_level("INFO", logger="pyinfra")
    plan = run_role({
        **HOST,
        "PctList": {110: {"status": "stopped", "lock": "", "name": "llm-a"}},
        "PveLxcConfigText": hand_written,
        "LxcStartedConfig": None,
    })
    assert plan[1][1], "the config is rewritten"
    # a change line past 100 columns puts its "(why)" on the next line: join them back
    log = " ".join(message.strip() for message in caplog.messages)
    assert ("change: /etc/pve/lxc/110.conf remove: lxc.cgroup2.devices.allow: c 195:* rwm "
            "(allows every GPU; the container declares only some)") in log
    assert ("change: /etc/pve/lxc/110.conf remove: lxc.mount.entry: /dev/nvidia0 dev/nvidia0 "
            "none bind,optional,create=file (GPU 0 is not in this container's gpus)") in log
    assert ("/etc/pve/lxc/110.conf: keep: lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none "
            "bind,optional,create=file (passes /dev/nvidia1)") in log
    assert log.count("leave: lxc.mount.entry: /dev/nvidia-modeset") == 1
    assert "change: /etc/pve/lxc/110.conf add: lxc.cgroup2.devices.allow: c 195:1 rwm" in log
