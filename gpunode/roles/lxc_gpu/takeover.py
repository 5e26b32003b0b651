"""Converge the GPU lines of a container config as people really write them.

A container that already has GPU lines written by hand is taken over, not fought: every
line that hands an NVIDIA node to the container is recognised by what it gives the
container, and gpunode decides, per line, to keep it, replace it, remove it or leave it
alone, and says why (``Decision``). Lines it does not need to change stay byte-identical
in place; converging twice gives the same text.

- A mount line is identified by its **target** inside the container (``dev/nvidia0`` and
  ``/dev/nvidia0`` are the same), not its source, so the user's own mount of a node, even
  from another path, is recognised and never doubled.
- Proxmox ``devN:`` keys (PVE 8.2 and later: ``dev0: /dev/nvidia0,gid=44``) pass a node
  too: Proxmox creates it in the container and allows its major:minor itself
  (``PVE::LXC::update_lxc_config``, ``foreach_passthrough_device``). A GPU passed as devN
  counts as passed. Proxmox refuses to start a container whose devN path does not exist,
  so a node missing on the host gets an ``optional`` mount instead.
- The nodes gpunode manages: the selected ``/dev/nvidiaN``, ``nvidiactl``, ``nvidia-uvm``,
  ``nvidia-uvm-tools`` and the ``nvidia-caps`` directory. Others (``nvidia-modeset``,
  single ``nvidia-caps/nvidia-capN`` files, ``/dev/dri``) are the user's: left alone.
- ``lxc.cgroup2.devices.allow`` lines for an NVIDIA major are kept unless they grant a GPU
  the container does not declare (or a major no driver registers any more, next to other
  GPU lines: a stale nvidia-uvm major); the grants mounted nodes need are added when no kept
  line covers them. ``c 195:254`` (nvidia-modeset) is the user's.
- ``lxc.prlimit.memlock`` and ``lxc.cgroup2.cpuset.cpus``/``.mems`` are single-valued:
  replaced in place when they differ.

cgroup v1 keys (``lxc.cgroup.*``) are not touched here.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpunode.roles.lxc_gpu import pve_config
from gpunode.roles.lxc_gpu.passthrough import (
    NVIDIACTL_MINOR,
    DeviceNode,
    NvidiaMajors,
    PassthroughError,
    gpu_indices_on_host,
    gpu_passthrough_lines,
    nvidia_majors,
)
from gpunode.roles.lxc_gpu.pve_config import ConfigLine, PveLxcConfig

__all__ = [
    "Decision",
    "GpuLines",
    "Takeover",
    "converge_gpu_lines",
    "dev_path",
    "gpu_lines_for",
    "in_scope_target",
    "mount_source",
    "mount_target",
    "nvidia_allow",
    "passthrough_style",
    "stale_allow",
]

MODESET_MINOR = 254
MAX_DEV_KEYS = 256  # PVE::LXC::Config $MAX_DEVICES
_DEV_KEY_RE = re.compile(r"^dev(\d+)$")
_SCOPE_TARGET_RE = re.compile(
    r"^dev/(nvidia\d+|nvidiactl|nvidia-uvm|nvidia-uvm-tools|nvidia-caps)$"
)
_GPU_TARGET_RE = re.compile(r"^dev/nvidia(\d+)$")
_ALLOW_RE = re.compile(r"^([abc])\s+(\d+|\*):(\d+|\*)\s+([rwm]+)$")
ALLOW_KEY = "lxc.cgroup2.devices.allow"
MOUNT_KEY = "lxc.mount.entry"
MEMLOCK_KEY = "lxc.prlimit.memlock"
CPUS_KEY = "lxc.cgroup2.cpuset.cpus"
MEMS_KEY = "lxc.cgroup2.cpuset.mems"


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


@dataclass
class Takeover:
    """The converged config and one Decision per GPU line (in file order, then additions)."""

    config: PveLxcConfig
    decisions: list[Decision] = field(default_factory=list)

    @property
    def changed(self) -> list[Decision]:
        return [d for d in self.decisions if d.action in ("add", "replace", "remove")]


# --- reading lines ------------------------------------------------------------------------


def _normalize_target(path: str) -> str:
    """``/dev/nvidia0``, ``dev/nvidia0`` and ``./dev//nvidia0`` -> ``dev/nvidia0``."""
    return posixpath.normpath("/" + path.strip()).lstrip("/")


