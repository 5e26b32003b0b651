"""Taking over GPU lines people wrote by hand, on real public configs (tests/data/lxc/SOURCES.md).

The host is the 8-GPU one of stat-dev-nvidia-8gpu-synthetic.txt / proc-devices-ocp-efa-nvswitch
(nvidia-frontend 195, nvidia-caps 235, nvidia-uvm 510). For every config, spec and style:
no node the container gets is passed twice, every line gpunode does not change stays
byte-identical and in its place, every line it drops is named in a decision, the
[pve:pending] and snapshot sections are untouched, and a second apply changes nothing.
"""

from collections import Counter

import pytest

from gpunode.facts import pve_config as pc
from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing, parse_proc_devices
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu.plan import edit_config_text, take_over
from gpunode.roles.lxc_gpu.takeover import dev_path, mount_target, passthrough_style
from tests.unit.lxc._data import ALL_CONFIGS, read

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
MAJORS = parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt"))
NODES = parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt"))
SCOPE = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps"}
# (gpu_passthrough, pve-manager version): auto before and after devN keys, and both forced.
STYLES = [("auto", "8.1.10"), ("auto", "8.2.4"), ("dev", "8.2.4"), ("mount", "8.3.0")]


def spec(**kw) -> ContainerSpec:
    return ContainerSpec(**{"vmid": 110, "hostname": "llm-a", "ostemplate": TEMPLATE, **kw})


def converge(text: str, s: ContainerSpec, version: str | None = "8.1.10"):
    return take_over(text, s, MAJORS, NODES, pve_version=version)


def passed_targets(text: str) -> Counter:
    """How often each node gpunode manages is handed to the container (mount or devN)."""
    config = pc.parse_pve_lxc_config(text)
    seen: Counter = Counter()
    for line in config.main.lines:
        if line.kind != "key":
            continue
        if line.key == "lxc.mount.entry":
            target = mount_target(line.value or "") or ""
        elif (line.key or "").startswith("dev") and (line.key or "")[3:].isdigit():
            target = dev_path(line.value or "").lstrip("/")
        else:
            continue
        name = target.removeprefix("dev/")
        if target.startswith("dev/") and (name in SCOPE or name.removeprefix("nvidia").isdigit()):
            seen[target] += 1
    return seen


def is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


@pytest.mark.parametrize("name", ALL_CONFIGS)
@pytest.mark.parametrize("gpus", ["all", [0], [2, 5]])
@pytest.mark.parametrize("style", STYLES)
def test_real_configs_converge_without_doubles_and_keep_user_lines(name, gpus, style):
    text = read(name)
    s = spec(gpus=gpus, gpu_passthrough=style[0])
    result = converge(text, s, style[1])
    out = pc.render(result.config)

    assert max(passed_targets(out).values(), default=0) == 1, out
    # Sections other than the main one are byte-identical.
    before, after = pc.parse_pve_lxc_config(text), pc.parse_pve_lxc_config(out)
    assert before.sections[1:] == after.sections[1:]
    # Lines gpunode drops are named; every other line stays, in order, byte for byte.
    dropped = {d.line for d in result.decisions if d.action in ("remove", "replace")}
    old = [ln.raw for ln in before.main.lines]
    kept = [raw for raw in old if raw not in dropped]
    assert is_subsequence(kept, [ln.raw for ln in after.main.lines])
    gone = Counter(old) - Counter(ln.raw for ln in after.main.lines)
    assert set(gone) <= dropped
    # A second apply changes nothing.
    assert edit_config_text(out, s, MAJORS, NODES, pve_version=style[1]) == out


