"""Parser and writer for Proxmox container configs (``/etc/pve/lxc/VMID.conf``).

The file format, as Proxmox itself reads and writes it (``PVE::LXC::Config``
``parse_pct_config`` / ``write_pct_config`` in proxmox/pve-container):

- ``key: value`` lines; raw LXC keys may also be written ``lxc.key = value``.
- ``#`` lines are the container *description* (URL-encoded by Proxmox). Proxmox
  collects them and writes them back at the top of the file on its next rewrite,
  so a ``#`` marker line can never be used to tag lines gpunode owns.
- The main section comes first. It is followed by an optional ``[pve:pending]``
  section (options set while the container runs, applied at its next start) and
  by one ``[snapshot-name]`` section per snapshot. Anything appended to the end of
  the file therefore lands in the last snapshot, never in the live config.
- ``lxc.*`` keys may repeat (``lxc.cgroup2.devices.allow``, ``lxc.mount.entry``,
  ``lxc.idmap``), and their order matters; other keys appear once.

This module keeps every byte it does not own: ``render(parse(text)) == text`` for
any input, and an edit touches only the main section's lines it changes. Edits
return a new ``PveLxcConfig``; nothing is mutated.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = [
    "ConfigLine",
    "PveLxcConfig",
    "Section",
    "get",
    "cgroup_v1_entries",
    "get_all",
    "lxc_entries",
    "main_options",
    "parse_pve_lxc_config",
    "pending_options",
    "render",
    "snapshot_names",
    "with_key",
    "with_lxc_entry",
    "without_key",
]

# The same patterns PVE::LXC::Config::parse_pct_config uses.
_PENDING_RE = re.compile(r"^\[pve:pending\]\s*$", re.IGNORECASE)
_SNAPSHOT_RE = re.compile(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", re.IGNORECASE)
_LXC_RE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*$")
_KEY_RE = re.compile(r"^([a-z][a-z_]*\d*):\s*(.*?)\s*$")
_BLANK_RE = re.compile(r"^\s*$")

# lxc.* keys that may legitimately appear several times; any other lxc.* key is
# single-valued (a later line would override an earlier one in LXC).
MULTI_VALUED_LXC_PREFIXES: tuple[str, ...] = (
    "lxc.cgroup.devices.allow",
    "lxc.cgroup.devices.deny",
    "lxc.cgroup2.devices.allow",
    "lxc.cgroup2.devices.deny",
    "lxc.mount.entry",
    "lxc.idmap",
    "lxc.cap.drop",
    "lxc.cap.keep",
    "lxc.environment",
    "lxc.hook.",
    "lxc.include",
    "lxc.apparmor.raw",
)


def is_multi_valued(key: str) -> bool:
    """True for lxc.* keys that may repeat (device allows, mounts, idmaps, hooks...)."""
    return any(
        key == prefix or (prefix.endswith(".") and key.startswith(prefix))
        for prefix in MULTI_VALUED_LXC_PREFIXES
    )


@dataclass(frozen=True)
class ConfigLine:
    """One physical line, kept verbatim in ``raw`` (without its newline).

    ``kind`` is one of ``blank``, ``comment``, ``section``, ``key``, ``other``.
    For ``key`` lines ``key`` and ``value`` hold the parsed pair (value stripped,
    as Proxmox strips it); for ``section`` lines ``key`` holds the section name.
    """

    raw: str
    kind: str
    key: str | None = None
    value: str | None = None

    @property
    def is_lxc(self) -> bool:
        return self.kind == "key" and self.key is not None and self.key.startswith("lxc.")


@dataclass(frozen=True)
class Section:
    """A run of lines. ``name`` is ``""`` for the main section, ``"pve:pending"``
    for pending changes, otherwise the snapshot name. ``lines`` includes the
    ``[header]`` line for every section but the main one."""

    name: str
    lines: tuple[ConfigLine, ...]

    @property
    def is_pending(self) -> bool:
        return self.name.lower() == "pve:pending"


@dataclass(frozen=True)
class PveLxcConfig:
    """A parsed config: the main section first, then the others in file order."""

    sections: tuple[Section, ...]
    trailing_newline: bool

    @property
    def main(self) -> Section:
        return self.sections[0]


def _classify(raw: str) -> ConfigLine:
    if _BLANK_RE.match(raw):
        return ConfigLine(raw, "blank")
    if _PENDING_RE.match(raw):
        return ConfigLine(raw, "section", key="pve:pending")
    snap = _SNAPSHOT_RE.match(raw)
    if snap:
        return ConfigLine(raw, "section", key=snap.group(1))
    if raw.startswith("#"):
        return ConfigLine(raw, "comment")
    lxc = _LXC_RE.match(raw)
    if lxc:
        return ConfigLine(raw, "key", key=lxc.group(1), value=lxc.group(3))
    key = _KEY_RE.match(raw)
    if key:
        return ConfigLine(raw, "key", key=key.group(1), value=key.group(2))
    return ConfigLine(raw, "other")


def parse_pve_lxc_config(text: str) -> PveLxcConfig:
    """Parse a container config. Never fails: unknown lines are kept as ``other``."""
    trailing_newline = text.endswith("\n")
    body = text[:-1] if trailing_newline else text
    raw_lines = body.split("\n") if (body or trailing_newline) else []

    sections: list[Section] = []
    name = ""
    current: list[ConfigLine] = []
    for raw in raw_lines:
        line = _classify(raw)
        if line.kind == "section":
            sections.append(Section(name, tuple(current)))
            name = line.key or ""
            current = [line]
        else:
            current.append(line)
    sections.append(Section(name, tuple(current)))
    return PveLxcConfig(tuple(sections), trailing_newline)


def render(config: PveLxcConfig) -> str:
    """Write the config back; byte-identical to the input for an unedited parse."""
    raws = [line.raw for section in config.sections for line in section.lines]
    text = "\n".join(raws)
    if config.trailing_newline:
        text += "\n"
    return text


# --- reading ---------------------------------------------------------------


def get_all(config: PveLxcConfig, key: str) -> list[str]:
    """Every value of ``key`` in the main section, in file order."""
    return [ln.value or "" for ln in config.main.lines if ln.kind == "key" and ln.key == key]


def get(config: PveLxcConfig, key: str) -> str | None:
    """The first value of ``key`` in the main section, or None."""
    values = get_all(config, key)
    return values[0] if values else None


def main_options(config: PveLxcConfig) -> dict[str, str]:
    """The main section's non-lxc options (cores, memory, net0, ...) as a dict."""
    return {
        ln.key: ln.value or ""
        for ln in config.main.lines
        if ln.kind == "key" and ln.key is not None and not ln.is_lxc
    }