def mount_target(value: str) -> str | None:
    """The normalised target of an ``lxc.mount.entry`` value (fstab format), or None."""
    fields = value.split()
    return _normalize_target(fields[1]) if len(fields) >= 2 else None


def mount_source(value: str) -> str:
    fields = value.split()
    return fields[0] if fields else ""


def _mount_options(value: str) -> list[str]:
    fields = value.split()
    return fields[3].split(",") if len(fields) >= 4 else []


def dev_path(value: str) -> str:
    """The path of a Proxmox ``devN`` value: ``/dev/nvidia0,gid=44`` or ``path=/dev/nvidia0``."""
    for part in value.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep:
            return key
        if key == "path":
            return val
    return ""


def _dev_denies_write(value: str) -> bool:
    props = dict(p.strip().partition("=")[::2] for p in value.split(",")[1:])
    return props.get("deny-write", "0").strip() in ("1", "yes", "on", "true")


def _allow(value: str) -> tuple[str, int | None, int | str, str] | None:
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


# --- what the container needs ---------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    target: str
    """``dev/nvidia0``: the path inside the container, as mount lines name it."""
    create: str
    host: DeviceNode | None

    @property
    def path(self) -> str:
        return "/" + self.target


def _needed(want: GpuLines) -> dict[str, _Node]:
    on_host = {d.path: d for d in want.devices}
    names = [f"nvidia{i}" for i in want.selected]
    names += ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    nodes = {f"dev/{n}": _Node(f"dev/{n}", "file", on_host.get(f"/dev/{n}")) for n in names}
    nodes["dev/nvidia-caps"] = _Node("dev/nvidia-caps", "dir", on_host.get("/dev/nvidia-caps"))
    return nodes


def _new_mount(node: _Node) -> ConfigLine:
    value = f"{node.path} {node.target} none bind,optional,create={node.create}"
    return ConfigLine(f"{MOUNT_KEY}: {value}", "key", key=MOUNT_KEY, value=value)


def _can_dev(node: _Node) -> bool:
    return node.host is not None and node.host.kind == "char"


def _grants(want: GpuLines, mounted: set[str]) -> list[tuple[int, int | str]]:
    """The (major, minor) grants the mounted nodes need, in gpunode's usual order."""
    nv = want.majors
    grants: list[tuple[int, int | str]] = []
    gpus = [t for t in mounted if _GPU_TARGET_RE.match(t)]
    if gpus or "dev/nvidiactl" in mounted:
        if want.all_gpus:
            grants.append((nv.frontend, "*"))
        else:
            minors = sorted(int(_GPU_TARGET_RE.match(t).group(1)) for t in gpus)  # type: ignore[union-attr]
            grants.extend((nv.frontend, m) for m in minors)
            if "dev/nvidiactl" in mounted:
                grants.append((nv.frontend, NVIDIACTL_MINOR))
    if nv.uvm is not None and ({"dev/nvidia-uvm", "dev/nvidia-uvm-tools"} & mounted):
        grants.append((nv.uvm, "*"))
    if nv.caps is not None and "dev/nvidia-caps" in mounted:
        grants.append((nv.caps, "*"))
    return grants


# --- the convergence ------------------------------------------------------------------------


@dataclass
class _Edit:
    """Per original main-section index: drop it, or put ``lines`` in its place."""

    drop: set[int] = field(default_factory=set)
    replace: dict[int, ConfigLine] = field(default_factory=dict)
    after: dict[int, list[ConfigLine]] = field(default_factory=dict)
    tail: list[ConfigLine] = field(default_factory=list)
    options: list[tuple[str, str]] = field(default_factory=list)


