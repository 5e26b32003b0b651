"""Undo operations: put back what gpunode found, from the originals it kept.

An owned file goes back to its original (a checked `cp -p`: content, mode, owner; renamed
into place, crash-safe) or is removed when
there was none. An edited file (/etc/default/grub, /etc/kernel/cmdline) goes back to its
original when it still holds exactly what gpunode last wrote; when it was changed since,
only gpunode's own parameters are taken out (each back to the original's token, or removed)
and the line says so. Each is a no-op when the node already is as gpunode found it.
"""

from __future__ import annotations

import fnmatch
import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation

from gpunode.facts.cmdline import (
    GRUB_CMDLINE_VAR,
    GRUB_DEFAULT_FILE,
    edit_grub_default,
    grub_cmdline_value,
    split_cmdline,
    token_key,
)
from gpunode.facts.owned import (
    FileState,
    ancestors,
    original_path,
    written_path,
)
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.cmdline import report_cmdline_changes, set_grub_default_entry, synced
from gpunode.ops.files import (
    after_if_pending,
    durable_remove,
    durable_rename,
    mark_pending,
    temp_path,
    then_cleared,
    verified_copy,
)


def _same(a: FileState | None, b: FileState | None) -> bool:
    return a is not None and b is not None and a == b


def _kept(dest: str) -> str | None:
    return node().originals.get(dest)


@operation()
def owned_file_removed(dest: str, after: str | None = None):
    """
    Put an owned file back as gpunode found it: its kept original, or no file.

    + dest: remote path
    + after: shell command run after a change (e.g. `systemctl daemon-reload`)
    """
    kept = _kept(dest)
    current, original = node().file(dest), node().file(original_path(dest))
    if kept == "file" and original is not None:
        if _same(current, original):
            yield from after_if_pending(dest, after, f"{dest} is the original")
            return
        report_change(dest, "gpunode's" if current else "(absent)", "the original",
                      where=f"from {original_path(dest)}")
        put_back = verified_copy(shlex.quote(original_path(dest)), shlex.quote(dest))
    elif current is None:
        yield from after_if_pending(dest, after, f"{dest} absent")
        return
    else:
        report_change(dest, "present", "(removed)", where="gpunode created it")
        put_back = durable_remove(shlex.quote(dest))
    # Reported above, before the first command: --dry stops an operation at its first command.
    yield StringCommand(f"{mark_pending(dest)} && {put_back} && {then_cleared(dest, after)}"
                        if after else put_back)


def _lines_text(lines: list[str] | None) -> str:
    return "".join(f"{line}\n" for line in lines or [])


def _tokens(text: str, dest: str) -> list[str]:
    if dest == GRUB_DEFAULT_FILE:
        return split_cmdline(grub_cmdline_value(text))
    return split_cmdline(text)


def gpunode_keys(original: list[str], written: list[str]) -> set[str]:
    """Parameters gpunode added or replaced: their token differs between the two."""
    before = {token_key(t): t for t in original}
    return {token_key(t) for t in written if before.get(token_key(t)) != t}


def without_gpunode_tokens(current: list[str], original: list[str], keys: set[str]) -> list[str]:
    """current with each of gpunode's parameters back to the original's token, or removed."""
    before = {token_key(t): t for t in original}
    out: list[str] = []
    for token in current:
        key = token_key(token)
        if key not in keys:
            out.append(token)
        elif key in before and before[key] not in out:
            out.append(before[key])
    return out


def tokens_removed_text(dest: str, current: str, original: str, written: str) -> str:
    """The current file with only gpunode's edits taken back (cmdline tokens, GRUB_DEFAULT)."""
    keys = gpunode_keys(_tokens(original, dest), _tokens(written, dest))
    tokens = without_gpunode_tokens(_tokens(current, dest), _tokens(original, dest), keys)
    if dest != GRUB_DEFAULT_FILE:
        return " ".join(tokens) + "\n"
    text = edit_grub_default(current, tokens) if tokens != _tokens(current, dest) else current
    entry_before = grub_cmdline_value(original, "GRUB_DEFAULT")
    if grub_cmdline_value(written, "GRUB_DEFAULT") != entry_before and entry_before:
        text = set_grub_default_entry(text, entry_before)
    return text


