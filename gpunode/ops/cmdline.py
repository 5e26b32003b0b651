"""Kernel command line persistence: token-level edits of the bootloader config.

GRUB hosts: GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update-grub. When a drop-in
in /etc/default/grub.d/ sets GRUB_CMDLINE_LINUX_DEFAULT (or GRUB_DEFAULT, for a kernel pin) it
overrides that file: then gpunode writes its own drop-in, zz-gpunode.cfg, read last, holding
the value the files before it produce with gpunode's parameters merged in, and says which
file made it necessary.
systemd-boot hosts (Proxmox on ZFS/EFI): /etc/kernel/cmdline, then proxmox-boot-tool refresh.
Each wanted `key=value` is set once (replaced in place or appended); the user's other tokens
and lines stay. The file as gpunode first found it is kept for good under
/var/lib/gpunode/originals/ (undo puts it back), each replaced version under
/var/lib/gpunode/backups/ (newest five); if the bootloader update fails the old file is put back
from that backup and the run fails with the tool's name.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from gpunode.facts.cmdline import (
    GPUNODE_GRUB_DROPIN,
    GRUB_CMDLINE_VAR,
    GRUB_DEFAULT_FILE,
    KERNEL_CMDLINE_FILE,
    CmdlineState,
    edit_grub_default,
    grub_cmdline_value,
    merge_cmdline,
    split_cmdline,
    token_key,
)
from gpunode.facts.owned import written_path
from gpunode.facts.shell_assign import ShellValueError, assignment_line
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change, shorten
from gpunode.ops.files import (
    after_if_pending,
    atomic_write_commands,
    backup_command,
    clear_pending,
    durable_remove,
    durable_rename,
    joined_command,
    keep_original_command,
    latest_backup,
    mark_pending,
    render_template,
    staged_write,
    temp_path,
    verified_copy,
)
from gpunode.ops.shell import argv_text

_GRUB_DEFAULT_LINE = re.compile(r"^[ \t]*GRUB_DEFAULT=.*$", re.MULTILINE)


def set_grub_default_entry(text: str, entry: str) -> str:
    """Set GRUB_DEFAULT to a menu entry path (replace the last assignment, or add one)."""
    line = assignment_line("GRUB_DEFAULT", entry)
    matches = list(_GRUB_DEFAULT_LINE.finditer(text))
    if matches:
        last = matches[-1]
        return text[: last.start()] + line + text[last.end():]
    return text + ("" if text.endswith("\n") or not text else "\n") + line + "\n"


def replace_with_rollback(dest: str, text: str, refresh: str) -> list[Any]:
    """Keep the original and back up dest; the new text beside it; rename it over dest and
    refresh (one command, or three: staged_write), on a failed refresh putting the backup
    back, else keeping a copy of what was written (undo compares the file with it)."""
    temp = temp_path(dest)
    q_dest, q_temp = shlex.quote(dest), shlex.quote(temp)
    return staged_write(
        joined_command(keep_original_command(dest), backup_command(dest),
                       StringCommand(mark_pending(dest))), text, temp,
        StringCommand(
            f"chown root:root {q_temp} && chmod 644 {q_temp} && "
            f"{durable_rename(q_temp, q_dest)} && "
            f"{{ {synced(refresh)} || {{ {verified_copy(latest_backup(dest), q_dest)}; "
            f"{clear_pending(dest)}; "
            f"echo 'gpunode: {refresh.split()[0]} failed; {dest} restored from its backup' >&2; "
            f"exit 1; }}; }} && {clear_pending(dest)} && "
            f"mkdir -p {shlex.quote(str(Path(written_path(dest)).parent))} && "
            f"{verified_copy(q_dest, shlex.quote(written_path(dest)))}"
        ))


def synced(refresh: str) -> str:
    """Shell: the bootloader update, then /boot's filesystem synced (what it wrote, on disk
    before gpunode goes on; proxmox-boot-tool unmounts each ESP it wrote, which flushes it)."""
    return f"{refresh} && sync -f /boot"


def overriding_dropins(state: CmdlineState, entry: str | None) -> list[str]:
    """Drop-ins (not gpunode's) that set what gpunode sets: the cmdline, GRUB_DEFAULT if
    pinning."""
    found = set(state.dropins_setting(GRUB_CMDLINE_VAR))
    if entry:
        found |= set(state.dropins_setting("GRUB_DEFAULT"))
    return sorted(found)


def uses_grub_dropin(state: CmdlineState, entry: str | None) -> bool:
    """gpunode's drop-in is needed (another drop-in overrides), or already there."""
    return bool(overriding_dropins(state, entry)) or GPUNODE_GRUB_DROPIN in state.grub_dropins


def grub_dropin_note(state: CmdlineState, entry: str | None) -> str:
    """Why gpunode's parameters are in its drop-in, naming the files; '' when they aren't."""
    if not uses_grub_dropin(state, entry):
        return ""
    others = overriding_dropins(state, entry)
    why = (f"{', '.join(others)} set(s) {GRUB_CMDLINE_VAR}"
           f"{' or GRUB_DEFAULT' if entry else ''} after {GRUB_DEFAULT_FILE}" if others
           else f"{GPUNODE_GRUB_DROPIN} was written by an earlier run")
    return (f"GRUB: {why}: gpunode's kernel parameters are in {GPUNODE_GRUB_DROPIN}, which "
            "update-grub reads last")


def grub_dropin_text(state: CmdlineState, params: dict[str, str | None],
                     entry: str | None) -> str:
    """zz-gpunode.cfg: the cmdline the other files produce, gpunode's parameters merged in."""
    before = split_cmdline(state.grub_value(GRUB_CMDLINE_VAR, skip=(GPUNODE_GRUB_DROPIN,))[0])
    return render_template("grub/zz-gpunode.cfg.j2",
                           cmdline=" ".join(merge_cmdline(before, params)), default_entry=entry)


def grub_dropin_commands(dest: str, text: str, existed: bool) -> list[Any]:
    """Write the drop-in whole, then update-grub; if that fails, put back the old drop-in (or
    remove the new one) and fail naming the tool."""
    q_dest = argv_text(dest)
    restore = verified_copy(latest_backup(dest), q_dest) if existed else durable_remove(q_dest)
    return atomic_write_commands(
        text, dest, "644",
        after=f"{synced('update-grub')} || {{ {restore}; {clear_pending(dest)}; "
        f"echo 'gpunode: update-grub failed; {dest} put back as it was' >&2; exit 1; }}")


def uses_systemd_boot(state: CmdlineState, bootloader: str) -> bool:
    return bootloader == "systemd-boot" or (bootloader == "auto" and state.systemd_boot)


def new_grub_text(state: CmdlineState, params: dict[str, str | None], entry: str | None) -> str:
    text = state.grub_default_text or ""
    text = edit_grub_default(text, merge_cmdline(state.configured, params))
    return set_grub_default_entry(text, entry) if entry else text


def token_changes(old: list[str], new: list[str]) -> list[tuple[str, str | None, str | None]]:
    """(key, old token, new token) for each parameter added, replaced or dropped."""
    old_by_key = {token_key(t): t for t in old}
    new_by_key = {token_key(t): t for t in new}
    out: list[tuple[str, str | None, str | None]] = []
    for key, token in new_by_key.items():
        if old_by_key.get(key) != token:
            out.append((key, old_by_key.get(key), token))
    out += [(key, token, None) for key, token in old_by_key.items() if key not in new_by_key]
    return out


def report_cmdline_changes(old: list[str], new: list[str], where: str) -> None:
    """One line per cmdline parameter that changes in the bootloader config."""
    for key, before, after in token_changes(old, new):
        report_change(f"cmdline {key}", before or "(absent)", after or "(removed)",
                      where=f"{where}; live after reboot")


def report_grub_entry(old_text: str, new_text: str) -> None:
    old, new = grub_cmdline_value(old_text, "GRUB_DEFAULT"), grub_cmdline_value(new_text,
                                                                                "GRUB_DEFAULT")
    if old != new:
        report_change("GRUB_DEFAULT", shorten(old or "(unset)"), shorten(new, 50),
                      where=GRUB_DEFAULT_FILE)


@operation()
def kernel_cmdline(
    params: dict[str, str | None],
    bootloader: str = "auto",
    grub_default_entry: str | None = None,
):
    """
    Persist kernel parameters in the bootloader config (active after the next reboot).

    + params: key -> value (None for a bare flag)
    + bootloader: auto (asks proxmox-boot-tool), grub or systemd-boot
    + grub_default_entry: GRUB menu entry to boot by default (kernel pin on GRUB hosts)
    """
    state = node().cmdline
    try:
        yield from _kernel_cmdline(state, params, bootloader, grub_default_entry)
    except ShellValueError as exc:
        raise OperationError(f"{host.name}: {exc}") from None


def _kernel_cmdline(state: CmdlineState, params: dict[str, str | None], bootloader: str,
                    grub_default_entry: str | None):
    """kernel_cmdline's commands (see there)."""
    if uses_systemd_boot(state, bootloader):
        if state.kernel_cmdline_text is None:
            raise OperationError(
                f"{host.name}: bootloader: systemd-boot selected but {KERNEL_CMDLINE_FILE} is "
                "missing; set bootloader: grub, or create the file"
            )
        tokens = split_cmdline(state.kernel_cmdline_text)
        wanted = merge_cmdline(tokens, params)
        if wanted != tokens:
            report_cmdline_changes(tokens, wanted, KERNEL_CMDLINE_FILE)
            yield from replace_with_rollback(
                KERNEL_CMDLINE_FILE, " ".join(wanted) + "\n", "proxmox-boot-tool refresh"
            )
            return
        yield from after_if_pending(KERNEL_CMDLINE_FILE, synced("proxmox-boot-tool refresh"),
                                    f"{KERNEL_CMDLINE_FILE} already has the parameters")
        return
    if state.grub_default_text is None and bootloader == "auto":
        host.noop(
            f"no {GRUB_DEFAULT_FILE} or {KERNEL_CMDLINE_FILE} (a container, or a boot this "
            "tool does not manage): cmdline not persisted; set bootloader to force"
        )
        return
    if state.grub_default_text is None:
        raise OperationError(
            f"{host.name}: bootloader: no {GRUB_DEFAULT_FILE} on this host; install grub "
            "or set bootloader: systemd-boot"
        )
    if uses_grub_dropin(state, grub_default_entry):
        yield from _grub_dropin(state, params, grub_default_entry)
        return
    text = new_grub_text(state, params, grub_default_entry)
    if text != state.grub_default_text:
        report_cmdline_changes(state.configured, split_cmdline(grub_cmdline_value(text)),
                               f"{GRUB_DEFAULT_FILE} {GRUB_CMDLINE_VAR}")
        report_grub_entry(state.grub_default_text, text)
        yield from replace_with_rollback(GRUB_DEFAULT_FILE, text, "update-grub")
    else:
        yield from after_if_pending(GRUB_DEFAULT_FILE, synced("update-grub"),
                                    f"{GRUB_DEFAULT_FILE} already has the parameters")


def _grub_dropin(state: CmdlineState, params: dict[str, str | None], entry: str | None):
    """The GRUB branch when a drop-in overrides /etc/default/grub (see the module docstring)."""
    later = [p for p in overriding_dropins(state, entry) if p > GPUNODE_GRUB_DROPIN]
    if later:
        raise OperationError(
            f"{host.name}: {', '.join(later)} sort(s) after {GPUNODE_GRUB_DROPIN} and set "
            f"{GRUB_CMDLINE_VAR}: update-grub would let them win over gpunode's kernel "
            "parameters; rename them to sort before zz-gpunode.cfg or move their settings there"
        )
    text = grub_dropin_text(state, params, entry)
    old = state.grub_dropins.get(GPUNODE_GRUB_DROPIN)
    note = grub_dropin_note(state, entry)
    if text == old:
        yield from after_if_pending(GPUNODE_GRUB_DROPIN, synced("update-grub"),
                                    f"{GPUNODE_GRUB_DROPIN} already has the parameters ({note})")
        return
    report_cmdline_changes(state.configured, split_cmdline(grub_cmdline_value(text)),
                           f"{GPUNODE_GRUB_DROPIN} {GRUB_CMDLINE_VAR}")
    yield from grub_dropin_commands(GPUNODE_GRUB_DROPIN, text, existed=old is not None)
