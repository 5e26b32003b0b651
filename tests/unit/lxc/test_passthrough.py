"""GPU passthrough lines computed from real /proc/devices and /dev listings."""

import pytest

from gpunode.facts.nvidia_devices import (
    DEVICE_FACT_SEPARATOR,
    DeviceNode,
    PassthroughError,
    gpu_indices_on_host,
    nvidia_majors,
    parse_nvidia_dev_listing,
    parse_nvidia_device_fact,
    parse_proc_devices,
)
from gpunode.roles.lxc_gpu.passthrough import gpu_passthrough_lines
from tests.unit.lxc._data import read

MOUNT = "none bind,optional,create=file"


# --- /proc/devices ---------------------------------------------------------------


def test_proc_devices_hgx_host_with_nvswitch_and_gdrdrv():
    majors = parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt"))
    assert majors["nvidia-frontend"] == 195
    assert majors["nvidia-uvm"] == 510
    assert majors["nvidia-caps"] == 235
    assert majors["nvidia-nvswitch"] == 511
    assert majors["gdrdrv"] == 509
    assert majors["infiniband_mad"] == 231  # listed twice: the first major is kept
    assert "md" not in majors and "blkext" not in majors  # block devices are not chars
    assert nvidia_majors(majors).uvm == 510


def test_proc_devices_caps_is_not_imex_channels():
    majors = parse_proc_devices(read("proc-devices-dra-driver-304-imex.txt"))
    assert majors["nvidia-caps"] == 511
    assert majors["nvidia-caps-imex-channels"] == 234


def test_proc_devices_driver_550_names_without_headers():
    # `grep nvidia /proc/devices` on a 550+ driver: "nvidia", "nvidiactl", no headers.
    majors = parse_proc_devices(read("proc-devices-cuda-guide-imex-grep.txt"))
    nv = nvidia_majors(majors)
    assert (nv.frontend, nv.uvm, nv.caps) == (195, None, None)


def test_no_nvidia_driver_is_a_clear_error():
    with pytest.raises(PassthroughError, match="driver is not loaded"):
        nvidia_majors({"mem": 1, "drm": 226})


# --- /dev listings -----------------------------------------------------------------


def test_stat_listing_eight_gpus():
    nodes = parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt"))
    assert gpu_indices_on_host(nodes) == list(range(8))
    by_path = {n.path: n for n in nodes}
    assert by_path["/dev/nvidia-uvm"] == DeviceNode("/dev/nvidia-uvm", "char", 510, 0)
    assert by_path["/dev/nvidiactl"].minor == 255
    assert by_path["/dev/nvidia-caps"].kind == "dir"
    assert by_path["/dev/nvidia-caps/nvidia-cap2"] == DeviceNode(
        "/dev/nvidia-caps/nvidia-cap2", "char", 235, 2
    )


def test_ls_listing_absolute_paths_drops_non_nvidia():
    nodes = parse_nvidia_dev_listing(read("ls-dev-nvidia-ctk-50.txt"))
    assert [n.path for n in nodes] == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia0",
        "/dev/nvidiactl",
    ]
    assert {n.path: n.major for n in nodes}["/dev/nvidia-uvm"] == 234


def test_ls_listing_relative_names_use_base_dir():
    nodes = parse_nvidia_dev_listing(read("ls-dev-nvidia-negativo17-29.txt"))
    assert gpu_indices_on_host(nodes) == [0]
    caps = parse_nvidia_dev_listing(
        read("ls-dev-nvidia-caps-dra-304.txt"), base_dir="/dev/nvidia-caps"
    )
    assert [(n.path, n.major, n.minor) for n in caps] == [
        ("/dev/nvidia-caps/nvidia-cap1", 511, 1),
        ("/dev/nvidia-caps/nvidia-cap2", 511, 2),
        ("/dev/nvidia-caps/nvidia-cap4323", 234, 4323),
    ]


def test_ls_recursive_listing_with_directory_headers():
    text = (
        "crw-rw-rw- 1 root root 195,   0 Aug 23 17:11 /dev/nvidia0\n"
        "\n/dev/nvidia-caps:\ntotal 0\n"
        "cr-------- 1 root root 236, 1 Aug 23 17:11 nvidia-cap1\n"
    )
    paths = [n.path for n in parse_nvidia_dev_listing(text)]
    assert paths == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia0"]