def converge_gpu_lines(config: PveLxcConfig, want: GpuLines) -> Takeover:
    """Converge the main section's GPU lines to ``want`` (see the module docstring)."""
    lines = list(config.main.lines)
    needed = _needed(want)
    decisions: list[Decision] = []
    edit = _Edit()
    by_target, left_alone = _classify(lines)
    decisions += left_alone

    final: dict[str, str] = {}  # target -> "dev" | "mount" for the nodes passed after the edit
    pending_adds: list[tuple[_Node, int | None]] = []  # node, index of a line it replaces
    for target in sorted(set(by_target) | set(needed), key=_target_order):
        found = by_target.get(target, [])
        node = needed.get(target)
        if node is None:
            for i in found:
                edit.drop.add(i)
                decisions.append(Decision("remove", lines[i].raw, _not_declared(target)))
            continue
        kind, adds = _converge_node(node, found, lines, want, edit, decisions)
        if kind:
            final[target] = kind
        pending_adds += adds

    dev_keys = _used_dev_indices(config)
    mount_anchor = _last(lines, lambda ln: ln.key == MOUNT_KEY and _in_scope_mount(ln))
    if mount_anchor is None:
        mount_anchor = _last(lines, lambda ln: _nvidia_allow(ln, want))
    for node, replaced in pending_adds:
        style = "dev" if want.style == "dev" and _can_dev(node) else "mount"
        final[node.target] = style
        if style == "dev":
            key = _free_dev_key(dev_keys)
            edit.options.append((key, node.path))
            new_raw = f"{key}: {node.path}"
        else:
            new = _new_mount(node)
            new_raw = new.raw
            if replaced is not None and lines[replaced].key == MOUNT_KEY:
                edit.replace[replaced] = new
            else:
                _place(edit, mount_anchor, new)
        if replaced is not None:
            old = lines[replaced]
            if edit.replace.get(replaced) is None:
                edit.drop.add(replaced)
            why = _replace_reason(node, old, want)
            decisions.append(Decision("replace", old.raw, why, new_raw))
        else:
            decisions.append(Decision("add", new_raw, f"passes {node.path}"))

    mounted = {t for t, kind in final.items() if kind == "mount"}
    gpu_anchor = _converge_allows(lines, want, mounted, edit, decisions)
    for key, value in want.singles:
        _converge_single(lines, key, value, edit, decisions, gpu_anchor)
    return Takeover(_apply(config, lines, edit), decisions)


_FIXED_TARGETS = ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools", "dev/nvidia-caps")


def _target_order(target: str) -> tuple[int, int]:
    """GPUs by index, then nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-caps."""
    match = _GPU_TARGET_RE.match(target)
    return (0, int(match.group(1))) if match else (1, _FIXED_TARGETS.index(target))


def _not_declared(target: str) -> str:
    match = _GPU_TARGET_RE.match(target)
    if match:
        return f"GPU {match.group(1)} is not in this container's gpus"
    return f"/{target} is not passed by gpunode"


def in_scope_target(target: str) -> bool:
    """``dev/nvidia0``, ``dev/nvidiactl``, ``dev/nvidia-uvm(-tools)``, ``dev/nvidia-caps``."""
    return bool(_SCOPE_TARGET_RE.match(target))


def nvidia_allow(value: str, want: GpuLines) -> bool:
    """A ``c MAJOR:MINOR`` rule for an NVIDIA major gpunode passes (not nvidia-modeset)."""
    rule = _allow(value)
    nv = want.majors
    ours = {nv.frontend} | {m for m in (nv.uvm, nv.caps) if m is not None}
    return (
        rule is not None
        and rule[0] == "c"
        and rule[1] in ours
        and not (rule[1] == nv.frontend and rule[2] == MODESET_MINOR)
    )


def stale_allow(lines: Sequence[ConfigLine], index: int, want: GpuLines,
                registered: set[int]) -> bool:
    """An allow line for a major no driver registers now, inside a block of GPU lines:
    the nvidia-uvm major of an earlier driver or boot."""
    rule = _allow(lines[index].value or "") if lines[index].key == ALLOW_KEY else None
    if rule is None or rule[0] != "c" or rule[1] is None or rule[1] in registered:
        return False
    nv = want.majors
    ours = {nv.frontend} | {m for m in (nv.uvm, nv.caps) if m is not None}
    return _next_to_gpu_lines(lines, index, ours)


def _in_scope_mount(line: ConfigLine) -> bool:
    target = mount_target(line.value or "")
    return target is not None and bool(_SCOPE_TARGET_RE.match(target))


