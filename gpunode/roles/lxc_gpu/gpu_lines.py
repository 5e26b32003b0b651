"""The GPU lines of a container config: their keys, how each value is read, what the container
should get (``GpuLines``) and what gpunode does with each line (``Decision``).

Pure parsing, shared by the takeover (``lxc_gpu.takeover``), its allow lines
(``lxc_gpu.allow_lines``) and the audit: a mount line is identified by its normalised
**target** (``/dev/nvidia0`` and ``dev/nvidia0`` are the same), a Proxmox ``devN`` key by its
path, a ``lxc.cgroup2.devices.allow`` rule by its type, major, minor and permissions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpunode.facts.nvidia_devices import (
    DeviceNode,
    NvidiaMajors,
    gpu_indices_on_host,
    nvidia_majors,
)
from gpunode.facts.pve_config import ConfigLine, mount_target
from gpunode.roles.lxc_gpu.passthrough import gpu_passthrough_lines

MODESET_MINOR = 254
DEV_KEY_RE = re.compile(r"^dev(\d+)$")
SCOPE_TARGET_RE = re.compile(
    r"^dev/(nvidia\d+|nvidiactl|nvidia-uvm|nvidia-uvm-tools|nvidia-caps)$"
)
GPU_TARGET_RE = re.compile(r"^dev/nvidia(\d+)$")
_ALLOW_RE = re.compile(r"^([abc])\s+(\d+|\*):(\d+|\*)\s+([rwm]+)$")
ALLOW_KEY = "lxc.cgroup2.devices.allow"
MOUNT_KEY = "lxc.mount.entry"
MEMLOCK_KEY = "lxc.prlimit.memlock"
CPUS_KEY = "lxc.cgroup2.cpuset.cpus"
MEMS_KEY = "lxc.cgroup2.cpuset.mems"

AllowRule = tuple[str, int | None, int | str, str]
"""A parsed allow rule: (type, major or None for ``*``, minor or ``"*"``, permissions)."""


@dataclass(frozen=True)
class Decision:
    """What gpunode does with one GPU line, and why. ``action`` is ``keep``, ``add``,
    ``replace`` (``line`` becomes ``new``), ``remove`` or ``leave`` (the user's, untouched)."""

    action: str
    line: str
    reason: str
    new: str | None = None

    def __str__(self) -> str:
        arrow = f" -> {self.new}" if self.new is not None else ""
        return f"{self.action}: {self.line}{arrow} ({self.reason})"


@dataclass(frozen=True)
class GpuLines:
    """What the container should get: node paths, passthrough style, single-valued keys."""

    majors: NvidiaMajors
    devices: tuple[DeviceNode, ...]
    selected: tuple[int, ...]
    """The GPU minors the container declares."""
    all_gpus: bool
    """Every GPU of the host is selected (then one ``c 195:* rwm`` covers them)."""
    style: str
    """``dev`` (devN keys where the node exists) or ``mount`` (lxc.mount.entry)."""
    convert: bool = False
    """The style was chosen explicitly: gpunode's own lines of the other style are rewritten."""
    singles: tuple[tuple[str, str], ...] = ()
    """Single-valued lxc keys with their wanted value (memlock, cpuset)."""
    registered: frozenset[int] = frozenset()
    """Every char-device major the host's /proc/devices lists (others are stale)."""

    @property
    def ours(self) -> set[int]:
        """The NVIDIA majors gpunode passes: the frontend, nvidia-uvm and nvidia-caps."""
        nv = self.majors
        return {nv.frontend} | {m for m in (nv.uvm, nv.caps) if m is not None}


# --- reading values -------------------------------------------------------------------------






def mount_source(value: str) -> str:
    fields = value.split()
    return fields[0] if fields else ""


def mount_options(value: str) -> list[str]:
    fields = value.split()
    return fields[3].split(",") if len(fields) >= 4 else []




def dev_denies_write(value: str) -> bool:
    props = dict(p.strip().partition("=")[::2] for p in value.split(",")[1:])
    return props.get("deny-write", "0").strip() in ("1", "yes", "on", "true")


def parse_allow(value: str) -> AllowRule | None:
    """``c 195:* rwm`` -> ("c", 195, "*", "rwm"); None when not a device rule."""
    match = _ALLOW_RE.match(value.strip())
    if not match:
        return None
    kind, major, minor, perms = match.groups()
    return (
        kind,
        None if major == "*" else int(major),
        minor if minor == "*" else int(minor),
        perms,
    )


def allow_rule(line: ConfigLine) -> AllowRule | None:
    """The rule of an ``lxc.cgroup2.devices.allow`` line (None for any other line)."""
    return parse_allow(line.value or "") if line.key == ALLOW_KEY else None


def passthrough_style(choice: str, pve_manager_version: str | None) -> tuple[str, bool]:
    """(style, explicit) for ``gpu_passthrough``: ``auto`` is ``dev`` where Proxmox has devN
    keys (pve-manager 8.2 or later), else ``mount``; an unknown version means ``mount``."""
    if choice in ("dev", "mount"):
        return choice, True
    return ("dev" if _version_at_least(pve_manager_version, (8, 2)) else "mount"), False


def _version_at_least(version: str | None, wanted: tuple[int, int]) -> bool:
    match = re.match(r"^(\d+)\.(\d+)", version or "")
    if match is None:
        return False
    return (int(match.group(1)), int(match.group(2))) >= wanted


# --- which lines are GPU lines --------------------------------------------------------------


def in_scope_target(target: str) -> bool:
    """``dev/nvidia0``, ``dev/nvidiactl``, ``dev/nvidia-uvm(-tools)``, ``dev/nvidia-caps``."""
    return bool(SCOPE_TARGET_RE.match(target))


def in_scope_mount(line: ConfigLine) -> bool:
    target = mount_target(line.value or "")
    return target is not None and bool(SCOPE_TARGET_RE.match(target))


def is_gpu_grant(want: GpuLines, major: int | None, minor: int | str) -> bool:
    """An NVIDIA major gpunode passes, and not nvidia-modeset (``c 195:254``, the user's)."""
    return major in want.ours and not (major == want.majors.frontend and minor == MODESET_MINOR)


def nvidia_allow(value: str, want: GpuLines) -> bool:
    """A ``c MAJOR:MINOR`` rule for an NVIDIA major gpunode passes (not nvidia-modeset)."""
    rule = parse_allow(value)
    return rule is not None and rule[0] == "c" and is_gpu_grant(want, rule[1], rule[2])


def gpu_lines_for(
    devices: Sequence[DeviceNode],
    majors: dict[str, int],
    gpu_indices: list[int] | None,
    style: str = "mount",
    convert: bool = False,
    singles: Sequence[tuple[str, str]] = (),
) -> GpuLines:
    """``GpuLines`` from the host's facts; raises PassthroughError as gpu_passthrough_lines."""
    gpu_passthrough_lines(devices, majors, gpu_indices, memlock=None)  # same checks, same errors
    on_host = gpu_indices_on_host(devices)
    selected = on_host if gpu_indices is None else sorted(set(gpu_indices))
    return GpuLines(
        majors=nvidia_majors(majors),
        devices=tuple(devices),
        selected=tuple(selected),
        all_gpus=selected == on_host,
        style=style,
        convert=convert,
        singles=tuple(singles),
        registered=frozenset(majors.values()),
    )