def lxc_entries(config: PveLxcConfig) -> list[tuple[str, str]]:
    """The main section's raw lxc.* entries, in order."""
    return [(ln.key or "", ln.value or "") for ln in config.main.lines if ln.is_lxc]


def cgroup_v1_entries(config: PveLxcConfig) -> list[tuple[str, str]]:
    """The main section's ``lxc.cgroup.*`` (cgroup v1) entries: LXC ignores them on a cgroup
    v2 host, the only kind Proxmox VE 9 boots."""
    return [(k, v) for k, v in lxc_entries(config) if k.startswith("lxc.cgroup.")]


def pending_options(config: PveLxcConfig) -> dict[str, str]:
    """Options waiting in ``[pve:pending]`` (empty when the section is absent)."""
    for section in config.sections:
        if section.is_pending:
            return {
                ln.key: ln.value or ""
                for ln in section.lines
                if ln.kind == "key" and ln.key is not None
            }
    return {}


def snapshot_names(config: PveLxcConfig) -> list[str]:
    return [s.name for s in config.sections[1:] if not s.is_pending]


# --- editing (main section only) ---------------------------------------------


def _format(key: str, value: str) -> str:
    return f"{key}: {value}" if value != "" else f"{key}:"


def _with_main(config: PveLxcConfig, lines: Sequence[ConfigLine]) -> PveLxcConfig:
    main = replace(config.main, lines=tuple(lines))
    # A file that was empty gets a final newline once it has content; otherwise
    # the file keeps whatever it had (with or without a final newline).
    was_empty = not any(section.lines for section in config.sections)
    trailing = config.trailing_newline or (was_empty and bool(lines))
    return PveLxcConfig((main, *config.sections[1:]), trailing)


