"""Proxmox VE boot operations: `proxmox-boot-tool kernel pin`."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpunode.facts.proxmox import BootToolStatus, ProxmoxBootInfo
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.shell import argv


@operation()
def kernel_pin(version: str):
    """
    Pin the kernel Proxmox boots by default (`proxmox-boot-tool kernel pin`).

    + version: kernel release, e.g. 6.8.12-4-pve
    """
    info = node().boot_tool or ProxmoxBootInfo(status=BootToolStatus(present=False))
    if info.pinned == version:
        host.noop(f"kernel {version} already pinned")
        return
    report_change("proxmox-boot-tool kernel pin", info.pinned or "(none)", version,
                  where="next boot")
    yield argv("proxmox-boot-tool", "kernel", "pin", version)
