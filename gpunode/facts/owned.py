"""What gpunode keeps on a node about itself, and the state of the files it writes.

Layout under STATE_DIR (/var/lib/gpunode):
- originals/<path>: each file gpunode edits or replaces, as it was before gpunode's first
  change (`cp -p`: content, mode, owner); originals/<path>.absent when there was no file.
  Written once, never rotated: undo puts these back.
- backups/<path>.<UTC time>: the version each later change replaced; the newest BACKUPS_KEPT
  are kept.
- written/<path>: what gpunode last wrote to a file it edits (/etc/default/grub): undo restores
  the original only while the file still holds that, else takes out gpunode's tokens alone.
- state.json: the runtime values found before the first apply (sysctls, loaded modules, apt
  holds, boot unit), written once by the first apply (gpunode.ops.state).
- pending/<path with / as %>: written (and synced) before gpunode replaces a file whose change
  a command must follow (update-grub, update-initramfs, daemon-reload), removed once that
  command succeeded: a run that finds one runs the command again, though the file is right
  (the power went, or the command failed, between the two).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import ConfigDict, ValidationError, model_validator
from pyinfra.api import FactBase

from gpunode.facts.sections import FactModel, cat_command

STATE_DIR = "/var/lib/gpunode"
ORIGINALS_DIR = f"{STATE_DIR}/originals"
BACKUPS_DIR = f"{STATE_DIR}/backups"
WRITTEN_DIR = f"{STATE_DIR}/written"
STATE_FILE = f"{STATE_DIR}/state.json"
PENDING_DIR = f"{STATE_DIR}/pending"
ABSENT_SUFFIX = ".absent"
BACKUPS_KEPT = 5


def original_path(path: str) -> str:
    """Where the original of path is kept."""
    return f"{ORIGINALS_DIR}{path}"


def pending_marker(path: str) -> str:
    """The marker that says the command after a change of path has not yet succeeded."""
    return f"{PENDING_DIR}/{path.strip('/').replace('/', '%')}"


def written_path(path: str) -> str:
    """Where a copy of what gpunode last wrote to an edited file is kept."""
    return f"{WRITTEN_DIR}{path}"


def backup_prefix(path: str) -> str:
    """Rotating backups of path are <prefix>.<UTC time>."""
    return f"{BACKUPS_DIR}{path}"


class FileState(FactModel):
    """A regular file's content hash, mode and owner."""

    sha1: str
    mode: str
    user: str
    group: str

    def drift(self, mode: str, user: str = "root", group: str = "root") -> list[str]:
        """'mode 666 -> 644' / 'owner a:b -> root:root' where the file differs (else [])."""
        out = []
        if self.mode.lstrip("0") != mode.lstrip("0"):
            out.append(f"mode {self.mode.zfill(4)} -> {mode.zfill(4)}")
        if (self.user, self.group) != (user, group):
            out.append(f"owner {self.user}:{self.group} -> {user}:{group}")
        return out


STAT_MARKER = "@@gpunode-stat"


def parse_file_states(text: str) -> dict[str, FileState | None]:
    """Output of owned_files_command(): 'PATH<TAB>-' for a path with no regular file, then
    sha1sum's 'SHA1  PATH' lines, STAT_MARKER, and 'PATH<TAB>MODE USER GROUP' lines. A path
    with no hash or no stat (gone meanwhile, unreadable) is None."""
    states: dict[str, FileState | None] = {}
    sha1s: dict[str, str] = {}
    stats: dict[str, list[str]] = {}
    after_marker = False
    for line in text.splitlines():
        if line == STAT_MARKER:
            after_marker = True
            continue
        path, tab, rest = line.partition("\t")
        if after_marker:
            if tab and len(rest.split()) == 3:
                stats[path] = rest.split()
        elif tab and rest == "-":
            states[path] = None
        elif not tab and "  " in line:
            digest, _, hashed = line.partition("  ")
            sha1s[hashed] = digest
    for path in sha1s.keys() | stats.keys():
        stat = stats.get(path)
        states[path] = (FileState(sha1=sha1s[path], mode=stat[0], user=stat[1], group=stat[2])
                        if stat and path in sha1s else None)
    return states


def owned_files_command(paths: list[str]) -> str:
    """The regular files among paths hashed by one sha1sum and stat'ed by one stat (each
    other path printed with '-'): two processes for any number of paths."""
    if not paths:
        return "true"
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f'set --; for p in {quoted}; do if [ -f "$p" ]; then set -- "$@" "$p"; '
        f"else printf '%s\\t-\\n' \"$p\"; fi; done; "
        f'if [ $# -gt 0 ]; then sha1sum -- "$@"; echo \'{STAT_MARKER}\'; '
        f"stat --printf '%n\\t%a %U %G\\n' -- \"$@\"; fi"
    )


class OwnedFiles(FactBase):
    """Content hash, mode and owner of each path (None for a path with no regular file)."""

    def command(self, paths: list[str]) -> str:
        return owned_files_command(paths)

    def process(self, output: list[str]) -> dict[str, Any]:
        return {path: (state.to_json() if state else None)
                for path, state in parse_file_states("\n".join(output)).items()}


def file_state(value: Any, path: str) -> FileState | None:
    """The FileState of path from an OwnedFiles value (fixtures give plain dicts)."""
    data = getattr(value, "data", value) or {}
    raw = data.get(path)
    return FileState.model_validate(raw) if raw else None


