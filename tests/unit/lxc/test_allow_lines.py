"""The allow-line verdicts of the takeover (lxc_gpu.allow_lines) one branch at a time, on the
8-GPU host of test_takeover (nvidia-frontend 195, nvidia-caps 235, nvidia-uvm 510): the lines
are the ones the public configs of tests/data/lxc write, composed so each verdict shows."""

from gpunode.facts import pve_config as pc
from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing, parse_proc_devices
from gpunode.facts.pve_config import dev_path
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu.gpu_lines import parse_allow
from gpunode.roles.lxc_gpu.plan import edit_config_text, take_over
from tests.unit.lxc._data import read

MAJORS = parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt"))
NODES = parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt"))
MOUNT0 = "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"


def spec(**kw) -> ContainerSpec:
    return ContainerSpec(vmid=110, hostname="llm-a",
                         ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", **kw)


def decide(text: str, **kw) -> tuple[dict[str, tuple[str, str]], str]:
    result = take_over(text, spec(**kw), MAJORS, NODES, pve_version="8.1.10")
    return {d.line: (d.action, d.reason) for d in result.decisions}, pc.render(result.config)


def test_each_frontend_grant_gets_its_verdict():
    text = (
        "lxc.cgroup2.devices.allow: c 195:0 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:3 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:254 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:255 r\n"
        + MOUNT0 + "\n"
    )
    actions, out = decide(text, gpus=[0])
    assert actions["lxc.cgroup2.devices.allow: c 195:0 rwm"][0] == "keep"
    assert actions["lxc.cgroup2.devices.allow: c 195:3 rwm"] == (
        "remove", "allows GPU 3, which is not in this container's gpus")
    assert actions["lxc.cgroup2.devices.allow: c 195:254 rwm"] == (
        "leave", "nvidia-modeset is the user's")
    # Read-only nvidiactl is kept but does not count: the rwm grant is added beside it.
    assert actions["lxc.cgroup2.devices.allow: c 195:255 r"][0] == "keep"
    assert actions["lxc.cgroup2.devices.allow: c 195:255 rwm"][0] == "add"
    assert "c 195:3 rwm" not in out
    assert "lxc.cgroup2.devices.allow: c 195:0 rwm\n" in out
    assert edit_config_text(out, spec(gpus=[0]), MAJORS, NODES, pve_version="8.1.10") == out


def test_new_grants_follow_the_last_gpu_allow_not_the_modeset_line():
    """nvidia-modeset's line is not a GPU line: added grants go after c 195:0, the last one."""
    text = (
        "lxc.cgroup2.devices.allow: c 195:0 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:254 rwm\n"
        "arch: amd64\n"
    )
    _, out = decide(text, gpus=[0])
    lines = out.splitlines()
    assert lines[:2] == ["lxc.cgroup2.devices.allow: c 195:0 rwm",
                         "lxc.cgroup2.devices.allow: c 195:255 rwm"]
    assert lines.index("lxc.cgroup2.devices.allow: c 195:254 rwm") > 1


def test_a_comment_ends_the_gpu_block_for_the_stale_check():
    """An unregistered major separated from the GPU lines by a comment is someone else's."""
    text = (
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "# coral\n"
        "lxc.cgroup2.devices.allow: c 120:0 rwm\n"
        "\n"
        "lxc.cgroup2.devices.allow: c 505:* rwm\n"
        + MOUNT0 + "\n"
    )
    actions, out = decide(text)
    assert "lxc.cgroup2.devices.allow: c 120:0 rwm" not in actions
    assert "lxc.cgroup2.devices.allow: c 120:0 rwm\n" in out
    assert actions["lxc.cgroup2.devices.allow: c 505:* rwm"] == (
        "remove", "no driver registers major 505 now: stale")


def test_a_second_memlock_line_is_removed_and_named():
    text = MOUNT0 + "\nlxc.prlimit.memlock: 1024\nlxc.prlimit.memlock: unlimited\n"
    result = take_over(text, spec(), MAJORS, NODES)
    memlock = [d for d in result.decisions if "memlock" in d.line]
    assert [(d.action, d.line, d.new) for d in memlock] == [
        ("replace", "lxc.prlimit.memlock: 1024", "lxc.prlimit.memlock: unlimited"),
        ("remove", "lxc.prlimit.memlock: unlimited", None),
    ]
    assert pc.render(result.config).count("lxc.prlimit.memlock") == 1


def test_duplicate_and_unusable_lines_for_one_node():
    """A second mount of a node, a non-bind mount and a deny-write devN are each removed or
    replaced with the reason."""
    text = (
        MOUNT0 + "\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none rw,create=file\n"
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none rw,create=file\n"
        "dev0: /dev/nvidia-uvm,deny-write=1\n"
    )
    actions, out = decide(text, gpus=[0])
    assert actions["lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none rw,create=file"] == (
        "remove", f"/dev/nvidia0 is already passed by: {MOUNT0}")
    assert actions["lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none rw,create=file"] == (
        "replace", "not a bind mount")
    assert actions["dev0: /dev/nvidia-uvm,deny-write=1"] == (
        "replace", "deny-write: CUDA can't use a GPU it can't write to")
    assert "deny-write" not in out and "rw,create" not in out


def test_value_readers():
    assert dev_path("path=/dev/nvidia0,gid=44") == "/dev/nvidia0"
    assert dev_path("gid=44,path=/dev/nvidia1") == "/dev/nvidia1"
    assert dev_path("gid=44") == ""
    assert parse_allow("c 195:* rwm") == ("c", 195, "*", "rwm")
    assert parse_allow("c *:* m") == ("c", None, "*", "m")
    assert parse_allow("a") is None