@operation()
def edited_file_restored(dest: str, refresh: str):
    """
    Put an edited bootloader file back: the kept original when the file still holds what
    gpunode last wrote, else only gpunode's own parameters taken out. Then refresh.

    + dest: /etc/default/grub or /etc/kernel/cmdline
    + refresh: the bootloader update (update-grub, proxmox-boot-tool refresh)
    """
    if _kept(dest) != "file":
        host.noop(f"gpunode never edited {dest} (no original kept)")
        return
    paths = [dest, original_path(dest), written_path(dest)]
    current, original, written = (node().file(p) for p in paths)
    if current is None or _same(current, original):
        yield from after_if_pending(dest, synced(refresh), f"{dest} is the original")
        return
    text = {p: _lines_text(node().contents.get(p)) for p in paths}
    where = f"{dest} {GRUB_CMDLINE_VAR}" if dest == GRUB_DEFAULT_FILE else dest
    if written is not None and current.sha1 == written.sha1:
        report_cmdline_changes(_tokens(text[dest], dest), _tokens(text[paths[1]], dest), where)
        report_change(dest, "gpunode's edit", "the original", where=f"from {paths[1]}")
        put_back = verified_copy(shlex.quote(paths[1]), shlex.quote(dest))
        yield StringCommand(f"{mark_pending(dest)} && {{ {put_back}; }} && "
                            f"{then_cleared(dest, synced(refresh))}")
        return
    new = tokens_removed_text(dest, text[dest], text[paths[1]], text[paths[2]])
    if new == text[dest]:
        host.noop(f"{dest} changed since gpunode's edit and holds none of its parameters")
        return
    report_cmdline_changes(_tokens(text[dest], dest), _tokens(new, dest), where)
    report_change(dest, "changed since gpunode's edit", "only gpunode's parameters removed")
    temp = temp_path(dest)
    yield StringCommand(mark_pending(dest))
    yield FileUploadCommand(StringIO(new), temp)
    yield StringCommand(f"chown --reference={shlex.quote(dest)} {shlex.quote(temp)} && "
                        f"chmod --reference={shlex.quote(dest)} {shlex.quote(temp)} && "
                        f"{durable_rename(shlex.quote(temp), shlex.quote(dest))}")
    yield StringCommand(then_cleared(dest, synced(refresh)))


@operation()
def holds_released(recorded_holds: list[str], patterns: list[str]):
    """
    Release the apt holds gpunode added: held now, not held before the first apply, and named
    like a package gpunode holds (kernel, NVIDIA driver).

    + recorded_holds: the holds found before the first apply (state.json)
    + patterns: glob patterns of the packages gpunode holds
    """
    holds = sorted(node().holds)
    release = [p for p in holds if p not in recorded_holds
               and any(fnmatch.fnmatch(p, pattern) for pattern in patterns)]
    if not release:
        host.noop("no hold of gpunode's to release")
        return
    for package in release:
        report_change(f"apt-mark {package}", "held", "not held")
    yield StringCommand("apt-mark", "unhold", *release)


def created_chain(path: str, kept: dict[str, str | None]) -> list[str]:
    """path and its folders up to the topmost one gpunode created (kept 'absent'), nearest
    first; [] when gpunode created none of them."""
    chain = ancestors(path)
    tops = [i for i, folder in enumerate(chain) if kept.get(folder) == "absent"]
    return chain[:tops[-1] + 1] if tops else []


def removable_folders(chain: list[str], listing: dict[str, list[str]],
                      gone: list[str]) -> tuple[list[str], str | None]:
    """The folders of chain (nearest first) that are empty once `gone` (names in the nearest
    one) and the folders before them are removed; and the first folder that holds more."""
    removable: list[str] = []
    allowed = set(gone)
    for folder in chain:
        if folder not in listing:  # already absent
            allowed = {folder.rsplit("/", 1)[1]}
            continue
        if not set(listing[folder]) <= allowed:
            return removable, folder
        removable.append(folder)
        allowed = {folder.rsplit("/", 1)[1]}
    return removable, None


@operation()
def created_folder_removed(path: str, gone: list[str] | None = None):
    """
    Remove a folder gpunode created (directory_present marked the topmost one it made), and
    the created folders above it, each only when empty: a folder holding anything of yours
    stays, and the line says so.

    + path: the folder
    + gone: names in it that an earlier operation of the run removes (gpunode.prom)
    """
    chain = created_chain(path, node().originals)
    if not chain:
        host.noop(f"gpunode created no folder of {path}")
        return
    listing = node().folders
    removable, kept = removable_folders(chain, listing, list(gone or []))
    if not removable:
        if kept is None:
            host.noop(f"{chain[-1]} absent")
        else:
            host.noop(f"{kept} holds files gpunode did not write")
        return
    left = f"; {kept} holds other files: left" if kept else ""
    report_change(removable[-1], "present", "(removed)", where=f"gpunode created it{left}")
    yield StringCommand("rmdir", *removable)