#: state.json's format; a record of another version is refused, never guessed at.
STATE_VERSION = 1
_RECORD_PATTERNS = {
    "sysctl key": re.compile(r"[a-z0-9_][a-z0-9_\-]*(?:\.[a-z0-9_][a-z0-9_\-]*)+"),
    "sysctl value": re.compile(r"[A-Za-z0-9_.:,/\- \t]{0,4096}"),
    "module": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,55}"),
    "package": re.compile(r"[a-z0-9][a-z0-9+.\-]{1,127}(?::[a-z0-9][a-z0-9\-]{0,31})?"),
    "cmdline token": re.compile(r"[^\x00-\x1f\x7f]{1,4096}"),  # foo="a b" is one token
    "unit": re.compile(r"[A-Za-z0-9@_.:\-]{1,255}"),
}


def _checked(kind: str, values: Iterable[str]) -> None:
    for value in values:
        if not _RECORD_PATTERNS[kind].fullmatch(value):
            raise ValueError(f"{value[:60]!r} is not a {kind}")


class DamagedStateRecord(ValueError):
    """state.json is there but is not a record gpunode wrote (truncated, edited, other
    version): refused, never read as "never applied"."""


class NodeState(FactModel):
    """state.json: what the node was like before gpunode's first apply. The same schema is
    used to write it and, every time, to read it back: a value that isn't a sysctl, module,
    package or cmdline token never reaches a command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    recorded: str = ""
    sysctls: dict[str, str] = {}
    modules_loaded: list[str] = []
    holds: list[str] = []
    boot_unit_enabled: bool = False
    cmdline: list[str] = []
    # Units gpunode enables but does not own (nvidia-persistenced): enabled before? None when
    # recorded by a gpunode that did not keep it.
    units_enabled: dict[str, bool] | None = None

    @model_validator(mode="after")
    def _values_are_what_they_say(self) -> NodeState:
        _checked("sysctl key", self.sysctls)
        _checked("sysctl value", self.sysctls.values())
        _checked("module", self.modules_loaded)
        _checked("package", self.holds)
        _checked("cmdline token", self.cmdline)
        _checked("unit", self.units_enabled or {})
        return self


def parse_state_record(text: str) -> NodeState | None:
    """state.json's text -> NodeState; None when there is none (empty: no file);
    DamagedStateRecord saying what is wrong otherwise."""
    if not text.strip():
        return None
    try:
        return NodeState.model_validate(json.loads(text))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the record"
        raise DamagedStateRecord(
            f"{where}: {first['msg']} ({exc.error_count()} problem(s))") from None
    except ValueError as exc:  # not JSON: truncated or overwritten
        raise DamagedStateRecord(f"not JSON ({exc})") from None


class RecordedState(FactBase):
    """The node's state.json: None when gpunode never applied there (no file), the record
    when it is valid, {"damaged": why} when it is there but not valid (parse_state_record)."""

    def command(self) -> str:
        return "{ " + cat_command(STATE_FILE) + "; } 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[str, Any] | None:
        try:
            record = parse_state_record("\n".join(output))
        except DamagedStateRecord as exc:
            return {"damaged": str(exc)}
        return record.to_json() if record else None


class KeptOriginals(FactBase):
    """For each path: 'file' (original kept), 'absent' (there was none) or None (not kept)."""

    def command(self, paths: list[str]) -> str:
        parts = []
        for path in paths:
            orig = shlex.quote(original_path(path))
            absent = shlex.quote(original_path(path) + ABSENT_SUFFIX)
            parts.append(
                f"if [ -f {orig} ]; then k=file; elif [ -e {absent} ]; then k=absent; "
                f"else k=none; fi; printf '%s\\t%s\\n' {shlex.quote(path)} \"$k\""
            )
        return "; ".join(parts) or "true"

    def process(self, output: list[str]) -> dict[str, str | None]:
        kept: dict[str, str | None] = {}
        for line in output:
            path, _, kind = line.partition("\t")
            if path:
                kept[path] = None if kind == "none" else kind
        return kept


def ancestors(path: str) -> list[str]:
    """path and each folder above it, nearest first, without '/'."""
    out = []
    while path not in ("", "/"):
        out.append(path)
        path = path.rsplit("/", 1)[0]
    return out


class DirEntries(FactBase):
    """For each path: the names in that folder (hidden ones too), or None when it is not one."""

    def command(self, paths: list[str]) -> str:
        parts = []
        for path in paths:
            q = shlex.quote(path)
            parts.append(
                f"if [ -d {q} ]; then printf '%s\\t.\\n' {q}; for e in {q}/* {q}/.[!.]* {q}/..?*; "
                f"do if [ -e \"$e\" ] || [ -L \"$e\" ]; then printf '%s\\t%s\\n' {q} "
                f"\"${{e##*/}}\"; fi; done; fi"
            )
        return "; ".join(parts) or "true"

    def process(self, output: list[str]) -> dict[str, list[str]]:
        entries: dict[str, list[str]] = {}
        for line in output:
            path, sep, name = line.partition("\t")
            if sep:
                entries.setdefault(path, [])
                if name != ".":  # '.': the folder itself (a line can't end in a tab)
                    entries[path].append(name)
        return entries
