"""The ``lxc.cgroup2.devices.allow`` lines of a container's GPUs: kept, removed or added.

An allow line for an NVIDIA major is kept unless it grants a GPU the container does not
declare; one for a major no driver registers any more, inside a block of GPU lines (the
nvidia-uvm major of an earlier driver or boot), is removed as stale; ``c 195:254``
(nvidia-modeset) is the user's. The grants the mounted nodes need are added where no kept
read-write line covers them: after the last GPU allow line, else just before the first GPU
mount, else at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpunode.facts.nvidia_devices import NVIDIACTL_MINOR
from gpunode.facts.pve_config import ConfigLine
from gpunode.roles.lxc_gpu.gpu_lines import (
    ALLOW_KEY,
    CPUS_KEY,
    GPU_TARGET_RE,
    MEMLOCK_KEY,
    MEMS_KEY,
    MODESET_MINOR,
    MOUNT_KEY,
    Decision,
    GpuLines,
    allow_rule,
    in_scope_mount,
    is_gpu_grant,
)
from gpunode.roles.lxc_gpu.line_edit import Edit, key_line, place

Grant = tuple[int, int | str]
"""(major, minor or ``"*"``)"""

_SINGLE_KEYS = (MEMLOCK_KEY, CPUS_KEY, MEMS_KEY)


@dataclass(frozen=True)
class _Verdict:
    """What becomes of one NVIDIA allow line."""

    action: str
    """``keep``, ``remove`` or ``leave``."""
    reason: str
    gpu_line: bool = True
    """It belongs to the GPU block (new grants go after the last such line)."""
    grant: Grant | None = None
    """A kept read-write grant (an added grant it covers is not added)."""


_LEAVE_MODESET = _Verdict("leave", "nvidia-modeset is the user's", gpu_line=False)


def converge_allows(
    lines: Sequence[ConfigLine],
    want: GpuLines,
    mounted: set[str],
    edit: Edit,
    decisions: list[Decision],
) -> int | None:
    """Keep, remove and add allow lines; returns the index of the last GPU line (or None)."""
    registered = set(want.registered) | {d.major for d in want.devices} | want.ours
    kept: list[Grant] = []
    allow_indices: list[int] = []
    for i, line in enumerate(lines):
        verdict = _judge(lines, i, want, registered) if line.kind == "key" else None
        if verdict is None:
            continue
        decisions.append(Decision(verdict.action, line.raw, verdict.reason))
        if verdict.gpu_line:
            allow_indices.append(i)
        if verdict.action == "remove":
            edit.drop.add(i)
        if verdict.grant is not None:
            kept.append(verdict.grant)
    anchor = allow_indices[-1] if allow_indices else _first_gpu_mount_before(lines)
    _add_grants(want, mounted, kept, anchor, edit, decisions)
    return _last_gpu_line(lines, allow_indices)


def _judge(lines: Sequence[ConfigLine], i: int, want: GpuLines,
           registered: set[int]) -> _Verdict | None:
    """The verdict on line i (None: not an allow line gpunode has a say in)."""
    rule = allow_rule(lines[i])
    if rule is None:
        return None
    kind, major, minor, perms = rule
    if kind != "c" or major is None:
        return None
    if is_gpu_grant(want, major, minor):
        why = _over_grant(want, major, minor)
        if why:
            return _Verdict("remove", why)
        rw = "r" in perms and "w" in perms
        return _Verdict("keep", "grants a node the container uses",
                        grant=(major, minor) if rw else None)
    if stale_allow(lines, i, want, registered):
        return _Verdict("remove", f"no driver registers major {major} now: stale")
    return _LEAVE_MODESET if major == want.majors.frontend else None


def _add_grants(want: GpuLines, mounted: set[str], kept: list[Grant], anchor: int | None,
                edit: Edit, decisions: list[Decision]) -> None:
    for major, minor in grants(want, mounted):
        if any(k == major and (m == "*" or m == minor) for k, m in kept):
            continue
        new = key_line(ALLOW_KEY, f"c {major}:{minor} rwm")
        place(edit, anchor, new)
        decisions.append(Decision("add", new.raw, "the mounted GPU nodes need it"))


def _last_gpu_line(lines: Sequence[ConfigLine], allow_indices: list[int]) -> int | None:
    """The last GPU allow line, in-scope mount or single-valued GPU key (memlock, cpuset)."""
    gpu_lines = allow_indices + [
        i for i, ln in enumerate(lines)
        if ln.key in _SINGLE_KEYS or (ln.key == MOUNT_KEY and in_scope_mount(ln))
    ]
    return max(gpu_lines) if gpu_lines else None


def grants(want: GpuLines, mounted: set[str]) -> list[Grant]:
    """The (major, minor) grants the mounted nodes need, in gpunode's usual order."""
    nv = want.majors
    found: list[Grant] = []
    gpus = sorted(int(m.group(1)) for t in mounted if (m := GPU_TARGET_RE.match(t)))
    if gpus or "dev/nvidiactl" in mounted:
        if want.all_gpus:
            found.append((nv.frontend, "*"))
        else:
            found.extend((nv.frontend, m) for m in gpus)
            if "dev/nvidiactl" in mounted:
                found.append((nv.frontend, NVIDIACTL_MINOR))
    if nv.uvm is not None and ({"dev/nvidia-uvm", "dev/nvidia-uvm-tools"} & mounted):
        found.append((nv.uvm, "*"))
    if nv.caps is not None and "dev/nvidia-caps" in mounted:
        found.append((nv.caps, "*"))
    return found


def _over_grant(want: GpuLines, major: int, minor: int | str) -> str | None:
    """Why a frontend grant opens more than the container declares (None: it doesn't)."""
    if major != want.majors.frontend or minor == NVIDIACTL_MINOR or minor in want.selected:
        return None
    if minor == "*":
        return None if want.all_gpus else "allows every GPU; the container declares only some"
    if isinstance(minor, int) and minor < MODESET_MINOR:
        return f"allows GPU {minor}, which is not in this container's gpus"
    return None


def stale_allow(lines: Sequence[ConfigLine], index: int, want: GpuLines,
                registered: set[int]) -> bool:
    """An allow line for a major no driver registers now, inside a block of GPU lines:
    the nvidia-uvm major of an earlier driver or boot."""
    rule = allow_rule(lines[index])
    if rule is None or rule[0] != "c" or rule[1] is None or rule[1] in registered:
        return False
    return _next_to_gpu_lines(lines, index, want.ours)


def _next_to_gpu_lines(lines: Sequence[ConfigLine], index: int, ours: set[int]) -> bool:
    """A stale allow line sits in a block of GPU lines (walking over other allow lines)."""
    return any(_gpu_line_towards(lines, index, step, ours) for step in (-1, 1))


def _gpu_line_towards(lines: Sequence[ConfigLine], index: int, step: int,
                      ours: set[int]) -> bool:
    j = index + step
    while 0 <= j < len(lines):
        line = lines[j]
        if line.kind != "key":
            return False
        if line.key == ALLOW_KEY:
            rule = allow_rule(line)
            if rule and rule[1] in ours:
                return True
            j += step
            continue
        return line.key == MOUNT_KEY and in_scope_mount(line)
    return False


def _first_gpu_mount_before(lines: Sequence[ConfigLine]) -> int | None:
    """-1 - index of the first in-scope mount (new allow lines go just before it)."""
    first = next(
        (i for i, ln in enumerate(lines) if ln.key == MOUNT_KEY and in_scope_mount(ln)), None
    )
    return None if first is None else -1 - first
