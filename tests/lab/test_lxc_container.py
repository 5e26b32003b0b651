"""A real LXC container in the lab guest runs with the raw lxc.* lines gpunode generates.

Proves, with Debian's `lxc` (5.0) and a container whose rootfs is the guest's static busybox
(no template download, no network; the init is `sleep`):

- `lxc.prlimit.memlock: unlimited` gives the container unlimited locked memory, even when
  lxc-start and lxc-attach are run with a low limit (`ulimit -l 1024`): both `ulimit -l` in an
  attached shell and the container's init (/proc/1/limits) say unlimited;
- the GPU block (`lxc.cgroup2.devices.allow` + `lxc.mount.entry ... bind,optional,create=...`)
  makes the selected device node appear in the container with the host's major:minor, and
  it opens; a node of a GPU that was not selected can't be opened even when the container
  makes it itself with mknod (the cgroup device policy gpunode writes is what lets one
  through), while the same node opens on the host;
- the optional entries for nodes the host lacks (/dev/nvidia-uvm-tools, /dev/nvidia-caps) don't
  stop the container from starting.

Stand-ins: the guest has no NVIDIA driver, so its real /dev/nvidia* nodes can't exist. The
test creates them at the NVIDIA paths with the numbers of real guest drivers whose minors are
numbered like GPUs: /dev/nvidia0 and /dev/nvidia1 are ptp 0 and 1 (the two e1000e PTP clocks;
the ptp major is dynamic, like nvidia-uvm's), /dev/nvidiactl is ptp minor 255, and
/dev/nvidia-uvm is rtc0. The host facts are read with the role's own fact command
(NVIDIA_DEVICES_COMMAND: /proc/devices + stat of /dev/nvidia*) and parsed by the role's code;
the only stand-in step is naming the ptp major "nvidia" and the rtc major "nvidia-uvm".
From there the lines come from plan.edit_config_text (the Proxmox config writer), and are
written into the LXC config the way `pct start` writes raw keys (`key = value`). The
container also includes LXC's common.conf (default-deny device policy), as Proxmox's
generated config does. It is privileged (no idmap), which is enough for the device and limit
paths; Proxmox's unprivileged containers use the same lines.

It leaves the guest as it found it: container destroyed, stand-in nodes removed. It does not
depend on the other lab tests or their order.
"""

from __future__ import annotations

import shlex
import time

import pytest

from gpunode.facts import pve_config
from gpunode.facts.gpu_numa import GPU_NUMA_COMMAND, format_cpulist, parse_gpu_numa
from gpunode.facts.nvidia_devices import (
    NVIDIA_DEVICES_COMMAND,
    parse_nvidia_dev_listing,
    parse_nvidia_device_fact,
    parse_proc_devices,
)
from gpunode.profile.container import ContainerSpec
from gpunode.roles.lxc_gpu.plan import edit_config_text
from tests.lab.guest import sh

pytestmark = pytest.mark.lab

NAME = "gpunode-lxc-lab"
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
STAND_INS = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
LXC_DIR = f"/var/lib/lxc/{NAME}"
APPLETS = ["sh", "ls", "stat", "mknod", "grep", "cat", "sleep"]
# What pct create would have written; the GPU lines are added by gpunode's writer.
PVE_CONF = (
    "arch: amd64\ncores: 1\nhostname: gpunode-lxc-lab\nmemory: 256\n"
    "rootfs: local:110/vm-110-disk-0.raw,size=1G\nswap: 0\nunprivileged: 0\n"
)


def cleanup(vm) -> None:
    vm.ssh(
        f"lxc-stop -n {NAME} -k 2>/dev/null; lxc-destroy -n {NAME} 2>/dev/null; "
        f"rm -f {' '.join(STAND_INS)}; rm -rf {LXC_DIR}; true",
        timeout=120,
    )


@pytest.fixture
def guest(lab_vm):
    rc, _, _ = lab_vm.ssh("command -v lxc-start && test -x /bin/busybox")
    if rc != 0:
        pytest.skip("the lab image has no lxc / busybox-static (rebuild the image)")
    cleanup(lab_vm)
    started = time.monotonic()
    try:
        yield lab_vm
    finally:
        cleanup(lab_vm)
        print(f"\nLXC lab test: {time.monotonic() - started:.0f} s")


def make_rootfs(vm) -> None:
    """The container's rootfs: the guest's static busybox and a few applet links."""
    rootfs = f"{LXC_DIR}/rootfs"
    links = " && ".join(f"ln -s busybox {rootfs}/bin/{applet}" for applet in APPLETS)
    sh(vm, f"mkdir -p {rootfs}/bin {rootfs}/dev {rootfs}/proc {rootfs}/sys {rootfs}/tmp && "
           f"cp /bin/busybox {rootfs}/bin/busybox && {links}")