def test_nosana_user_extras_are_left_alone_and_the_block_is_narrowed_to_gpu_0():
    text = read("nosana-gpuaas-6004.conf")
    result = converge(text, spec(gpus=[0]))
    out = pc.render(result.config)
    lines = out.splitlines()
    for user_line in (
        "lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none "
        "bind,optional,create=file",
        "lxc.cgroup2.devices.allow: a",
        "lxc.cap.drop: ",
        "# NVIDIA Device Mounts",
        "#features: nesting=1",
    ):
        assert user_line in lines
    actions = {d.line: (d.action, d.reason) for d in result.decisions}
    assert actions["lxc.cgroup2.devices.allow: c 195:* rwm"][0] == "remove"
    assert "only some" in actions["lxc.cgroup2.devices.allow: c 195:* rwm"][1]
    assert actions["lxc.cgroup2.devices.allow: c 235:* rwm"][0] == "keep"
    assert actions["lxc.cgroup2.devices.allow: c 510:* rwm"][0] == "keep"
    modeset = (
        "lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file"
    )
    assert actions[modeset][0] == "leave"
    # The GPU allows go where the user's block was, before the mounts.
    assert lines.index("lxc.cgroup2.devices.allow: c 195:0 rwm") < lines.index(
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"
    )
    assert "lxc.prlimit.memlock: unlimited" in lines


def test_absolute_targets_count_as_the_same_node():
    """`/dev/nvidia0 /dev/nvidia0` (absolute target, as several guides write it) passes
    dev/nvidia0: no second mount; GPU 1 is dropped when only GPU 0 is declared."""
    text = read("absolute-targets-two-gpus.conf")
    result = converge(text, spec(gpus=[0]))
    out = pc.render(result.config)
    assert "lxc.mount.entry: /dev/nvidia0 /dev/nvidia0 none bind,optional,create=file" in out
    assert "/dev/nvidia0 dev/nvidia0" not in out
    removed = {d.line: d.reason for d in result.decisions if d.action == "remove"}
    assert removed == {
        "lxc.mount.entry: /dev/nvidia1 /dev/nvidia1 none bind,optional,create=file":
            "GPU 1 is not in this container's gpus",
        "lxc.cgroup2.devices.allow: c 195:* rwm":
            "allows every GPU; the container declares only some",
    }


def test_relative_source_and_doubled_modeset_lines_are_the_users():
    text = read("pve-nvidia-passthrough-role-modeset.conf")
    result = converge(text, spec())
    out = pc.render(result.config)
    assert out.count("dev/nvidia-modeset none") == 2  # the user's own double, untouched
    leave = [d.line for d in result.decisions if d.action == "leave"]
    assert leave == text.splitlines()[-2:]


def test_devn_keys_count_as_passed_and_auto_keeps_them():
    """dev0..dev3 (PVE 8.2 style) already pass the four nodes: nothing is doubled; only the
    nvidia-caps directory (devN can't pass a directory) gets a mount and its allow. The
    user's `c 195:* rwm` would open the host's other seven GPUs: removed, and said so."""
    text = read("unsloth-studio-devN.conf")
    result = converge(text, spec(gpus=[0]), "8.2.4")
    out = pc.render(result.config)
    assert [d.line for d in result.decisions if d.action == "remove"] == [
        "lxc.cgroup2.devices.allow: c 195:* rwm"
    ]
    assert [d.line for d in result.decisions if d.action == "keep"][:4] == text.splitlines()[3:]
    added = [d.line for d in result.decisions if d.action == "add"]
    assert added == [
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir",
        "lxc.cgroup2.devices.allow: c 235:* rwm",
        "lxc.prlimit.memlock: unlimited",
    ]
    assert "lxc.cgroup2.devices.allow: c 509:* rwm\ndev0: /dev/nvidia0,gid=104\n" in out


def test_forced_mount_style_rewrites_devn_keys_and_names_each():
    text = read("unsloth-studio-devN.conf")
    result = converge(text, spec(gpus=[0], gpu_passthrough="mount"), "8.2.4")
    replaced = [d for d in result.decisions if d.action == "replace"]
    assert [d.line for d in replaced] == [
        "dev0: /dev/nvidia0,gid=104",
        "dev1: /dev/nvidiactl,gid=104",
        "dev2: /dev/nvidia-uvm,gid=104",
        "dev3: /dev/nvidia-uvm-tools,gid=104",
    ]
    assert all(d.reason == "gpu_passthrough: mount" for d in replaced)
    out = pc.render(result.config)
    assert "dev0:" not in out
    assert passed_targets(out)["dev/nvidia0"] == 1


