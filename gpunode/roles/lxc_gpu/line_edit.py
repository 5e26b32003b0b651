"""The edit the takeover makes to a config's main section, and how it is written back.

An ``Edit`` names lines by their index in the original main section: drop one, replace it,
put new lines after it (a negative key ``-1 - i``: just before line ``i``), or add them at
the end of the content (``tail``, before trailing blank lines). Lines the edit does not name
stay byte-identical and in place. Single-valued keys (memlock, cpuset) are converged here too:
replaced in place when they differ, a second setting removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpunode.facts import pve_config
from gpunode.facts.pve_config import ConfigLine, PveLxcConfig
from gpunode.roles.lxc_gpu.gpu_lines import (
    ALLOW_KEY,
    CPUS_KEY,
    MEMLOCK_KEY,
    MEMS_KEY,
    MOUNT_KEY,
    Decision,
)


@dataclass
class Edit:
    """Per original main-section index: drop it, or put ``lines`` in its place."""

    drop: set[int] = field(default_factory=set)
    replace: dict[int, ConfigLine] = field(default_factory=dict)
    after: dict[int, list[ConfigLine]] = field(default_factory=dict)
    tail: list[ConfigLine] = field(default_factory=list)
    options: list[tuple[str, str]] = field(default_factory=list)


def key_line(key: str, value: str) -> ConfigLine:
    """A new ``key: value`` line."""
    return ConfigLine(f"{key}: {value}", "key", key=key, value=value)


def last(lines: Sequence[ConfigLine], pred: Callable[[ConfigLine], bool]) -> int | None:
    """The index of the last key line that pred accepts (None: none)."""
    hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and pred(ln)]
    return hits[-1] if hits else None


def place(edit: Edit, anchor: int | None, line: ConfigLine) -> None:
    """After the anchor line (``-1 - i``: before line i); no anchor: at the end."""
    if anchor is None:
        edit.tail.append(line)
    else:
        edit.after.setdefault(anchor, []).append(line)


# --- single-valued keys ---------------------------------------------------------------------

_SINGLE_REASONS = {
    MEMLOCK_KEY: "memlock: CUDA pins host memory",
    CPUS_KEY: "cpuset_cpus: CPUs local to the container's GPUs",
    MEMS_KEY: "cpuset_mems: memory nodes local to the container's GPUs",
}


def converge_single(
    lines: Sequence[ConfigLine],
    key: str,
    value: str,
    edit: Edit,
    decisions: list[Decision],
    anchor: int | None,
) -> None:
    """One ``key: value`` line: kept, replaced in place, or added after anchor."""
    hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and ln.key == key]
    new = key_line(key, value)
    reason = _SINGLE_REASONS.get(key, "declared")
    if not hits:
        place(edit, anchor, new)
        decisions.append(Decision("add", new.raw, reason))
        return
    first, *rest = hits
    if lines[first].value == value:
        decisions.append(Decision("keep", lines[first].raw, reason))
    else:
        edit.replace[first] = new
        decisions.append(Decision("replace", lines[first].raw, reason, new.raw))
    for i in rest:
        edit.drop.add(i)
        decisions.append(Decision("remove", lines[i].raw, f"{key} is set a second time"))


# --- writing --------------------------------------------------------------------------------


def apply_edit(config: PveLxcConfig, lines: Sequence[ConfigLine], edit: Edit) -> PveLxcConfig:
    """The config with the edit made to its main section (the same object when empty)."""
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
