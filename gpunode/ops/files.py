"""Files gpunode owns whole: rendered from gpunode/templates/ (package data), written
atomically, the original kept for good, later versions rotated.

pyinfra's files.template writes over SFTP straight into the destination when connected as
root, so a cut connection can leave half a file; here the text goes to a temporary file beside
the destination and is renamed over it. Before gpunode's first change of a path, the file as it
was (or the fact that there was none) is kept under /var/lib/gpunode/originals/ and never
rotated (undo puts it back); each later change keeps the replaced version under
/var/lib/gpunode/backups/ (newest five). Mode and owner are checked too: a file whose content
is right but whose mode or owner drifted is repaired with chmod/chown. A write is two remote
commands and the upload: the folder, the original and the backup before it; owner, mode,
rename and the operation's `after` command after it.

Crash-safe (a power cut at any moment leaves the old or the new content, whole): each new
text is written beside its destination, fsynced (`sync FILE`), renamed over it, and the folder
fsynced (`sync FOLDER`: the rename itself on disk); the original is on disk (`sync -f`, the
whole filesystem: its folders too) before the file it protects is touched. docs/security.md
says what this guarantees and what it does not.
"""

from __future__ import annotations

import hashlib
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation

from gpunode.facts.owned import (
    ABSENT_SUFFIX,
    BACKUPS_KEPT,
    PENDING_DIR,
    backup_prefix,
    original_path,
    pending_marker,
)
from gpunode.facts.snapshot import node
from gpunode.ops.changes import diff_enabled, log_file_diff, report_change
from gpunode.ops.shell import TEMPLATES
from gpunode.pyinfra_adapter import run_id


def render_template(name: str, **variables: Any) -> str:
    """Render templates/<name> with the given variables (missing variables are errors)."""
    return TEMPLATES.get_template(name).render(**variables)