def start_container(vm, entries: list[tuple[str, str]], prefix: str = "") -> None:
    """Write the LXC config with the raw lines as `pct start` writes them, start it."""
    raw = "".join(f"{key} = {value}\n" for key, value in entries)
    config = (
        f"lxc.uts.name = {NAME}\n"
        f"lxc.rootfs.path = dir:{LXC_DIR}/rootfs\n"
        "lxc.include = /usr/share/lxc/config/common.conf\n"
        "lxc.net.0.type = empty\n"
        "lxc.apparmor.profile = unconfined\n"
        "lxc.init.cmd = /bin/sleep 3600\n"
    ) + raw
    sh(vm, f"printf %s {shlex.quote(config)} > {LXC_DIR}/config")
    sh(vm, prefix + f"lxc-start -n {NAME} -d && lxc-wait -n {NAME} -s RUNNING -t 60",
       timeout=90)


def make_stand_ins(vm) -> dict[str, int]:
    """Create the stand-in nodes; return the guest's real char majors."""
    majors = parse_proc_devices(sh(vm, "cat /proc/devices"))
    assert {"ptp", "rtc"} <= set(majors), majors
    ptp, rtc = majors["ptp"], majors["rtc"]
    sh(vm, "ls /dev/ptp0 /dev/ptp1 /dev/rtc0")
    sh(vm, f"mknod /dev/nvidia0 c {ptp} 0 && mknod /dev/nvidia1 c {ptp} 1 && "
           f"mknod /dev/nvidiactl c {ptp} 255 && mknod /dev/nvidia-uvm c {rtc} 0")
    return majors


def host_facts(vm) -> tuple[dict[str, int], list]:
    """The role's fact command, run in the guest, parsed by the role's code."""
    majors, devices = parse_nvidia_device_fact(sh(vm, NVIDIA_DEVICES_COMMAND))
    assert "nvidia" not in majors  # no NVIDIA driver here: name the stand-in majors
    majors = {**majors, "nvidia": majors["ptp"], "nvidia-uvm": majors["rtc"]}
    assert [d.path for d in devices] == sorted(STAND_INS)
    return majors, devices


