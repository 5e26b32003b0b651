"""ContainerSpec: one Proxmox LXC container with NVIDIA GPUs, as declared in inventory data.

Inventory example (host data of a Proxmox host)::

    containers = [
        {
            "vmid": 110,
            "hostname": "llm-a",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "cores": 16,
            "memory": 65536,
            "gpus": [0, 1],
        },
    ]

``validate_containers`` checks the whole list against the host's facts before
any change is made and raises ``ContainerSpecError`` naming the host, the field
(``containers[1].gpus[0]``), the bad value and how to fix it. The ``pct_*_args``
functions turn a spec into the exact ``pct`` command lines (argv lists).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpunode.roles.profile.allowed import (
    CONTROL,
    DRIVER_VERSION,
    FS_TYPES,
    IFACE_NAME,
    MAC_ADDRESS,
    PACKAGE_NAME,
    VLAN_TRUNKS,
    check,
    check_ip,
    check_path,
    shown,
)
from gpunode.roles.profile.docs import setting_doc

__all__ = [
    "ContainerSpec",
    "ContainerSpecError",
    "SpecProblem",
    "cgroup_v1_fix",
    "cgroup_v1_warning",
    "immutable_mismatches",
    "is_cgroup_v1_key",
    "parse_property_string",
    "pct_create_args",
    "pct_resize_args",
    "pct_set_args",
    "validate_containers",
]

# Every pattern is matched whole (re.fullmatch): '$' would accept a trailing newline.
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# STORAGE:vztmpl/NAME.tar.{gz,xz,zst}; storage ids as Proxmox's pve-storage-id format.
_OSTEMPLATE_RE = re.compile(
    r"[A-Za-z][A-Za-z0-9\-_.]{0,63}:vztmpl/[A-Za-z0-9][A-Za-z0-9_.+\-]{0,200}"
    r"\.(?:tar\.(?:gz|xz|zst)|tgz)"
)
_STORAGE_RE = re.compile(r"[A-Za-z][A-Za-z0-9\-_.]{0,62}[A-Za-z0-9]")
_LXC_LINE_RE = re.compile(r"(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*")
#: The longest extra_lxc line accepted (LXC itself reads lines of any length; a longer one
#: is a paste gone wrong).
_LXC_LINE_MAX = 1024
#: lxc.cgroup2.devices.allow/deny: 'a', or 'TYPE MAJOR:MINOR ACCESS' ('c 195:* rwm').
_DEVICE_RULE_RE = re.compile(r"a|[abc] (?:[0-9]{1,4}|\*):(?:[0-9]{1,7}|\*) [rwm]{1,3}")
#: Upper bounds: Proxmox's own limits where it has one, else far beyond any real host.
MAX_MEMORY_MIB = 64 * 1024 * 1024
MAX_DISK_GIB = 1024 * 1024
MAX_GPU_INDEX = 255
MAX_MEMLOCK = 1 << 50
# A Linux cpu/node list as cpuset.cpus and cpuset.mems take it: "0-15,32-47", "1".
CPULIST_RE = re.compile(r"\d{1,5}(?:-\d{1,5})?(?:,\d{1,5}(?:-\d{1,5})?){0,255}")


def checked_driver_version(value: str | None) -> str | None:
    """A pydantic check of an NVIDIA driver version ('550.127.05'); None passes."""
    if value is not None and not (isinstance(value, str) and DRIVER_VERSION.fullmatch(value)):
        raise ValueError(f"{shown(value)}: must be a driver version such as '550.127.05'")
    return value


def checked_package_names(value: list[str]) -> list[str]:
    """A pydantic check of Debian package names (policy 5.6.1, optional ':arch')."""
    for i, name in enumerate(value):
        if not PACKAGE_NAME.fullmatch(name):
            raise ValueError(
                f"item {i}: {shown(name)} is not a Debian package name such as 'libcuda1' "
                "(lowercase letters, digits, + - .)"
            )
    return value


# Keys Proxmox fills in itself; absent from the spec they are not a difference.
_NET_FILLED_BY_PROXMOX = frozenset({"hwaddr", "type"})

# PVE::LXC::Config $valid_lxc_conf_keys, plus the prefixes it allows wholesale.
_VALID_LXC_KEYS = frozenset(
    [
        "lxc.apparmor.profile",
        "lxc.apparmor.allow_incomplete",
        "lxc.apparmor.allow_nesting",
        "lxc.apparmor.raw",
        "lxc.selinux.context",
        "lxc.include",
        "lxc.arch",
        "lxc.uts.name",
        "lxc.signal.halt",
        "lxc.signal.reboot",
        "lxc.signal.stop",
        "lxc.init.cmd",
        "lxc.init.cwd",
        "lxc.pty.max",
        "lxc.console.logfile",
        "lxc.console.path",
        "lxc.tty.max",
        "lxc.devtty.dir",
        "lxc.hook.autodev",
        "lxc.autodev",
        "lxc.kmsg",
        "lxc.mount.fstab",
        "lxc.mount.entry",
        "lxc.mount.auto",
        "lxc.rootfs.mount",
        "lxc.cap.drop",
        "lxc.cap.keep",
        "lxc.seccomp.profile",
        "lxc.seccomp.notify.proxy",
        "lxc.seccomp.notify.cookie",
        "lxc.idmap",
        "lxc.hook.pre-start",
        "lxc.hook.pre-mount",
        "lxc.hook.mount",
        "lxc.hook.start",
        "lxc.hook.stop",
        "lxc.hook.post-stop",
        "lxc.hook.clone",
        "lxc.hook.destroy",
        "lxc.hook.version",
        "lxc.log.level",
        "lxc.log.file",
        "lxc.start.auto",
        "lxc.start.delay",
        "lxc.start.order",
        "lxc.group",
        "lxc.environment",
        "lxc.environment.runtime",
        "lxc.environment.hooks",
        "lxc.sysctl.fs.mqueue",
        "lxc.sysctl.kernel.msgmax",
        "lxc.sysctl.kernel.msgmnb",
        "lxc.sysctl.kernel.msgmni",
        "lxc.sysctl.kernel.sem",
        "lxc.sysctl.kernel.shmall",
        "lxc.sysctl.kernel.shmmax",
        "lxc.sysctl.kernel.shmmni",
        "lxc.sysctl.kernel.shm_rmid_forced",
    ]
)
_VALID_LXC_PREFIXES = ("lxc.cgroup2.", "lxc.prlimit.", "lxc.net.")
CGROUP_V1_PREFIX = "lxc.cgroup."
# cgroup v1 files and their cgroup v2 twin: same value (devices as LXC emulates them with BPF)...
_CGROUP_V2_SAME_VALUE = {
    "devices.allow": "devices.allow",
    "devices.deny": "devices.deny",
    "cpuset.cpus": "cpuset.cpus",
    "cpuset.mems": "cpuset.mems",
    "pids.max": "pids.max",
    "memory.limit_in_bytes": "memory.max",
}
# ... or another scale or meaning.
_CGROUP_V2_OTHER = {
    "cpu.shares": "cpu.weight",
    "blkio.weight": "io.weight",
    "memory.memsw.limit_in_bytes": "memory.swap.max",
}
_REJECTED_LXC_KEYS = {
    "lxc.rootfs.path": "it is generated by Proxmox from rootfs",
    "lxc.rootfs.options": "use mount options in the rootfs key instead",
}


def _flag(value: str) -> str:
    if value not in ("0", "1"):
        raise ValueError(f"{shown(value)} is not 0 or 1")
    return value


def _int_in(low: int, high: int) -> Callable[[str], str]:
    def checked(value: str) -> str:
        if not value.isdigit() or not low <= int(value) <= high:
            raise ValueError(f"{shown(value)} is not an integer from {low} to {high}")
        return value

    return checked


def _one_of(*words: str) -> Callable[[str], str]:
    def checked(value: str) -> str:
        if value not in words:
            raise ValueError(f"{shown(value)} is not one of {', '.join(words)}")
        return value

    return checked


def _ip(version: int, cidr: bool, words: tuple[str, ...] = ()) -> Callable[[str], str]:
    what = f"an IPv{version} address" + ("/prefix" if cidr else "")
    if words:
        what += f" or {', '.join(words)}"

    def checked(value: str) -> str:
        return value if value in words else check_ip(value, version, what, cidr)

    return checked


def _pattern(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    return lambda value: check(pattern, value, what)


# net0 values as PVE::LXC::Config $netconf_desc allows them.
_NET_VALUES: dict[str, Callable[[str], str]] = {
    "name": _pattern(IFACE_NAME, "an interface name (up to 15 letters, digits, _ . -)"),
    "bridge": _pattern(IFACE_NAME, "a bridge name such as 'vmbr0'"),
    "hwaddr": _pattern(MAC_ADDRESS, "a MAC address such as 'BC:24:11:00:00:01'"),
    "mtu": _int_in(64, 65535),
    "ip": _ip(4, True, ("dhcp", "manual")),
    "gw": _ip(4, False),
    "ip6": _ip(6, True, ("auto", "dhcp", "manual")),
    "gw6": _ip(6, False),
    "firewall": _flag,
    "tag": _int_in(1, 4094),
    "trunks": _pattern(VLAN_TRUNKS, "VLAN ids such as '10;20-30'"),
    "rate": _pattern(re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,3})?"), "a rate in MB/s such as '125'"),
    "type": _one_of("veth"),
    "link_down": _flag,
}
_FEATURE_VALUES: dict[str, Callable[[str], str]] = {
    "mount": _pattern(FS_TYPES, "file system types separated by ';' such as 'nfs;cifs'"),
    "nesting": _flag,
    "keyctl": _flag,
    "fuse": _flag,
    "mknod": _flag,
    "force_rw_sys": _flag,
}


def _checked_properties(
    value: str, checks: dict[str, Callable[[str], str]], field: str
) -> dict[str, str]:
    """A property string whose every key is known and every value passes its check."""
    if CONTROL.search(value) or len(value) > 512:
        raise ValueError("must be one line of at most 512 characters")
    props = parse_property_string(value)
    unknown = sorted(set(props) - set(checks))
    if unknown:
        raise ValueError(
            f"unknown {field} key {shown(unknown[0])}; allowed: {', '.join(sorted(checks))}"
        )
    for key, item in props.items():
        try:
            checks[key](item)
        except ValueError as exc:
            raise ValueError(f"{field} {key}={exc}") from None
    return props


def parse_property_string(value: str) -> dict[str, str]:
    """Parse a Proxmox property string (``name=eth0,bridge=vmbr0,ip=dhcp``)."""
    result: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        result[key.strip()] = val.strip() if sep else ""
    return result


def _format_property_string(props: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in props.items())


def is_cgroup_v1_key(key: str) -> bool:
    """``lxc.cgroup.*`` (cgroup v1), not ``lxc.cgroup2.*``."""
    return key.startswith(CGROUP_V1_PREFIX)


def cgroup_v1_fix(key: str, value: str) -> str:
    """How to write a cgroup v1 line for cgroup v2: Proxmox VE 7+ boots the unified hierarchy
    only (VE 9 has no cgroup v1 at all) and LXC ignores every lxc.cgroup.* line there
    ("Ignoring legacy cgroup limits on pure cgroup2 system")."""
    name = key[len(CGROUP_V1_PREFIX):]
    if name in _CGROUP_V2_SAME_VALUE:
        return f"write it as 'lxc.cgroup2.{_CGROUP_V2_SAME_VALUE[name]}: {value}'"
    if name in _CGROUP_V2_OTHER:
        return (f"use lxc.cgroup2.{_CGROUP_V2_OTHER[name]} (cgroup v2's own scale or meaning, "
                f"not {value!r} as is)")
    return f"use the cgroup v2 key (lxc.cgroup2.*) for {name}"


def cgroup_v1_warning(vmid: int, entries: list[tuple[str, str]]) -> str:
    """One line naming a container's cgroup v1 lines and the fix of each."""
    fixes = "; ".join(f"'{k}: {v}': {cgroup_v1_fix(k, v)}" for k, v in entries)
    return (f"container {vmid}: /etc/pve/lxc/{vmid}.conf has cgroup v1 lines, ignored on a "
            f"cgroup v2 host (Proxmox VE 9 has no cgroup v1): {fixes}")