def _content_end(lines: Sequence[ConfigLine]) -> int:
    """Index just after the last non-blank line (new lines go there, so the
    blank separator before the first ``[section]`` stays where it was)."""
    end = len(lines)
    while end > 0 and lines[end - 1].kind == "blank":
        end -= 1
    return end


def _insert_point_for_option(lines: Sequence[ConfigLine], key: str) -> int:
    """Where Proxmox would put ``key``: options sorted, before the lxc.* block."""
    first_lxc = next((i for i, ln in enumerate(lines) if ln.is_lxc), len(lines))
    options = [i for i, ln in enumerate(lines[:first_lxc]) if ln.kind == "key" and not ln.is_lxc]
    for i in options:
        if (lines[i].key or "") > key:
            return i
    if options:
        return options[-1] + 1
    if first_lxc < len(lines):
        return first_lxc
    return _content_end(lines)


def _insert(config: PveLxcConfig, index: int, new: Sequence[ConfigLine]) -> PveLxcConfig:
    if not new:
        return config
    lines = list(config.main.lines)
    lines[index:index] = list(new)
    return _with_main(config, lines)


def with_key(config: PveLxcConfig, key: str, value: str) -> PveLxcConfig:
    """Set a single-valued key in the main section.

    The first occurrence is rewritten in place (``key: value``) and any later
    duplicates are dropped; an absent key is inserted where Proxmox would put it.
    A line already holding ``value`` is left byte-for-byte as it is.
    For repeating lxc.* keys use :func:`with_lxc_entry` (GPU lines: ``lxc_gpu.takeover``).
    """
    lines = list(config.main.lines)
    hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and ln.key == key]
    if not hits:
        new = ConfigLine(_format(key, value), "key", key=key, value=value)
        index = (
            _content_end(lines) if key.startswith("lxc.") else _insert_point_for_option(lines, key)
        )
        return _insert(config, index, [new])
    first = hits[0]
    if lines[first].value != value:
        lines[first] = ConfigLine(_format(key, value), "key", key=key, value=value)
    for i in reversed(hits[1:]):
        del lines[i]
    if lines == list(config.main.lines):
        return config
    return _with_main(config, lines)


def without_key(config: PveLxcConfig, key: str) -> PveLxcConfig:
    """Remove every ``key`` line from the main section."""
    lines = [ln for ln in config.main.lines if not (ln.kind == "key" and ln.key == key)]
    if len(lines) == len(config.main.lines):
        return config
    return _with_main(config, lines)


def with_lxc_entry(config: PveLxcConfig, key: str, value: str) -> PveLxcConfig:
    """Make sure ``key: value`` is present among the main section's lxc.* entries.

    Repeating keys (see :func:`is_multi_valued`) get the pair appended when it is
    missing; single-valued keys are replaced in place like :func:`with_key`.
    """
    if not key.startswith("lxc."):
        raise ValueError(f"{key!r} is not an lxc.* key")
    if not is_multi_valued(key):
        return with_key(config, key, value)
    if (key, value) in lxc_entries(config):
        return config
    lines = list(config.main.lines)
    new = ConfigLine(_format(key, value), "key", key=key, value=value)
    return _insert(config, _content_end(lines), [new])


# --- GPU line values (what the container roles and the audit read of a line) ----------


def normalize_target(path: str) -> str:
    """``/dev/nvidia0``, ``dev/nvidia0`` and ``./dev//nvidia0`` -> ``dev/nvidia0``."""
    return posixpath.normpath("/" + path.strip()).lstrip("/")


def mount_target(value: str) -> str | None:
    """The normalised target of an ``lxc.mount.entry`` value (fstab format), or None."""
    fields = value.split()
    return normalize_target(fields[1]) if len(fields) >= 2 else None


def dev_path(value: str) -> str:
    """The path of a Proxmox ``devN`` value: ``/dev/nvidia0,gid=44`` or ``path=/dev/nvidia0``."""
    for part in value.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep:
            return key
        if key == "path":
            return val
    return ""