def test_new_devn_keys_take_free_indices_next_to_the_users():
    """A real PVE 8.4 config that passes the iGPU as dev0/dev1: gpunode's keys are dev2..."""
    text = read("i915-sriov-308-devN-110.conf")
    out = edit_config_text(text, spec(gpus=[0]), MAJORS, NODES, pve_version="8.4.1")
    options = pc.main_options(pc.parse_pve_lxc_config(out))
    assert options["dev0"] == "/dev/dri/card0,gid=44"
    assert options["dev1"] == "/dev/dri/renderD128,gid=104"
    assert [options[f"dev{i}"] for i in range(2, 6)] == [
        "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"
    ]
    # Written where Proxmox would sort them: after dev1, before features.
    keys = [ln.key for ln in pc.parse_pve_lxc_config(out).main.lines if ln.kind == "key"]
    assert keys[keys.index("dev1") + 1 : keys.index("dev1") + 5] == ["dev2", "dev3", "dev4", "dev5"]
    assert "tags:  \n" in out  # the user's odd spacing is kept


def test_lines_go_into_the_main_section_not_the_last_snapshot():
    text = read("tteck-2230-snapshots-100.conf")
    out = edit_config_text(text, spec(), MAJORS, NODES)
    main, rest = out.split("\n\n[fresh]\n", 1)
    assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0" in main
    assert rest == text.split("\n\n[fresh]\n", 1)[1]


def test_idmaps_and_the_users_dri_lines_stay_in_place():
    text = read("ollama-flowise-idmap-template.conf")
    result = converge(text, spec())
    out = pc.render(result.config)
    tail = text.splitlines()[-9:]  # dri allows/mount and the six idmaps
    assert out.splitlines()[-len(tail) :] == tail
    # The guide took minors for majors: 254 is another driver's major on this host (kept,
    # not NVIDIA), no driver registers 255 (a stale line inside the GPU block: removed, named).
    assert "lxc.cgroup2.devices.allow: c 254:* rwm" in out
    removed = {d.line: d.reason for d in result.decisions if d.action == "remove"}
    assert removed == {
        "lxc.cgroup2.devices.allow: c 255:* rwm": "no driver registers major 255 now: stale"
    }


def test_a_users_mount_from_another_path_is_recognised_not_doubled():
    """Composed from the frigate-7640 layout: the user binds GPU 0 from a by-path link."""
    text = (
        "arch: amd64\nhostname: llm-a\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.mount.entry: /dev/gpu/by-slot/0 dev/nvidia0 none bind,optional,create=file\n"
    )
    result = converge(text, spec())
    out = pc.render(result.config)
    assert passed_targets(out)["dev/nvidia0"] == 1
    keep = {d.line: d.reason for d in result.decisions if d.action == "keep"}
    assert "from /dev/gpu/by-slot/0" in keep[
        "lxc.mount.entry: /dev/gpu/by-slot/0 dev/nvidia0 none bind,optional,create=file"
    ]


def test_another_gpu_mounted_at_a_declared_target_is_replaced_and_named():
    text = "lxc.mount.entry: /dev/nvidia3 dev/nvidia0 none bind,optional,create=file\n"
    result = converge(text, spec(gpus=[0]))
    (replace,) = [d for d in result.decisions if d.action == "replace"]
    assert replace.new == "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"
    assert "another device" in replace.reason


def test_devn_for_a_node_missing_on_the_host_becomes_an_optional_mount():
    nodes = [n for n in NODES if n.path != "/dev/nvidia-uvm-tools"]
    text = "dev0: /dev/nvidia-uvm-tools\n"
    result = take_over(text, spec(), MAJORS, nodes, pve_version="8.2.4")
    (replace,) = [d for d in result.decisions if d.action == "replace"]
    assert "refuse to start" in replace.reason
    assert replace.new.endswith("dev/nvidia-uvm-tools none bind,optional,create=file")