def _classify(lines: Sequence[ConfigLine]) -> tuple[dict[str, list[int]], list[Decision]]:
    """In-scope lines by target; NVIDIA lines gpunode leaves alone, with the reason."""
    by_target: dict[str, list[int]] = {}
    left: list[Decision] = []
    for i, line in enumerate(lines):
        if line.kind != "key" or line.key is None:
            continue
        value = line.value or ""
        if _DEV_KEY_RE.match(line.key):
            target = _normalize_target(dev_path(value))
        elif line.key == MOUNT_KEY:
            target = mount_target(value) or ""
        else:
            continue
        if _SCOPE_TARGET_RE.match(target):
            by_target.setdefault(target, []).append(i)
        elif "nvidia" in value:
            left.append(Decision("leave", line.raw, f"/{target} is not a node gpunode manages"))
    return by_target, left


def _converge_node(
    node: _Node,
    found: list[int],
    lines: Sequence[ConfigLine],
    want: GpuLines,
    edit: _Edit,
    decisions: list[Decision],
) -> tuple[str | None, list[tuple[_Node, int | None]]]:
    """Keep the best line passing ``node``; drop the others. Returns the kept line's kind
    (None: none kept) and the node to add, with the index of the line it replaces."""
    ranked = sorted(found, key=lambda i: _rank(node, lines[i], want))
    keeper = next((i for i in ranked if _rank(node, lines[i], want)[0] < 3), None)
    if keeper is not None and want.convert and _kind(lines[keeper]) != want.style:
        own = _rank(node, lines[keeper], want)[0] < 2  # gpunode's own style of line
        if own and (want.style == "mount" or _can_dev(node)):
            keeper = None
    replaced: int | None = None
    for i in found:
        line = lines[i]
        if i == keeper:
            decisions.append(Decision("keep", line.raw, _keep_reason(node, line)))
            continue
        if keeper is None and replaced is None:
            replaced = i
            continue
        edit.drop.add(i)
        if keeper is not None:
            why = f"{node.path} is already passed by: {lines[keeper].raw}"
        elif replaced is not None and _rank(node, line, want)[0] < 3:
            why = f"{node.path} is passed once, by the line that replaces {lines[replaced].raw}"
        else:
            why = _bad_reason(node, line)
        decisions.append(Decision("remove", line.raw, why))
    if keeper is not None:
        return _kind(lines[keeper]), []
    return None, [(node, replaced)]


def _kind(line: ConfigLine) -> str:
    return "mount" if line.key == MOUNT_KEY else "dev"


def _rank(node: _Node, line: ConfigLine, want: GpuLines) -> tuple[int, int]:
    """Lower is better: 0 a good line of the wanted style, 1 a good line of the other
    style, 2 the user's own mount from another source, 3 unusable."""
    value = line.value or ""
    if _kind(line) == "dev":
        usable = _can_dev(node) and not _dev_denies_write(value)
        return ((0 if want.style == "dev" else 1) if usable else 3, 0)
    options = _mount_options(value)
    if "bind" not in options and "rbind" not in options:
        return (3, 0)
    source = _normalize_target(mount_source(value))
    if source == node.target:
        return (0 if want.style == "mount" or not _can_dev(node) else 1, 1)
    if _other_known_node(source, node, want):
        return (3, 0)
    return (2, 0)


def _other_known_node(source: str, node: _Node, want: GpuLines) -> bool:
    """The source is another NVIDIA node of the host (a different GPU, say)."""
    for dev in want.devices:
        if _normalize_target(dev.path) == source:
            return node.host is None or (dev.major, dev.minor) != (node.host.major, node.host.minor)
    return bool(_SCOPE_TARGET_RE.match(source))


def _keep_reason(node: _Node, line: ConfigLine) -> str:
    if _kind(line) == "dev":
        return f"passes {node.path} (Proxmox devN)"
    source = mount_source(line.value or "")
    if _normalize_target(source) != node.target:
        return f"the user's mount of {node.path} from {source}: gpunode adds no second one"
    return f"passes {node.path}"


def _bad_reason(node: _Node, line: ConfigLine) -> str:
    value = line.value or ""
    if _kind(line) == "dev":
        if node.host is None:
            return f"{node.path} does not exist on the host: Proxmox would refuse to start"
        return "deny-write: CUDA can't use a GPU it can't write to"
    options = _mount_options(value)
    if "bind" not in options and "rbind" not in options:
        return "not a bind mount"
    return f"mounts {mount_source(value)}, another device, at {node.path}"