def test_device_fact_is_split_at_the_separator():
    text = (
        read("proc-devices-ocp-efa-nvswitch.txt")
        + DEVICE_FACT_SEPARATOR
        + "\n"
        + read("stat-dev-nvidia-8gpu-synthetic.txt")
    )
    majors, nodes = parse_nvidia_device_fact(text)
    assert majors["nvidia-uvm"] == 510
    assert len(gpu_indices_on_host(nodes)) == 8


# --- the lines -------------------------------------------------------------------


def _one_gpu_host():
    majors = {"nvidia-frontend": 195, "nvidia-uvm": 239, "nvidia-modeset": 195}
    return parse_nvidia_dev_listing(read("ls-dev-nvidia-negativo17-29.txt")), majors


def test_one_gpu_lines_exactly():
    nodes, majors = _one_gpu_host()
    assert gpu_passthrough_lines(nodes, majors, None) == [
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        ("lxc.cgroup2.devices.allow", "c 239:* rwm"),
        ("lxc.mount.entry", f"/dev/nvidia0 dev/nvidia0 {MOUNT}"),
        ("lxc.mount.entry", f"/dev/nvidiactl dev/nvidiactl {MOUNT}"),
        ("lxc.mount.entry", f"/dev/nvidia-uvm dev/nvidia-uvm {MOUNT}"),
        ("lxc.mount.entry", f"/dev/nvidia-uvm-tools dev/nvidia-uvm-tools {MOUNT}"),
        ("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"),
        ("lxc.prlimit.memlock", "unlimited"),
    ]


def test_one_gpu_matches_a_hand_written_real_world_block():
    # The NVIDIA lines users put in their configs (Telmate/terraform-provider-proxmox#1138),
    # with that host's uvm major (509) instead of this one's.
    nodes, _ = _one_gpu_host()
    majors = {"nvidia-frontend": 195, "nvidia-uvm": 509}
    ours = {f"{k}: {v}" for k, v in gpu_passthrough_lines(nodes, majors, [0], memlock=None)}
    theirs = {
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 509:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,"
        "create=file",
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir",
    }
    assert ours == theirs


def _eight_gpu_host():
    majors = parse_proc_devices(read("proc-devices-ocp-efa-nvswitch.txt"))
    return parse_nvidia_dev_listing(read("stat-dev-nvidia-8gpu-synthetic.txt")), majors


def test_eight_gpus_all():
    nodes, majors = _eight_gpu_host()
    lines = gpu_passthrough_lines(nodes, majors, None)
    allows = [v for k, v in lines if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 195:* rwm", "c 510:* rwm", "c 235:* rwm"]
    mounts = [v.split(" ")[0] for k, v in lines if k == "lxc.mount.entry"]
    assert mounts == [f"/dev/nvidia{i}" for i in range(8)] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps",
    ]
    assert "/dev/nvidia-nvswitch0" not in str(lines)
    assert lines[-1] == ("lxc.prlimit.memlock", "unlimited")
    # Listing every index is the same as 'all'.
    assert gpu_passthrough_lines(nodes, majors, list(range(8))) == lines


def test_eight_gpus_subset_gets_per_minor_allows_and_only_its_nodes():
    nodes, majors = _eight_gpu_host()
    lines = gpu_passthrough_lines(nodes, majors, [6, 2], memlock=68719476736)
    allows = [v for k, v in lines if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 195:2 rwm", "c 195:6 rwm", "c 195:255 rwm", "c 510:* rwm", "c 235:* rwm"]
    gpu_mounts = [v.split(" ")[0] for k, v in lines if "dev/nvidia" in v and v[11:12].isdigit()]
    assert gpu_mounts == ["/dev/nvidia2", "/dev/nvidia6"]
    assert lines[-1] == ("lxc.prlimit.memlock", "68719476736")


def test_missing_gpu_index_names_the_node_and_the_choices():
    nodes, majors = _eight_gpu_host()
    with pytest.raises(PassthroughError, match=r"/dev/nvidia8 does not exist.*\[0, 1, 2"):
        gpu_passthrough_lines(nodes, majors, [1, 8])


def test_uvm_not_loaded_says_how_to_fix():
    nodes, _ = _one_gpu_host()
    with pytest.raises(PassthroughError, match="modprobe nvidia-uvm"):
        gpu_passthrough_lines(nodes, {"nvidia": 195, "nvidiactl": 195}, None)


def test_no_gpu_nodes_yet_says_how_to_fix():
    with pytest.raises(PassthroughError, match="nvidia-smi"):
        gpu_passthrough_lines([], {"nvidia": 195, "nvidia-uvm": 511}, None)