def test_container_gets_memlock_and_only_the_selected_gpu_node(guest):
    vm = guest
    real = make_stand_ins(vm)
    majors, devices = host_facts(vm)
    ptp, rtc = real["ptp"], real["rtc"]

    spec = ContainerSpec(vmid=110, hostname=NAME, ostemplate=TEMPLATE, gpus=[0])
    pve_text = edit_config_text(PVE_CONF, spec, majors, devices)
    entries = pve_config.lxc_entries(pve_config.parse_pve_lxc_config(pve_text))
    assert entries == [
        ("lxc.cgroup2.devices.allow", f"c {ptp}:0 rwm"),
        ("lxc.cgroup2.devices.allow", f"c {ptp}:255 rwm"),
        ("lxc.cgroup2.devices.allow", f"c {rtc}:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
        ("lxc.mount.entry", "/dev/nvidiactl dev/nvidiactl none bind,optional,create=file"),
        ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"),
        ("lxc.mount.entry",
         "/dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file"),
        ("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"),
        ("lxc.prlimit.memlock", "unlimited"),
    ]
    low = "ulimit -l 1024 && ulimit -H -l 1024 && "
    host_limit = sh(vm, low + "ulimit -l").strip()
    assert host_limit == "1024"
    make_rootfs(vm)
    start_container(vm, entries, low)

    inside = sh(vm, low + f"lxc-attach -n {NAME} -- /bin/sh -c " + shlex.quote(
        "echo \"ulimit=$(ulimit -l)\"; grep 'Max locked memory' /proc/1/limits; "
        "echo '== nodes'; stat -c '%F|%t|%T|%n' /dev/nvidia* 2>/dev/null; "
        "echo '== open'; "
        "(exec 3</dev/nvidia0) && echo open-nvidia0-ok; "
        "(exec 3</dev/nvidia-uvm) && echo open-uvm-ok; "
        "mknod /tmp/nvidia1 c " + str(ptp) + " 1 && echo mknod-ok; "
        "(exec 3</tmp/nvidia1) 2>&1 || echo open-nvidia1-denied; "
        "ls /dev/nvidia1 2>/dev/null || echo no-nvidia1; true"
    ))
    lines = inside.splitlines()
    assert "ulimit=unlimited" in lines, inside
    assert any(line.split()[3:5] == ["unlimited", "unlimited"] for line in lines
               if line.startswith("Max locked memory")), inside

    listing = inside.split("== nodes\n", 1)[1].split("== open", 1)[0]
    inside_nodes = {n.path: (n.kind, n.major, n.minor) for n in parse_nvidia_dev_listing(listing)}
    assert inside_nodes["/dev/nvidia0"] == ("char", ptp, 0)
    assert inside_nodes["/dev/nvidiactl"] == ("char", ptp, 255)
    assert inside_nodes["/dev/nvidia-uvm"] == ("char", rtc, 0)
    assert inside_nodes["/dev/nvidia-caps"][0] == "dir"  # optional, created empty
    assert "/dev/nvidia1" not in inside_nodes

    assert "open-nvidia0-ok" in lines and "open-uvm-ok" in lines, inside
    assert "mknod-ok" in lines, inside  # mknod itself is allowed ('c *:* m')...
    assert "open-nvidia1-denied" in lines, inside  # ...opening the unselected GPU is not
    assert "Operation not permitted" in inside, inside
    assert "no-nvidia1" in lines, inside
    # The same device opens on the host: the denial comes from the container's policy.
    sh(vm, "(exec 3</dev/nvidia1) && echo ok")


def stand_ins_by_numa_node(vm) -> dict[int, tuple[str, int]]:
    """NUMA node -> (PCI address, ptp minor) of the e1000e stand-ins' PTP clocks; the node is
    the device's own sysfs numa_node (-1 on pcie.0, 1 behind the pxb-pcie expander)."""
    out = sh(vm, "for p in /sys/class/ptp/ptp*; do d=$(readlink -f $p/device); "
                 "echo \"${p##*ptp} ${d##*/} $(cat $d/numa_node)\"; done")
    found = {}
    for line in out.splitlines():
        minor, bdf, node = line.split()
        found[int(node)] = (bdf, int(minor))
    return found


def test_container_cpuset_and_mems_are_its_gpus_numa_node(guest):
    """The stand-in behind the pxb-pcie expander is GPU 1 (/dev/nvidia1 = its PTP clock):
    the role's NUMA fact finds it on node 1 through /sys/dev/char, gpunode writes node 1's
    cpuset into the config, and the real container runs on node 1's CPUs and memory."""
    vm = guest
    majors = parse_proc_devices(sh(vm, "cat /proc/devices"))
    ptp, rtc = majors["ptp"], majors["rtc"]
    placed = stand_ins_by_numa_node(vm)
    assert set(placed) == {-1, 1}, placed
    bdf1, minor1 = placed[1]
    _, minor0 = placed[-1]
    sh(vm, f"mknod /dev/nvidia0 c {ptp} {minor0} && mknod /dev/nvidia1 c {ptp} {minor1} && "
           f"mknod /dev/nvidiactl c {ptp} 255 && mknod /dev/nvidia-uvm c {rtc} 0")
    majors, devices = host_facts(vm)
    numa = parse_gpu_numa(sh(vm, GPU_NUMA_COMMAND))
    assert numa.gpu_bdf[1] == bdf1 and numa.bdf_node[bdf1] == 1, numa
    assert format_cpulist(numa.node_cpus[1]) == "1"

    spec = ContainerSpec(vmid=110, hostname=NAME, ostemplate=TEMPLATE, gpus=[1], cores=1)
    pve_text = edit_config_text(PVE_CONF, spec, majors, devices, numa=numa)
    entries = pve_config.lxc_entries(pve_config.parse_pve_lxc_config(pve_text))
    assert ("lxc.cgroup2.cpuset.cpus", "1") in entries
    assert ("lxc.cgroup2.cpuset.mems", "1") in entries
    make_rootfs(vm)
    start_container(vm, entries)

    inside = sh(vm, f"lxc-attach -n {NAME} -- /bin/sh -c " + shlex.quote(
        "grep -E '^(Cpus|Mems)_allowed_list' /proc/1/status; "
        "cat /sys/fs/cgroup/cpuset.cpus.effective /sys/fs/cgroup/cpuset.mems.effective"
    ))
    lines = inside.split()
    assert lines[:4] == ["Cpus_allowed_list:", "1", "Mems_allowed_list:", "1"], inside
    assert lines[4:] == ["1", "1"], inside
    # The host sees the same on the container's cgroup.
    host_view = sh(vm, f"lxc-cgroup -n {NAME} cpuset.cpus.effective; "
                       f"lxc-cgroup -n {NAME} cpuset.mems.effective").split()
    assert host_view == ["1", "1"], host_view