def _replace_reason(node: _Node, old: ConfigLine, want: GpuLines) -> str:
    if _rank(node, old, want)[0] < 3:
        return f"gpu_passthrough: {want.style}"
    return _bad_reason(node, old)


def _used_dev_indices(config: PveLxcConfig) -> set[int]:
    used = set()
    for section in config.sections:
        if section.name and not section.is_pending:
            continue
        for line in section.lines:
            match = _DEV_KEY_RE.match(line.key or "") if line.kind == "key" else None
            if match:
                used.add(int(match.group(1)))
    return used


def _free_dev_key(used: set[int]) -> str:
    for n in range(MAX_DEV_KEYS):
        if n not in used:
            used.add(n)
            return f"dev{n}"
    raise PassthroughError(f"the container already uses all {MAX_DEV_KEYS} devN keys")


def _nvidia_allow(line: ConfigLine, want: GpuLines) -> bool:
    rule = _allow(line.value or "") if line.key == ALLOW_KEY else None
    return rule is not None and rule[1] == want.majors.frontend


def _last(lines: Sequence[ConfigLine], pred) -> int | None:
    hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and pred(ln)]
    return hits[-1] if hits else None


def _place(edit: _Edit, anchor: int | None, line: ConfigLine) -> None:
    if anchor is None:
        edit.tail.append(line)
    else:
        edit.after.setdefault(anchor, []).append(line)


# --- device allow lines ---------------------------------------------------------------------


def _converge_allows(
    lines: Sequence[ConfigLine],
    want: GpuLines,
    mounted: set[str],
    edit: _Edit,
    decisions: list[Decision],
) -> int | None:
    """Keep, remove and add allow lines; returns the index of the last GPU line (or None)."""
    nv = want.majors
    ours = {nv.frontend} | {m for m in (nv.uvm, nv.caps) if m is not None}
    registered = set(want.registered) | {d.major for d in want.devices} | ours
    kept: list[tuple[int, int | str]] = []
    allow_indices = []
    for i, line in enumerate(lines):
        if line.kind != "key" or line.key != ALLOW_KEY:
            continue
        rule = _allow(line.value or "")
        if rule is None or rule[0] != "c" or rule[1] is None:
            continue
        _, major, minor, perms = rule
        if major in ours and not (major == nv.frontend and minor == MODESET_MINOR):
            allow_indices.append(i)
            why = _over_grant(want, major, minor)
            if why:
                edit.drop.add(i)
                decisions.append(Decision("remove", line.raw, why))
            else:
                if "r" in perms and "w" in perms:
                    kept.append((major, minor))
                decisions.append(Decision("keep", line.raw, "grants a node the container uses"))
        elif stale_allow(lines, i, want, registered):
            allow_indices.append(i)
            edit.drop.add(i)
            decisions.append(
                Decision("remove", line.raw, f"no driver registers major {major} now: stale")
            )
        elif major == nv.frontend:
            decisions.append(Decision("leave", line.raw, "nvidia-modeset is the user's"))
    anchor = allow_indices[-1] if allow_indices else _first_gpu_mount_before(lines)
    for major, minor in _grants(want, mounted):
        if any(k == major and (m == "*" or m == minor) for k, m in kept):
            continue
        value = f"c {major}:{minor} rwm"
        new = ConfigLine(f"{ALLOW_KEY}: {value}", "key", key=ALLOW_KEY, value=value)
        if anchor is None or anchor < 0:
            _before_first(edit, anchor, new)
        else:
            _place(edit, anchor, new)
        decisions.append(Decision("add", new.raw, "the mounted GPU nodes need it"))
    gpu_lines = allow_indices + [
        i for i, ln in enumerate(lines) if ln.key in (MOUNT_KEY, MEMLOCK_KEY, CPUS_KEY, MEMS_KEY)
        and (ln.key != MOUNT_KEY or _in_scope_mount(ln))
    ]
    return max(gpu_lines) if gpu_lines else None