def _check_mount_entry(value: str) -> None:
    """lxc.mount.entry 'SOURCE TARGET TYPE OPTIONS [DUMP PASS]': normalised paths, no '..'."""
    fields = value.split()
    if len(fields) not in (4, 5, 6):
        raise ValueError(
            "lxc.mount.entry must be 'SOURCE TARGET TYPE OPTIONS' such as "
            "'/srv/models srv/models none bind,create=dir'"
        )
    source, target = fields[0], fields[1]
    if source.startswith("/"):
        check_path(source, "a mount source", absolute=True)
    if source.startswith("/dev/nvidia"):
        raise ValueError("NVIDIA device mounts come from the 'gpus' field, not extra_lxc")
    check_path(target, "a mount target")


def parse_extra_lxc_line(line: str) -> tuple[str, str]:
    """``"lxc.key: value"`` (or ``lxc.key = value``) -> (key, value); ValueError if not.

    ``lxc.hook.*`` lines are accepted: they run commands on the Proxmox host, as root, at
    each start of the container (that is what they are for); the dry run prints them."""
    if CONTROL.search(line) or len(line) > _LXC_LINE_MAX:
        raise ValueError(
            f"{shown(line)} must be one line of at most {_LXC_LINE_MAX} characters "
            "without control characters"
        )
    match = _LXC_LINE_RE.fullmatch(line.strip())
    if not match:
        raise ValueError(f"{shown(line)} must look like 'lxc.key: value'")
    key, value = match.group(1), match.group(2)
    if key in _REJECTED_LXC_KEYS:
        raise ValueError(f"Proxmox rejects {key}: {_REJECTED_LXC_KEYS[key]}")
    if is_cgroup_v1_key(key):
        raise ValueError(
            f"{key} is a cgroup v1 key, which LXC ignores on a cgroup v2 host (Proxmox VE 7+; "
            f"VE 9 has no cgroup v1): {cgroup_v1_fix(key, value)}"
        )
    if key not in _VALID_LXC_KEYS and not key.startswith(_VALID_LXC_PREFIXES):
        raise ValueError(
            f"Proxmox does not accept the key {key} (see 'is_valid_lxc_conf_key' in "
            "PVE::LXC::Config: lxc.cgroup2.*, lxc.prlimit.*, lxc.net.*, lxc.mount.entry, "
            "lxc.idmap, lxc.apparmor.*, lxc.cap.*, lxc.hook.* ... are)"
        )
    if key == "lxc.prlimit.memlock":
        raise ValueError("set memlock with the 'memlock' field, not in extra_lxc")
    if key in ("lxc.cgroup2.cpuset.cpus", "lxc.cgroup2.cpuset.mems"):
        raise ValueError("set the cpuset with 'cpuset_cpus' and 'cpuset_mems', not in extra_lxc")
    if key == "lxc.mount.entry":
        _check_mount_entry(value)
    if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"):
        check(_DEVICE_RULE_RE, value, f"a {key} rule such as 'c 195:* rwm'")
    if key in ("lxc.mount.fstab", "lxc.include"):
        check_path(value, f"a path for {key}", absolute=True)
    return key, value


