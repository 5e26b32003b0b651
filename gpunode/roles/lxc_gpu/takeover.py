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

The parts: ``gpu_lines`` reads the lines and holds ``GpuLines`` and ``Decision``,
``allow_lines`` converges the allow lines, ``line_edit`` writes the edit (and the
single-valued keys); this module decides per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpunode.facts.nvidia_devices import DeviceNode, PassthroughError
from gpunode.facts.pve_config import (
    ConfigLine,
    PveLxcConfig,
    dev_path,
    mount_target,
    normalize_target,
)
from gpunode.roles.lxc_gpu.allow_lines import converge_allows, stale_allow
from gpunode.roles.lxc_gpu.gpu_lines import (
    ALLOW_KEY,
    CPUS_KEY,
    DEV_KEY_RE,
    GPU_TARGET_RE,
    MEMLOCK_KEY,
    MEMS_KEY,
    MOUNT_KEY,
    SCOPE_TARGET_RE,
    Decision,
    GpuLines,
    dev_denies_write,
    gpu_lines_for,
    in_scope_mount,
    in_scope_target,
    mount_options,
    mount_source,
    nvidia_allow,
    parse_allow,
    passthrough_style,
)
from gpunode.roles.lxc_gpu.line_edit import Edit, apply_edit, converge_single, last, place

__all__ = [
    "ALLOW_KEY",
    "CPUS_KEY",
    "MEMLOCK_KEY",
    "MEMS_KEY",
    "MOUNT_KEY",
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

MAX_DEV_KEYS = 256  # PVE::LXC::Config $MAX_DEVICES


@dataclass
class Takeover:
    """The converged config and one Decision per GPU line (in file order, then additions)."""

    config: PveLxcConfig
    decisions: list[Decision] = field(default_factory=list)

    @property
    def changed(self) -> list[Decision]:
        return [d for d in self.decisions if d.action in ("add", "replace", "remove")]


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


# --- the convergence ------------------------------------------------------------------------


def converge_gpu_lines(config: PveLxcConfig, want: GpuLines) -> Takeover:
    """Converge the main section's GPU lines to ``want`` (see the module docstring)."""
    lines = list(config.main.lines)
    needed = _needed(want)
    decisions: list[Decision] = []
    edit = Edit()
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
    mount_anchor = last(lines, lambda ln: ln.key == MOUNT_KEY and in_scope_mount(ln))
    if mount_anchor is None:
        mount_anchor = last(lines, lambda ln: _nvidia_allow(ln, want))
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
                place(edit, mount_anchor, new)
        if replaced is not None:
            old = lines[replaced]
            if edit.replace.get(replaced) is None:
                edit.drop.add(replaced)
            why = _replace_reason(node, old, want)
            decisions.append(Decision("replace", old.raw, why, new_raw))
        else:
            decisions.append(Decision("add", new_raw, f"passes {node.path}"))

    mounted = {t for t, kind in final.items() if kind == "mount"}
    gpu_anchor = converge_allows(lines, want, mounted, edit, decisions)
    for key, value in want.singles:
        converge_single(lines, key, value, edit, decisions, gpu_anchor)
    return Takeover(apply_edit(config, lines, edit), decisions)


_FIXED_TARGETS = ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools", "dev/nvidia-caps")


def _target_order(target: str) -> tuple[int, int]:
    """GPUs by index, then nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-caps."""
    match = GPU_TARGET_RE.match(target)
    return (0, int(match.group(1))) if match else (1, _FIXED_TARGETS.index(target))


def _not_declared(target: str) -> str:
    match = GPU_TARGET_RE.match(target)
    if match:
        return f"GPU {match.group(1)} is not in this container's gpus"
    return f"/{target} is not passed by gpunode"

def _classify(lines: Sequence[ConfigLine]) -> tuple[dict[str, list[int]], list[Decision]]:
    """In-scope lines by target; NVIDIA lines gpunode leaves alone, with the reason."""
    by_target: dict[str, list[int]] = {}
    left: list[Decision] = []
    for i, line in enumerate(lines):
        if line.kind != "key" or line.key is None:
            continue
        value = line.value or ""
        if DEV_KEY_RE.match(line.key):
            target = normalize_target(dev_path(value))
        elif line.key == MOUNT_KEY:
            target = mount_target(value) or ""
        else:
            continue
        if SCOPE_TARGET_RE.match(target):
            by_target.setdefault(target, []).append(i)
        elif "nvidia" in value:
            left.append(Decision("leave", line.raw, f"/{target} is not a node gpunode manages"))
    return by_target, left


def _converge_node(
    node: _Node,
    found: list[int],
    lines: Sequence[ConfigLine],
    want: GpuLines,
    edit: Edit,
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
        usable = _can_dev(node) and not dev_denies_write(value)
        return ((0 if want.style == "dev" else 1) if usable else 3, 0)
    options = mount_options(value)
    if "bind" not in options and "rbind" not in options:
        return (3, 0)
    source = normalize_target(mount_source(value))
    if source == node.target:
        return (0 if want.style == "mount" or not _can_dev(node) else 1, 1)
    if _other_known_node(source, node, want):
        return (3, 0)
    return (2, 0)


def _other_known_node(source: str, node: _Node, want: GpuLines) -> bool:
    """The source is another NVIDIA node of the host (a different GPU, say)."""
    for dev in want.devices:
        if normalize_target(dev.path) == source:
            return node.host is None or (dev.major, dev.minor) != (node.host.major, node.host.minor)
    return bool(SCOPE_TARGET_RE.match(source))


def _keep_reason(node: _Node, line: ConfigLine) -> str:
    if _kind(line) == "dev":
        return f"passes {node.path} (Proxmox devN)"
    source = mount_source(line.value or "")
    if normalize_target(source) != node.target:
        return f"the user's mount of {node.path} from {source}: gpunode adds no second one"
    return f"passes {node.path}"


def _bad_reason(node: _Node, line: ConfigLine) -> str:
    value = line.value or ""
    if _kind(line) == "dev":
        if node.host is None:
            return f"{node.path} does not exist on the host: Proxmox would refuse to start"
        return "deny-write: CUDA can't use a GPU it can't write to"
    options = mount_options(value)
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
            match = DEV_KEY_RE.match(line.key or "") if line.kind == "key" else None
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
    rule = parse_allow(line.value or "") if line.key == ALLOW_KEY else None
    return rule is not None and rule[1] == want.majors.frontend