def _over_grant(want: GpuLines, major: int, minor: int | str) -> str | None:
    nv = want.majors
    if major != nv.frontend:
        return None
    if minor == "*":
        return None if want.all_gpus else "allows every GPU; the container declares only some"
    if minor == NVIDIACTL_MINOR or minor in want.selected:
        return None
    if isinstance(minor, int) and minor < MODESET_MINOR:
        return f"allows GPU {minor}, which is not in this container's gpus"
    return None


def _next_to_gpu_lines(lines: Sequence[ConfigLine], index: int, ours: set[int]) -> bool:
    """A stale allow line sits in a block of GPU lines (walking over other allow lines)."""
    for step in (-1, 1):
        j = index + step
        while 0 <= j < len(lines):
            line = lines[j]
            if line.kind == "key" and line.key == ALLOW_KEY:
                rule = _allow(line.value or "")
                if rule and rule[1] in ours:
                    return True
                j += step
                continue
            if line.kind == "key" and line.key == MOUNT_KEY and _in_scope_mount(line):
                return True
            break
    return False


def _first_gpu_mount_before(lines: Sequence[ConfigLine]) -> int | None:
    """-1 - index of the first in-scope mount (new allow lines go just before it)."""
    first = next(
        (i for i, ln in enumerate(lines) if ln.key == MOUNT_KEY and _in_scope_mount(ln)), None
    )
    return None if first is None else -1 - first


def _before_first(edit: _Edit, anchor: int | None, line: ConfigLine) -> None:
    """No allow line yet: before the first GPU mount (key -1 - index), else in the tail."""
    if anchor is None:
        edit.tail.append(line)
    else:
        edit.after.setdefault(anchor, []).append(line)


# --- single-valued keys ---------------------------------------------------------------------


def _converge_single(
    lines: Sequence[ConfigLine],
    key: str,
    value: str,
    edit: _Edit,
    decisions: list[Decision],
    anchor: int | None,
) -> None:
    hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and ln.key == key]
    new = ConfigLine(f"{key}: {value}", "key", key=key, value=value)
    if not hits:
        _place(edit, anchor, new)
        decisions.append(Decision("add", new.raw, _single_reason(key)))
        return
    first, *rest = hits
    if lines[first].value == value:
        decisions.append(Decision("keep", lines[first].raw, _single_reason(key)))
    else:
        edit.replace[first] = new
        decisions.append(Decision("replace", lines[first].raw, _single_reason(key), new.raw))
    for i in rest:
        edit.drop.add(i)
        decisions.append(Decision("remove", lines[i].raw, f"{key} is set a second time"))


def _single_reason(key: str) -> str:
    return {
        MEMLOCK_KEY: "memlock: CUDA pins host memory",
        CPUS_KEY: "cpuset_cpus: CPUs local to the container's GPUs",
        MEMS_KEY: "cpuset_mems: memory nodes local to the container's GPUs",
    }.get(key, "declared")


# --- writing --------------------------------------------------------------------------------


def _apply(config: PveLxcConfig, lines: Sequence[ConfigLine], edit: _Edit) -> PveLxcConfig:
    if not (edit.drop or edit.replace or edit.after or edit.tail or edit.options):
        return config
    out: list[ConfigLine] = []
    end = _content_end(lines)
    for i, line in enumerate(lines):
        out.extend(_sorted_tail(edit.after.get(-1 - i, [])))
        if i == end:
            out.extend(_sorted_tail(edit.tail))
        if i in edit.replace:
            out.append(edit.replace[i])
        elif i not in edit.drop:
            out.append(line)
        out.extend(_sorted_tail(edit.after.get(i, [])))
    if end == len(lines):
        out.extend(_sorted_tail(edit.tail))
    result = pve_config._with_main(config, out)
    for key, value in edit.options:
        result = pve_config.with_key(result, key, value)
    return result


def _sorted_tail(tail: list[ConfigLine]) -> list[ConfigLine]:
    order = {ALLOW_KEY: 0, MOUNT_KEY: 1}
    return sorted(tail, key=lambda ln: order.get(ln.key or "", 2))


def _content_end(lines: Sequence[ConfigLine]) -> int:
    end = len(lines)
    while end > 0 and lines[end - 1].kind == "blank":
        end -= 1
    return end


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
