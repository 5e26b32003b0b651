"""Proxmox VE boot operations: `proxmox-boot-tool kernel pin`."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpunode.facts.cache import cached_fact, changes_fact
from gpunode.facts.proxmox import ProxmoxBootInfo, ProxmoxBootTool
from gpunode.facts.sections import as_model
from gpunode.ops.changes import report_change
from gpunode.ops.shell import argv


@operation()
def kernel_pin(version: str):
    """
    Pin the kernel Proxmox boots by default (`proxmox-boot-tool kernel pin`).

    + version: kernel release, e.g. 6.8.12-4-pve
    """
    info = as_model(ProxmoxBootInfo, cached_fact(ProxmoxBootTool))
    if info.pinned == version:
        host.noop(f"kernel {version} already pinned")
        return
    report_change("proxmox-boot-tool kernel pin", info.pinned or "(none)", version,
                  where="next boot")
    changes_fact(ProxmoxBootTool)
    yield argv("proxmox-boot-tool", "kernel", "pin", version)