@pytest.mark.parametrize(
    ("choice", "version", "expected"),
    [
        ("auto", "8.2.4", ("dev", False)),
        ("auto", "9.0.3", ("dev", False)),
        ("auto", "8.1.10", ("mount", False)),
        ("auto", "7.4-3", ("mount", False)),
        ("auto", None, ("mount", False)),
        ("dev", None, ("dev", True)),
        ("mount", "8.3.0", ("mount", True)),
    ],
)
def test_passthrough_style(choice, version, expected):
    assert passthrough_style(choice, version) == expected


def test_cpuset_auto_pins_the_container_to_its_gpus_node_and_replaces_a_users_cpuset():
    """A hand-written cpuset elsewhere is replaced in place, and said so; the declared list
    wins over 'auto'; None leaves the user's line alone."""
    from gpunode.facts.gpu_numa import GpuNuma

    numa = GpuNuma(
        node_cpus={0: [0, 1, 2, 3], 1: [4, 5, 6, 7]},
        gpu_bdf={0: "0000:07:00.0", 5: "0000:8b:00.0"},
        bdf_node={"0000:07:00.0": 0, "0000:8b:00.0": 1},
    )
    text = read("frigate-7640-102.conf").replace(
        "lxc.cap.drop: \n", "lxc.cap.drop: \nlxc.cgroup2.cpuset.cpus: 0-1\n"
    )
    result = take_over(text, spec(gpus=[5]), MAJORS, NODES, numa=numa)
    out = pc.render(result.config)
    assert "lxc.cap.drop: \nlxc.cgroup2.cpuset.cpus: 4-7\n" in out
    (replace,) = [d for d in result.decisions if d.action == "replace"]
    assert (replace.line, replace.new) == (
        "lxc.cgroup2.cpuset.cpus: 0-1", "lxc.cgroup2.cpuset.cpus: 4-7")
    assert "lxc.cgroup2.cpuset.mems: 1" in out.splitlines()
    declared = edit_config_text(text, spec(gpus=[5], cpuset_cpus="6-7"), MAJORS, NODES, numa=numa)
    assert "lxc.cgroup2.cpuset.cpus: 6-7" in declared.splitlines()
    alone = edit_config_text(text, spec(gpus=[5], cpuset_cpus=None), MAJORS, NODES, numa=numa)
    assert "lxc.cgroup2.cpuset.cpus: 0-1" in alone.splitlines()
    assert edit_config_text(out, spec(gpus=[5]), MAJORS, NODES, numa=numa) == out


def test_other_devices_are_never_touched():
    """/dev/dri, a blanket `a` allow and idmaps are not GPU lines: no decision names them."""
    text = (
        "lxc.cgroup2.devices.allow: c 226:0 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 510:* rwm\n"
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.prlimit.memlock: unlimited\n"
        "lxc.cgroup2.devices.allow: a\n"
        "lxc.idmap: u 0 100000 65536\n"
    )
    result = converge(text, spec())
    named = {d.line for d in result.decisions}
    for other in text.splitlines()[:1] + text.splitlines()[3:4] + text.splitlines()[6:]:
        assert other not in named
    assert {d.action for d in result.decisions if d.line in text.splitlines()} == {"keep"}


def test_a_stale_major_goes_only_inside_the_gpu_block():
    """nvidia-uvm moved from 505 to 510 after a driver update; the Coral apex allow (its
    driver not loaded now, major 120 unregistered) is outside the GPU lines: kept."""
    text = (
        "lxc.cgroup2.devices.allow: c 120:0 rwm\n"
        "lxc.mount.entry: /dev/apex_0 dev/apex_0 none bind,optional,create=file\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 505:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    )
    result = converge(text, spec())
    out = pc.render(result.config)
    assert out.startswith(text.split("lxc.cgroup2.devices.allow: c 195")[0])
    assert [d.line for d in result.decisions if d.action == "remove"] == [
        "lxc.cgroup2.devices.allow: c 505:* rwm"
    ]
    assert "lxc.cgroup2.devices.allow: c 510:* rwm" in out