class ContainerSpec(BaseModel):
    """One LXC container on a Proxmox GPU host, for LLM inference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vmid: int = Field(
        strict=True,
        ge=100,
        le=999_999_999,
        description="Proxmox guest id (100..999999999; ids below 100 are reserved). "
        "Unique in the whole cluster, VMs included.",
    )
    hostname: str = Field(
        description="Container hostname: one RFC 1123 label (letters, digits, '-', "
        "1-63 chars, no leading/trailing '-'). Also how gpunode recognises the "
        "container when the vmid already exists."
    )
    ostemplate: str = Field(
        description="Template volume, 'STORAGE:vztmpl/FILE.tar.zst' (or .tar.gz/.tar.xz), "
        "e.g. 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'. Used only by "
        "pct create; `pveam available` lists them, `pveam download` fetches one."
    )
    cores: int = Field(
        default=8,
        strict=True,
        ge=1,
        le=8192,
        description="CPU cores (pct --cores). Inference servers want a few per GPU for "
        "tokenisation and the HTTP front end.",
        json_schema_extra=setting_doc(
            why="tokenisation + HTTP front end per GPU set",
            runtime="`pct create --cores`, then `pct set`",
        ),
    )
    memory: int = Field(
        default=32768,
        strict=True,
        ge=16,
        le=MAX_MEMORY_MIB,
        description="RAM in MiB (pct --memory). Loading a model stages weights in host "
        "RAM: size this above the largest model file.",
        json_schema_extra=setting_doc(
            why="model weights are staged in host RAM",
            runtime="`pct create --memory`, then `pct set`",
        ),
    )
    swap: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=MAX_MEMORY_MIB,
        description="Swap in MiB (pct --swap). 0 by default: swapping pinned inference "
        "buffers only hides memory pressure as latency.",
        json_schema_extra=setting_doc(
            why="swapping pinned buffers hides memory pressure",
            runtime="`pct create --swap`, then `pct set`",
        ),
    )
    rootfs_storage: str = Field(
        default="local-lvm",
        description="Proxmox storage id for the root disk (pct --rootfs STORAGE:SIZE).",
        json_schema_extra=setting_doc(
            why="Proxmox's default container storage",
            runtime="`pct create --rootfs STORAGE:SIZE`",
        ),
    )
    rootfs_size_gb: int = Field(
        default=64,
        strict=True,
        ge=1,
        le=MAX_DISK_GIB,
        description="Root disk size in GiB. It can grow later (pct resize), never shrink.",
        json_schema_extra=setting_doc(
            why="grows with `pct resize`, never shrinks",
            runtime="`pct resize` to grow; a smaller size is refused",
        ),
    )
    net0: str = Field(
        default="name=eth0,bridge=vmbr0,ip=dhcp",
        description="First network interface in Proxmox property-string syntax "
        "(name=,bridge=,ip=,gw=,ip6=,tag=,firewall=,mtu=...). Proxmox adds hwaddr and "
        "type itself; gpunode keeps the existing hwaddr when it changes net0. Each value is "
        "checked as Proxmox does: interface names, IPv4/IPv6 addresses with prefix (or "
        "dhcp/manual/auto), VLAN tag 1-4094, mtu 64-65535, 0/1 flags.",
        json_schema_extra=setting_doc(
            why="Proxmox's default bridge; an existing hwaddr is kept",
            runtime="`pct create --net0`, then `pct set`",
        ),
    )
    unprivileged: bool = Field(
        default=True,
        description="Run the container unprivileged (root inside is not root on the host). "
        "Fixed at creation: Proxmox can't change it afterwards.",
        json_schema_extra=setting_doc(
            why="root inside is not root on the host",
            runtime="`pct create` only: Proxmox can't change it later (refused)",
        ),
    )
    features: str = Field(
        default="nesting=1",
        description="pct --features property string (nesting=1 lets systemd in Debian 12+ "
        "containers sandbox its services; keyctl=1 for Docker in unprivileged containers). "
        "Values 0 or 1; mount= file system types separated by ';'.",
        json_schema_extra=setting_doc(
            why="systemd in Debian 12+ containers wants nesting",
            runtime="`pct create --features`, then `pct set`",
        ),
    )
    onboot: bool = Field(
        default=True, description="Start the container when the Proxmox host boots.",
        json_schema_extra=setting_doc(
            why="an inference server comes back after a host boot",
            runtime="`pct set --onboot`",
        ),
    )
    gpus: Literal["all"] | list[int] = Field(
        default="all",
        description="Which GPUs the container gets: 'all', or a list of indices N of "
        "/dev/nvidiaN on the host (the device minor, not always the nvidia-smi order).",
        json_schema_extra=setting_doc(
            runtime="GPU lines computed from the host's /proc/devices and /dev/nvidia*, never "
                    "hard-coded",
        ),
    )
    memlock: Literal["unlimited"] | int = Field(
        default="unlimited",
        description="lxc.prlimit.memlock: 'unlimited' or a byte count (up to 2**50). CUDA "
        "pins host memory; the limit can't be raised from inside the container.",
        json_schema_extra=setting_doc(
            why="CUDA pins host memory; only the host can raise the container's limit",
            runtime="`lxc.prlimit.memlock` in /etc/pve/lxc/VMID.conf",
        ),
    )
    gpu_passthrough: Literal["auto", "dev", "mount"] = Field(
        default="auto",
        description="How the GPU nodes are passed: 'dev' as Proxmox devN keys (dev0: "
        "/dev/nvidia0; Proxmox creates the node and allows it), 'mount' as lxc.mount.entry "
        "bind mounts plus lxc.cgroup2.devices.allow lines, 'auto' devN where the host's "
        "Proxmox has them (pve-manager 8.2 or later), else mount. A node passed either way, "
        "or by the user's own mount of it, counts as passed; 'dev'/'mount' also rewrite "
        "gpunode's own lines of the other style.",
        json_schema_extra=setting_doc(
            runtime="a node missing on the host gets an optional mount instead of `devN` (Proxmox "
                    "won't start with a missing devN path); `dev` on a Proxmox older than 8.2 is "
                    "refused before any change",
        ),
    )
    cpuset_cpus: str | None = Field(
        default="auto",
        description="lxc.cgroup2.cpuset.cpus: 'auto' = the CPUs of the NUMA node(s) of the "
        "container's GPUs (from /sys/bus/pci/devices/BDF/numa_node and the node's cpulist; "
        "nothing is set on a single-node host), a CPU list such as '0-15,32-47', or None to "
        "leave the key alone. A fixed cpuset also stops pvestatd moving the container's "
        "threads to other CPUs; 'cores' then no longer picks them (the container runs on "
        "the whole cpuset).",
        json_schema_extra=setting_doc(
            why="a fixed cpuset keeps the container on its GPUs' NUMA node and stops pvestatd "
                "rebalancing it over the whole host",
            runtime="GPU index -> BDF from `/proc/driver/nvidia/gpus/*/information`, its NUMA "
                    "node's `cpulist`; a given list is checked against the host's CPUs",
        ),
    )
    cpuset_mems: str | None = Field(
        default="auto",
        description="lxc.cgroup2.cpuset.mems: 'auto' = the NUMA node(s) of the container's "
        "GPUs, a node list such as '1' or '0-1', or None to leave the key alone.",
        json_schema_extra=setting_doc(
            runtime="a given node list is checked against the host's NUMA nodes",
        ),
    )
    extra_lxc: list[str] = Field(
        default_factory=list,
        max_length=128,
        description="More raw lines for /etc/pve/lxc/VMID.conf, each 'lxc.key: value' with "
        "a key Proxmox accepts (lxc.cgroup2.*, lxc.mount.entry, lxc.idmap, ...; not the cgroup v1 "
        "lxc.cgroup.*, ignored on cgroup v2 hosts such as Proxmox VE 9). They are "
        "added if missing; NVIDIA mounts and memlock come from 'gpus' and 'memlock'. Mount "
        "paths must be normalised (no '..'). lxc.hook.* lines are accepted and run their "
        "command on the Proxmox host as root at every container start: the dry run lists "
        "them.",
        json_schema_extra=setting_doc(
            runtime="each line added to /etc/pve/lxc/VMID.conf when missing",
        ),
    )
    restart_allowed: bool = Field(
        default=False,
        description="May gpunode restart the running container to apply changes that only "
        "take effect at start (raw lxc.* lines, [pve:pending] options)? If not, the run "
        "reports 'pending restart' and changes nothing else.",
        json_schema_extra=setting_doc(
            why="a restart stops the model server: opt in; otherwise the run reports \"pending "
                "restart\"",
            runtime="`pct reboot` when the running container lacks declared lines or has options "
                    "waiting in [pve:pending]",
        ),
    )
    nvidia_driver: str | None = Field(
        default=None,
        description="NVIDIA driver version for the container's user-space libraries, e.g. "
        "'550.127.05'. It must equal the host's driver exactly (else 'NVML: Driver/library "
        "version mismatch'); None means: use the host's version.",
        json_schema_extra=setting_doc(
            why="the libraries must equal the host's module exactly, else \"NVML: Driver/library "
                "version mismatch\"",
        ),
    )

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not _HOSTNAME_RE.fullmatch(value):
            raise ValueError(
                "must be one RFC 1123 label: letters, digits and '-', 1-63 characters, "
                "not starting or ending with '-' (no dots, no underscores)"
            )
        return value

    @field_validator("ostemplate")
    @classmethod
    def _ostemplate(cls, value: str) -> str:
        if not _OSTEMPLATE_RE.fullmatch(value):
            raise ValueError(
                "must be 'STORAGE:vztmpl/FILE.tar.zst' (or .tar.gz/.tar.xz; FILE of letters, "
                "digits, _ . + -), e.g. "
                "'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'"
            )
        return value

    @field_validator("rootfs_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not _STORAGE_RE.fullmatch(value):
            raise ValueError("must be a Proxmox storage id such as 'local-lvm' or 'local-zfs'")
        return value

    @field_validator("net0")
    @classmethod
    def _net0(cls, value: str) -> str:
        props = _checked_properties(value, _NET_VALUES, "net0")
        if not props.get("name"):
            raise ValueError("needs name=IFACE, e.g. 'name=eth0,bridge=vmbr0,ip=dhcp'")
        return value

    @field_validator("features")
    @classmethod
    def _features(cls, value: str) -> str:
        _checked_properties(value, _FEATURE_VALUES, "feature")
        return value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if value == "all":
            return value
        if not isinstance(value, list):
            raise ValueError("must be 'all' or a list of GPU indices like [0, 1]")
        if not value:
            raise ValueError("is empty: use 'all' or list at least one GPU index")
        if len(value) > MAX_GPU_INDEX + 1:
            raise ValueError(f"lists {len(value)} GPUs: at most {MAX_GPU_INDEX + 1}")
        for i, item in enumerate(value):
            if (
                isinstance(item, bool)
                or not isinstance(item, int)
                or not 0 <= item <= MAX_GPU_INDEX
            ):
                raise ValueError(
                    f"item {i}: {shown(item)} is not a GPU index (an integer 0..{MAX_GPU_INDEX})"
                )
        for i, item in enumerate(value):
            if item in value[:i]:
                raise ValueError(f"item {i}: lists GPU {item} a second time")
        return value

    @field_validator("memlock", mode="before")
    @classmethod
    def _memlock(cls, value: Any) -> Any:
        if value == "unlimited":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_MEMLOCK:
            raise ValueError(
                f"{shown(value)}: must be 'unlimited' or a positive number of bytes up to 2**50"
            )
        return value

    @field_validator("extra_lxc")
    @classmethod
    def _extra_lxc(cls, value: list[str]) -> list[str]:
        for i, line in enumerate(value):
            try:
                parse_extra_lxc_line(line)
            except ValueError as exc:
                raise ValueError(f"item {i}: {exc}") from None
        return value

    @field_validator("cpuset_cpus", "cpuset_mems")
    @classmethod
    def _cpuset(cls, value: str | None) -> str | None:
        if value is not None and value != "auto" and not CPULIST_RE.fullmatch(value):
            raise ValueError("must be 'auto', a list such as '0-15,32-47', or null")
        return value

    @field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        return checked_driver_version(value)

    @property
    def extra_lxc_entries(self) -> list[tuple[str, str]]:
        return [parse_extra_lxc_line(line) for line in self.extra_lxc]

    @property
    def hook_note(self) -> str:
        """' (runs on this host: ...)' naming the extra_lxc hooks, for the dry-run line."""
        hooks = sorted({key for key, _ in self.extra_lxc_entries if key.startswith("lxc.hook.")})
        if not hooks:
            return ""
        return f" (extra_lxc {', '.join(hooks)}: runs commands as root on this Proxmox host)"

    @property
    def gpu_indices(self) -> list[int] | None:
        """None for 'all', else the sorted indices."""
        return None if self.gpus == "all" else sorted(self.gpus)


# --- validation --------------------------------------------------------------


class SpecProblem(BaseModel):
    """One problem: where, what was given, and what would be right."""

    field: str
    value: Any
    problem: str
    fix: str


class ContainerSpecError(ValueError):
    """Raised before any change when the declared containers can't be applied.

    ``str(err)`` names the host, the field path, the bad value and the fix, one
    problem per line; ``err.problems`` has them as data.
    """

    def __init__(self, host: str, problems: list[SpecProblem]):
        self.host = host
        self.problems = problems
        lines = [
            f"{host}: {p.field} = {shown(p.value)}: {p.problem}. Fix: {p.fix}" for p in problems
        ]
        super().__init__("\n".join(lines))

    @property
    def field(self) -> str:
        return self.problems[0].field


_FIX_HINTS: dict[str, str] = {
    "vmid": "use an integer from 100 to 999999999 that no other guest in the cluster uses",
    "hostname": "use one DNS label such as 'llm-a'",
    "ostemplate": "use a template volume like 'local:vztmpl/debian-12-standard_12.7-1_amd64"
    ".tar.zst' (`pveam list local` shows the downloaded ones)",
    "cores": "use an integer from 1 to 8192",
    "memory": "use an integer number of MiB, at least 16",
    "swap": "use an integer number of MiB, 0 or more",
    "rootfs_storage": "use a storage id from `pvesm status` that holds container disks",
    "rootfs_size_gb": "use an integer number of GiB, at least 1",
    "net0": "write it as Proxmox does, e.g. 'name=eth0,bridge=vmbr0,ip=dhcp'",
    "features": "write it as Proxmox does, e.g. 'nesting=1,keyctl=1'",
    "unprivileged": "use true or false",
    "onboot": "use true or false",
    "restart_allowed": "use true or false",
    "gpus": "use 'all' or a list of indices of /dev/nvidiaN on the host, e.g. [0, 1]",
    "memlock": "use 'unlimited' or a positive integer number of bytes",
    "extra_lxc": "write each line as 'lxc.key: value' with a key Proxmox accepts",
    "nvidia_driver": "use the host driver's version, e.g. '550.127.05', or leave it unset",
    "gpu_passthrough": "use 'auto', 'dev' or 'mount'",
    "cpuset_cpus": "use 'auto', a CPU list from the host such as '0-15,32-47', or null",
    "cpuset_mems": "use 'auto', a NUMA node list from the host such as '1', or null",
}


_ITEM_RE = re.compile(r"^item (\d+): (.*)$", re.DOTALL)


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ContainerSpec.model_fields:
            path += f".{part}"
        # Other parts are pydantic's union-member tags ("literal['all']"): skip them.
    return path


def _problems_from_validation(
    prefix: str, raw: dict[str, Any], exc: ValidationError
) -> list[SpecProblem]:
    problems: dict[str, SpecProblem] = {}
    allowed_keys = ", ".join(ContainerSpec.model_fields)
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        field = next((p for p in loc if isinstance(p, str)), "")
        path = _path(prefix, loc)
        if err["type"] == "extra_forbidden":
            path = f"{prefix}.{field}"
            problem = "unknown key"
            fix = f"remove it or use one of: {allowed_keys}"
        elif err["type"] == "missing":
            path = f"{prefix}.{field}"
            problem = "is required"
            fix = _FIX_HINTS.get(field, "set it")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problem = msg[0].lower() + msg[1:] if msg else "is invalid"
            fix = _FIX_HINTS.get(field, "see the field's description in ContainerSpec")
        value = raw.get(field) if isinstance(raw, dict) else raw
        item = _ITEM_RE.match(problem)
        if item and isinstance(value, list):
            index = int(item.group(1))
            path, problem = f"{path}[{index}]", item.group(2)
            value = value[index] if index < len(value) else None
        if path not in problems:
            problems[path] = SpecProblem(field=path, value=value, problem=problem, fix=fix)
    return list(problems.values())


def validate_containers(
    host_name: str,
    raw: Any,
    existing: dict[int, str],
    gpu_count: int,
) -> list[ContainerSpec]:
    """Validate the declared containers of one Proxmox host against its facts.

    ``existing`` maps the vmids already used (cluster-wide, VMs too) to the guest's
    name; a vmid that exists under another name is an error, under the same name
    it is this container. ``gpu_count`` is the number of /dev/nvidiaN on the host
    (indices 0..gpu_count-1). Every problem is reported at once.
    """
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ContainerSpecError(
            host_name,
            [
                SpecProblem(
                    field="containers",
                    value=raw,
                    problem="is not a list",
                    fix="declare containers as a list of mappings, one per container",
                )
            ],
        )
    specs: list[ContainerSpec] = []
    problems: list[SpecProblem] = []
    for i, item in enumerate(raw):
        prefix = f"containers[{i}]"
        if not isinstance(item, dict):
            problems.append(
                SpecProblem(
                    field=prefix,
                    value=item,
                    problem="is not a mapping",
                    fix="write each container as a mapping with vmid, hostname, ostemplate...",
                )
            )
            continue
        try:
            specs.append(ContainerSpec.model_validate(item))
        except ValidationError as exc:
            problems.extend(_problems_from_validation(prefix, item, exc))
        problems.extend(_check_against_host(prefix, item, existing, gpu_count))

    problems.extend(_check_unique(raw))
    if problems:
        raise ContainerSpecError(host_name, problems)
    return specs


def _check_against_host(
    prefix: str, item: dict[str, Any], existing: dict[int, str], gpu_count: int
) -> list[SpecProblem]:
    """vmid taken by another guest, GPU indices the host lacks. Reads the raw item so
    these are reported even when other fields of the container are wrong too."""
    problems = []
    vmid, hostname, gpus = item.get("vmid"), item.get("hostname"), item.get("gpus", "all")
    other = existing.get(vmid) if isinstance(vmid, int) and not isinstance(vmid, bool) else None
    if other is not None and other != hostname:
        free = _free_vmid(existing)
        problems.append(
            SpecProblem(
                field=f"{prefix}.vmid",
                value=vmid,
                problem=f"is already used by another guest named {other!r}",
                fix=f"pick a free vmid (e.g. {free}), or set hostname to {other!r} if that "
                "guest is this container",
            )
        )
    if gpu_count <= 0:
        problems.append(
            SpecProblem(
                field=f"{prefix}.gpus",
                value=gpus,
                problem="the host has no NVIDIA GPU device (/dev/nvidiaN)",
                fix="install and load the NVIDIA driver on the host (nvidia-smi must list "
                "the GPUs), or remove this container from the host's data",
            )
        )
    elif isinstance(gpus, list):
        for j, index in enumerate(gpus):
            if isinstance(index, int) and not isinstance(index, bool) and index >= gpu_count:
                problems.append(
                    SpecProblem(
                        field=f"{prefix}.gpus[{j}]",
                        value=index,
                        problem=f"no such GPU: the host has {gpu_count} "
                        f"(indices 0..{gpu_count - 1})",
                        fix=f"use indices from 0 to {gpu_count - 1}, or 'all'",
                    )
                )
    return problems


def _check_unique(raw: list[Any]) -> list[SpecProblem]:
    """Two declared containers with the same vmid, or the same hostname."""
    problems = []
    seen: dict[str, dict[Any, int]] = {"vmid": {}, "hostname": {}}
    fixes = {
        "vmid": "give every container its own vmid",
        "hostname": "give every container on a host its own hostname",
    }
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            continue
        for key in ("vmid", "hostname"):
            value = item.get(key)
            if value is None or isinstance(value, (bool, list, dict)):
                continue
            if value in seen[key]:
                problems.append(
                    SpecProblem(
                        field=f"containers[{i}].{key}",
                        value=value,
                        problem=f"is also declared by containers[{seen[key][value]}]",
                        fix=fixes[key],
                    )
                )
            else:
                seen[key][value] = i
    return problems


def _free_vmid(existing: dict[int, str]) -> int:
    vmid = 100
    while vmid in existing:
        vmid += 1
    return vmid


# --- pct command lines -----------------------------------------------------------


def _bool(value: bool) -> str:
    return "1" if value else "0"


def pct_create_args(spec: ContainerSpec) -> list[str]:
    """argv of the ``pct create`` that makes the container (stopped; gpunode starts it
    after writing the GPU lines)."""
    return [
        "pct",
        "create",
        str(spec.vmid),
        spec.ostemplate,
        "--hostname",
        spec.hostname,
        "--cores",
        str(spec.cores),
        "--memory",
        str(spec.memory),
        "--swap",
        str(spec.swap),
        "--rootfs",
        f"{spec.rootfs_storage}:{spec.rootfs_size_gb}",
        "--net0",
        spec.net0,
        "--unprivileged",
        _bool(spec.unprivileged),
        "--features",
        spec.features,
        "--onboot",
        _bool(spec.onboot),
        "--start",
        "0",
    ]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "on", "true")


def _props_equal(desired: dict[str, str], current: dict[str, str], ignore: frozenset) -> bool:
    def norm(props: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in props.items() if k not in ignore or k in desired}

    return norm(desired) == norm(current)


def _features_equal(desired: str, current: str | None) -> bool:
    def norm(value: str | None) -> dict[str, str]:
        props = parse_property_string(value or "")
        out = {}
        for key, val in props.items():
            if key == "mount":
                out[key] = ";".join(sorted(v for v in val.split(";") if v))
            else:
                out[key] = "1" if _truthy(val) else "0"
        return {k: v for k, v in out.items() if v not in ("0", "")}

    return norm(desired) == norm(current)


def _desired_net0(spec: ContainerSpec, current: str | None) -> str | None:
    """The net0 to set, or None when the current one already matches."""
    desired = parse_property_string(spec.net0)
    now = parse_property_string(current or "")
    if current is not None and _props_equal(desired, now, _NET_FILLED_BY_PROXMOX):
        return None
    if "hwaddr" not in desired and "hwaddr" in now:
        # Keep the MAC address: a new one means a new DHCP lease and a new IPv6 address.
        desired = {**desired, "hwaddr": now["hwaddr"]}
    return _format_property_string(desired)


def pct_set_args(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """argv of the ``pct set`` that converges the options that differ, or [].

    ``current`` is the main section of /etc/pve/lxc/VMID.conf (see
    ``gpunode.roles.lxc_gpu.pve_config.main_options``). Compared: hostname, cores, memory,
    swap, net0 (ignoring the hwaddr/type Proxmox adds, keeping the MAC), features,
    onboot. On a running container Proxmox applies hostname, cores and onboot at
    once, memory/swap live when it can, and parks the rest in [pve:pending].
    """
    options: list[str] = []

    def differs(key: str, want: str) -> None:
        if current.get(key) != want:
            options.extend([f"--{key}", want])

    differs("hostname", spec.hostname)
    differs("cores", str(spec.cores))
    differs("memory", str(spec.memory))
    # Proxmox's default swap is 512 when the key is absent.
    if current.get("swap", "512") != str(spec.swap):
        options.extend(["--swap", str(spec.swap)])
    net0 = _desired_net0(spec, current.get("net0"))
    if net0 is not None:
        options.extend(["--net0", net0])
    if not _features_equal(spec.features, current.get("features")):
        options.extend(["--features", spec.features])
    if _truthy(current.get("onboot")) != spec.onboot:
        options.extend(["--onboot", _bool(spec.onboot)])
    if not options:
        return []
    return ["pct", "set", str(spec.vmid), *options]


_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_SIZE_UNITS = {"": 1 / (1024**3), "K": 1 / (1024**2), "M": 1 / 1024, "G": 1, "T": 1024}


def rootfs_size_gb(rootfs: str | None) -> float | None:
    """The size=... of a rootfs value in GiB (``local-lvm:vm-110-disk-0,size=64G``)."""
    size = parse_property_string(rootfs or "").get("size")
    match = _SIZE_RE.match(size or "")
    if not match:
        return None
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)]


def pct_resize_args(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """argv of ``pct resize VMID rootfs NG`` when the disk must grow, else [].
    A smaller declared size is reported by :func:`immutable_mismatches`."""
    size = rootfs_size_gb(current.get("rootfs"))
    if size is None or spec.rootfs_size_gb <= size:
        return []
    return ["pct", "resize", str(spec.vmid), "rootfs", f"{spec.rootfs_size_gb}G"]


def immutable_mismatches(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """Differences gpunode can't converge on an existing container, as messages."""
    problems = []
    is_unprivileged = _truthy(current.get("unprivileged"))
    if is_unprivileged != spec.unprivileged:
        problems.append(
            f"container {spec.vmid}: unprivileged is {_bool(is_unprivileged)} but the spec "
            f"says {_bool(spec.unprivileged)}; Proxmox can't change it after creation "
            "(back up and restore with --unprivileged, or change the spec)"
        )
    size = rootfs_size_gb(current.get("rootfs"))
    if size is not None and spec.rootfs_size_gb < size:
        problems.append(
            f"container {spec.vmid}: rootfs is {size:g} GiB, the spec says "
            f"{spec.rootfs_size_gb} GiB; a container disk can't shrink (raise "
            "rootfs_size_gb to at least the current size)"
        )
    return problems
