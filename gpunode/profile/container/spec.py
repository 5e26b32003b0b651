"""ContainerSpec: the schema of one declared container (its fields, documented once here,
and the checks of each value on its own; the checks against the host are in validate)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpunode.profile.allowed import UserValues, shown
from gpunode.profile.container.lxc_lines import parse_extra_lxc_line
from gpunode.profile.container.values import (
    FEATURE_VALUES,
    NET_VALUES,
    checked_driver_version,
    checked_properties,
)
from gpunode.profile.danger import check_i_know, lxc_dangers, unacknowledged
from gpunode.profile.docs import setting_doc

# Every pattern is matched whole (re.fullmatch): '$' would accept a trailing newline.
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# STORAGE:vztmpl/NAME.tar.{gz,xz,zst}; storage ids as Proxmox's pve-storage-id format.
_OSTEMPLATE_RE = re.compile(
    r"[A-Za-z][A-Za-z0-9\-_.]{0,63}:vztmpl/[A-Za-z0-9][A-Za-z0-9_.+\-]{0,200}"
    r"\.(?:tar\.(?:gz|xz|zst)|tgz)"
)
_STORAGE_RE = re.compile(r"[A-Za-z][A-Za-z0-9\-_.]{0,62}[A-Za-z0-9]")

#: field -> (anchored pattern, what a value must be): the fields checked by pattern alone.
_PATTERNS = {
    "hostname": (_HOSTNAME_RE, "must be one RFC 1123 label: letters, digits and '-', 1-63 "
                 "characters, not starting or ending with '-' (no dots, no underscores)"),
    "ostemplate": (_OSTEMPLATE_RE, "must be 'STORAGE:vztmpl/FILE.tar.zst' (or .tar.gz/.tar.xz; "
                   "FILE of letters, digits, _ . + -), e.g. "
                   "'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'"),
    "rootfs_storage": (_STORAGE_RE, "must be a Proxmox storage id such as 'local-lvm' or "
                       "'local-zfs'"),
}
#: Upper bounds: Proxmox's own limits where it has one, else far beyond any real host.
MAX_MEMORY_MIB = 64 * 1024 * 1024
MAX_DISK_GIB = 1024 * 1024
MAX_GPU_INDEX = 255
MAX_MEMLOCK = 1 << 50
# A Linux cpu/node list as cpuset.cpus and cpuset.mems take it: "0-15,32-47", "1".
CPULIST_RE = re.compile(r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?){0,255}")


class ContainerSpec(UserValues):
    """One LXC container on a Proxmox GPU host, for LLM inference (one-line text, unknown keys
    refused: UserValues)."""

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
    i_know: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Dangerous extra_lxc lines you mean: 'lxc.cgroup2.devices.allow' (for "
        "'a': every host device) and 'lxc.apparmor.profile' (for 'unconfined'); without the "
        "name such a line is refused.",
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

    @field_validator("hostname", "ostemplate", "rootfs_storage")
    @classmethod
    def _pattern(cls, value: str, info: ValidationInfo) -> str:
        pattern, message = _PATTERNS[info.field_name or ""]
        if not pattern.fullmatch(value):
            raise ValueError(message)
        return value

    @field_validator("net0")
    @classmethod
    def _net0(cls, value: str) -> str:
        props = checked_properties(value, NET_VALUES, "net0")
        if not props.get("name"):
            raise ValueError("needs name=IFACE, e.g. 'name=eth0,bridge=vmbr0,ip=dhcp'")
        return value

    @field_validator("features")
    @classmethod
    def _features(cls, value: str) -> str:
        checked_properties(value, FEATURE_VALUES, "feature")
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
        for part in (value or "").split(","):
            low, _, high = part.partition("-")
            if high and int(high) < int(low):
                raise ValueError(f"range {part!r} runs backwards: write it as '{high}-{low}'")
        return value

    @field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        return checked_driver_version(value)

    @field_validator("i_know")
    @classmethod
    def _acknowledged(cls, value: list[str]) -> list[str]:
        return check_i_know(value)

    @model_validator(mode="after")
    def _dangers_acknowledged(self) -> ContainerSpec:
        refusal = unacknowledged(lxc_dangers(self.extra_lxc_entries), self.i_know)
        if refusal:
            raise ValueError(f"extra_lxc: {refusal}")
        return self

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
