"""Kernel command line persistence: token-level edits of the bootloader config.

GRUB hosts: GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update-grub.
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
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from gpunode.roles.facts.cache import cached_fact, changes_fact
from gpunode.roles.facts.cmdline import (
    GRUB_CMDLINE_VAR,
    GRUB_DEFAULT_FILE,
    KERNEL_CMDLINE_FILE,
    CmdlineState,
    KernelCmdline,
    edit_grub_default,
    grub_cmdline_value,
    merge_cmdline,
    split_cmdline,
    token_key,
)
from gpunode.roles.facts.sections import as_model
from gpunode.roles.ops.changes import report_change, shorten
from gpunode.roles.ops.files import (
    backup_command,
    joined_command,
    keep_original_command,
    latest_backup,
)

_GRUB_DEFAULT_LINE = re.compile(r"^[ \t]*GRUB_DEFAULT=.*$", re.MULTILINE)


def set_grub_default_entry(text: str, entry: str) -> str:
    """Set GRUB_DEFAULT to a menu entry path (replace the last assignment, or add one)."""
    line = f'GRUB_DEFAULT="{entry}"'
    matches = list(_GRUB_DEFAULT_LINE.finditer(text))
    if matches:
        last = matches[-1]
        return text[: last.start()] + line + text[last.end():]
    return text + ("" if text.endswith("\n") or not text else "\n") + line + "\n"


def replace_with_rollback(dest: str, text: str, refresh: str) -> list[Any]:
    """In one command keep the original and back up dest; upload; in one command rename the
    new text over dest and refresh, on a failed refresh putting the backup back."""
    temp = f"{dest}.gpunode-new"
    q_dest, q_temp = shlex.quote(dest), shlex.quote(temp)
    return [
        joined_command(keep_original_command(dest), backup_command(dest)),
        FileUploadCommand(StringIO(text), temp),
        StringCommand(
            f"chown root:root {q_temp} && chmod 644 {q_temp} && mv -f {q_temp} {q_dest} && "
            f"{{ {refresh} || {{ cp -p {latest_backup(dest)} {q_dest}; "
            f"echo 'gpunode: {refresh.split()[0]} failed; {dest} restored from its backup' >&2; "
            "exit 1; }; }"
        ),
    ]


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
    state = as_model(CmdlineState, cached_fact(KernelCmdline))
    changes_fact(KernelCmdline)  # declared always: only a changing run's declaration counts
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
        host.noop(f"{KERNEL_CMDLINE_FILE} already has the parameters")
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
    text = new_grub_text(state, params, grub_default_entry)
    if text != state.grub_default_text:
        report_cmdline_changes(state.configured, split_cmdline(grub_cmdline_value(text)),
                               f"{GRUB_DEFAULT_FILE} {GRUB_CMDLINE_VAR}")
        report_grub_entry(state.grub_default_text, text)
        yield from replace_with_rollback(GRUB_DEFAULT_FILE, text, "update-grub")
    else:
        host.noop(f"{GRUB_DEFAULT_FILE} already has the parameters")
