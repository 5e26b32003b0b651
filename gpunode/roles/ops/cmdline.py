"""Kernel command line persistence: token-level edits of the bootloader config.

GRUB hosts: GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update-grub.
systemd-boot hosts (Proxmox on ZFS/EFI): /etc/kernel/cmdline, then proxmox-boot-tool refresh.
Each wanted `key=value` is set once (replaced in place or appended); the user's other tokens
and lines stay. The old file is kept as <file>.gpunode-bak; if the bootloader update fails the
old file is put back and the run fails with the tool's name.
"""

from __future__ import annotations

import re
import shlex
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.facts.cmdline import (
    GRUB_DEFAULT_FILE,
    KERNEL_CMDLINE_FILE,
    CmdlineState,
    KernelCmdline,
    edit_grub_default,
    merge_cmdline,
    split_cmdline,
)
from gpunode.roles.facts.sections import as_model
from gpunode.roles.ops.files import BACKUP_SUFFIX

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
    """Back up dest, rename the new text over it, refresh; on failure put the backup back."""
    temp, backup = f"{dest}.gpunode-new", f"{dest}{BACKUP_SUFFIX}"
    q_dest, q_temp, q_backup = shlex.quote(dest), shlex.quote(temp), shlex.quote(backup)
    return [
        FileUploadCommand(StringIO(text), temp),
        StringCommand(f"chown root:root {q_temp} && chmod 644 {q_temp}"),
        StringCommand(f"cp -p {q_dest} {q_backup} && mv -f {q_temp} {q_dest}"),
        StringCommand(
            f"{refresh} || {{ cp -p {q_backup} {q_dest}; "
            f"echo 'gpunode: {refresh.split()[0]} failed; {dest} restored from {backup}' >&2; "
            "exit 1; }"
        ),
    ]


def uses_systemd_boot(state: CmdlineState, bootloader: str) -> bool:
    return bootloader == "systemd-boot" or (bootloader == "auto" and state.systemd_boot)


def new_grub_text(state: CmdlineState, params: dict[str, str | None], entry: str | None) -> str:
    text = state.grub_default_text or ""
    text = edit_grub_default(text, merge_cmdline(state.configured, params))
    return set_grub_default_entry(text, entry) if entry else text


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
    if uses_systemd_boot(state, bootloader):
        if state.kernel_cmdline_text is None:
            raise OperationError(
                f"{host.name}: bootloader: systemd-boot selected but {KERNEL_CMDLINE_FILE} is "
                "missing; set bootloader: grub, or create the file"
            )
        tokens = split_cmdline(state.kernel_cmdline_text)
        wanted = merge_cmdline(tokens, params)
        if wanted != tokens:
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
        yield from replace_with_rollback(GRUB_DEFAULT_FILE, text, "update-grub")
    else:
        host.noop(f"{GRUB_DEFAULT_FILE} already has the parameters")