def sha1_text(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def joined_command(*commands: StringCommand) -> StringCommand:
    """Commands that each must succeed, as one remote command."""
    return StringCommand(" && ".join(f"{{ {c.get_raw_value()}; }}" for c in commands))


NEW_INFIX = ".gpunode-new."  # a new file's temporary: DEST.gpunode-new.RUNID
COPY_SUFFIX = ".gpunode-copy"  # a checked copy's temporary: DEST.gpunode-copy


def temp_path(dest: str) -> str:
    """The temporary beside dest that this run uploads to before the rename: named with the
    run's id, so two runs never write the same temporary."""
    return f"{dest}{NEW_INFIX}{run_id()}"


def durable_rename(q_temp: str, q_dest: str) -> str:
    """Shell: fsync the (quoted) temporary, rename it over the (quoted) dest, fsync dest's
    folder, so a power cut leaves dest old or new, whole (GNU `sync FILE` is fsync(2))."""
    return f'sync {q_temp} && mv -f {q_temp} {q_dest} && sync "$(dirname {q_dest})"'


def durable_remove(q_dest: str) -> str:
    """Shell: remove the (quoted) dest and fsync its folder (the removal on disk)."""
    return f'rm -f {q_dest} && sync "$(dirname {q_dest})"'


def verified_copy(q_src: str, q_dest: str) -> str:
    """Shell: copy the (quoted) src to a temporary beside the (quoted) dest, check its size
    and SHA-256 against src, then rename it into place; a copy that doesn't match (a full
    disk, a killed cp) is removed and the command fails naming both: never kept. The
    temporary's name is fixed (one run at a time holds the node), so a copy cut short by a
    power loss is overwritten by the next one."""
    tmp, dest = '"$gpunode_copy"', '"$gpunode_target"'
    return (
        f'gpunode_target={q_dest} && gpunode_copy="$gpunode_target{COPY_SUFFIX}" && '
        f"{{ {{ cp -p {q_src} {tmp} && "
        f'[ "$(stat -c %s {q_src})" = "$(stat -c %s {tmp})" ] && '
        f'[ "$(sha256sum < {q_src})" = "$(sha256sum < {tmp})" ] && '
        f"{durable_rename(tmp, dest)}; }} || "
        f"{{ rm -f {tmp}; echo \"gpunode: the copy of {q_src} to $gpunode_target does not "
        "match it (size or SHA-256): nothing kept\" >&2; false; }; }"
    )


def keep_original_command(dest: str) -> StringCommand:
    """Keep dest as gpunode first found it (or mark it absent), once: later runs keep that.
    The copy is checked before it is named the original (verified_copy), and the whole
    filesystem it is on is synced (`sync -f`: its new folders too) before dest is touched."""
    orig = original_path(dest)
    q_dest, q_orig = shlex.quote(dest), shlex.quote(orig)
    q_absent = shlex.quote(orig + ABSENT_SUFFIX)
    return StringCommand(
        f"if [ ! -e {q_orig} ] && [ ! -e {q_absent} ]; then "
        f"mkdir -p {shlex.quote(str(Path(orig).parent))} && "
        f"if [ -e {q_dest} ]; then {verified_copy(q_dest, q_orig)}; else : > {q_absent}; fi && "
        f"sync -f {shlex.quote(str(Path(orig).parent))}; fi"
    )


def backup_command(dest: str, keep: int = BACKUPS_KEPT) -> StringCommand:
    """Copy dest to backups/<dest>.<UTC time> (checked: verified_copy); keep the newest
    `keep` of them."""
    prefix = backup_prefix(dest)
    q_dest, q_prefix = shlex.quote(dest), shlex.quote(prefix)
    return StringCommand(
        f"if [ -e {q_dest} ]; then mkdir -p {shlex.quote(str(Path(prefix).parent))} && "
        f"{verified_copy(q_dest, q_prefix + '.$(date -u +%Y%m%dT%H%M%S.%NZ)')} && "
        f"{{ ls -1d {q_prefix}.2* | head -n -{keep} | xargs -r rm -f --; }}; fi"
    )


def latest_backup(dest: str) -> str:
    """Shell expression: the newest rotating backup of dest."""
    return f"$(ls -1d {shlex.quote(backup_prefix(dest))}.2* | tail -n 1)"


#: A text whose quoted form is up to this many bytes is written by the command itself
#: (`printf`, a shell builtin): one remote command instead of a command, an upload and a
#: command. Linux caps one argument at 128 KiB (MAX_ARG_STRLEN) and the command travels as one
#: (`sh -c '...'`, quoted again by pyinfra: a ' grows to 17 bytes): a larger text is uploaded.
INLINE_MAX = 64 * 1024


def mark_pending(dest: str) -> str:
    """Shell: the marker that dest's follow-up command has not yet succeeded, on disk
    (facts.owned PENDING_DIR), before dest is replaced."""
    q_marker = shlex.quote(pending_marker(dest))
    return f"mkdir -p {shlex.quote(PENDING_DIR)} && : > {q_marker} && sync -f {q_marker}"


def clear_pending(dest: str) -> str:
    """Shell: dest's follow-up command succeeded (its marker goes)."""
    return f"rm -f {shlex.quote(pending_marker(dest))}"


def pending(dest: str) -> bool:
    """The command that follows a change of dest did not succeed after the last change (the
    power went, or it failed): the next run runs it again."""
    marker = pending_marker(dest)
    return marker.rsplit("/", 1)[1] in (node().folders.get(PENDING_DIR) or [])


def then_cleared(dest: str, after: str) -> str:
    """Shell: after, then dest's marker cleared (only when after succeeded)."""
    return f"{{ {after}; }} && {clear_pending(dest)}"


def report_redo(dest: str, after: str) -> None:
    """The change line of a follow-up command run again (pending)."""
    report_change(f"{dest} then {after.split()[0]}", "did not finish", "run again",
                  where="the file changed, the command after it did not succeed")


def after_if_pending(dest: str, after: str | None, note: str):
    """`after` again (its marker cleared) when it did not succeed after dest's last change
    (pending); else a no-op saying note."""
    if not after or not pending(dest):
        host.noop(note)
        return
    report_redo(dest, after)
    yield StringCommand(then_cleared(dest, after))


def atomic_write_commands(text: str, dest: str, mode: str, after: str | None = None) -> list[Any]:
    """The folder, the original kept, the old file backed up (and, with `after`, its pending
    marker); the new text beside dest; owner, mode, the rename over dest and `after` (each step
    only when the one before succeeded; the marker cleared last): one remote command, or, for a
    text over INLINE_MAX, a command, an upload and a command."""
    temp = temp_path(dest)
    q_dest, q_temp = shlex.quote(dest), shlex.quote(temp)
    # A temporary an earlier run left when the power went (named after that run) goes first.
    steps = [StringCommand(f"mkdir -p {shlex.quote(str(Path(dest).parent))} && "
                           f"rm -f -- {q_dest}{NEW_INFIX}*"),
             keep_original_command(dest), backup_command(dest)]
    if after:
        steps.append(StringCommand(mark_pending(dest)))
    finish = StringCommand(f"chown root:root {q_temp} && chmod {mode} {q_temp} && "
                           f"{durable_rename(q_temp, q_dest)}"
                           + (f" && {then_cleared(dest, after)}" if after else ""))
    return staged_write(joined_command(*steps), text, temp, finish)


def staged_write(prepare: StringCommand, text: str, temp: str, finish: StringCommand) -> list[Any]:
    """prepare, then text written to temp, then finish: one remote command (`printf`, for a
    text up to INLINE_MAX), or a command, an upload and a command."""
    quoted = shlex.quote(text)
    if len(shlex.quote(quoted).encode()) <= INLINE_MAX:
        write = StringCommand(f"printf '%s' {quoted} > {shlex.quote(temp)}")
        return [joined_command(prepare, write, finish)]
    return [prepare, FileUploadCommand(StringIO(text), temp), finish]


def _report_content_change(dest: str, exists: bool, text: str) -> None:
    lines = len(text.splitlines())
    report_change(dest, "content differs" if exists else "(absent)", f"{lines} lines",
                  where=None if diff_enabled() else "--diff shows the content")
    if diff_enabled():
        old = "\n".join(node().contents.get(dest) or []) + "\n" if exists else None
        log_file_diff(dest, old, text)


@operation()
def owned_file(dest: str, text: str, mode: str = "644", after: str | None = None):
    """
    Make dest hold exactly text, root-owned with mode (atomic rename, original kept).

    + dest: remote path
    + text: the whole content
    + mode: octal mode
    + after: shell command run after a content change (e.g. `systemctl daemon-reload`)
    """
    current = node().file(dest)
    if current is None or current.sha1 != sha1_text(text):
        _report_content_change(dest, current is not None, text)
        yield from atomic_write_commands(text, dest, mode, after=after)
        return
    drift = current.drift(mode)
    redo = after if after and pending(dest) else None
    if not drift and not redo:
        host.noop(f"{dest} is up to date")
        return
    for item in drift:
        setting, _, values = item.partition(" ")
        old, _, new = values.partition(" -> ")
        report_change(f"{dest} {setting}", old, new)
    if redo:
        report_redo(dest, redo)
    commands = [f"chown root:root {shlex.quote(dest)} && chmod {mode} {shlex.quote(dest)}"
                ] if drift else []
    commands += [then_cleared(dest, redo)] if redo else []
    yield StringCommand(" && ".join(commands))


def template_file(
    template: str, dest: str, mode: str = "644", after: str | None = None, **variables: Any
):
    """Add an owned_file operation for templates/<template> rendered with variables."""
    return owned_file(
        name=f"Write {dest}",
        dest=dest,
        text=render_template(template, **variables),
        mode=mode,
        after=after,
    )


def mark_created_command(path: str) -> StringCommand:
    """Mark the topmost folder `mkdir -p path` is about to create as absent before gpunode
    (originals/<folder>.absent), so undo can take it away again."""
    marker = shlex.quote(original_path("")) + '"$top"' + shlex.quote(ABSENT_SUFFIX)
    return StringCommand(
        f"d={shlex.quote(path)}; top=; while [ ! -e \"$d\" ]; do top=$d; d=$(dirname \"$d\"); "
        f"done; if [ -n \"$top\" ]; then m={marker}; mkdir -p \"$(dirname \"$m\")\" && "
        f": > \"$m\"; fi"
    )


@operation()
def directory_present(path: str, mode: str = "755"):
    """
    Make sure a directory exists (created with mode when missing; an existing one is left as
    it is, and a created one is marked for undo). From the snapshot (the folder among its
    needs' folders): a present directory costs no read of its own.

    + path: remote directory
    + mode: octal mode for a directory created here
    """
    if node().folder_exists(path):
        host.noop(f"{path} exists")
        return
    report_change(path, "(absent)", "created", where=f"mode {mode}")
    quoted = shlex.quote(path)
    yield joined_command(mark_created_command(path),
                         StringCommand(f"mkdir -p {quoted} && chmod {mode} {quoted}"))
