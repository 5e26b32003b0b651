"""What undo must put back, read from the lab guest: every file gpunode writes or edits
(content hash, owner, mode, or absent), the profile's sysctls, /proc/cmdline, apt holds,
the profile's modules, the boot unit, /var/lib/gpunode."""

from __future__ import annotations

import shlex

from gpunode.deploys.undo import EDITED
from gpunode.roles.facts.cmdline import GPUNODE_GRUB_DROPIN
from gpunode.roles.host_tuning import BOOT_UNIT, OWNED_FILES
from gpunode.roles.nvidia_driver import PREFERENCES_FILE

PATHS = sorted({*OWNED_FILES, PREFERENCES_FILE, *EDITED, GPUNODE_GRUB_DROPIN,
                "/var/lib/gpunode"})


def _sh(vm, command: str) -> str:
    rc, out, err = vm.ssh(command)
    assert rc == 0, f"{command}: rc={rc} {err}"
    return out


def snapshot(vm, sysctl_keys: list[str], modules: list[str]) -> dict:
    """The guest's state as a comparable mapping."""
    files = _sh(vm, "; ".join(
        f"if [ -e {shlex.quote(p)} ]; then echo {shlex.quote(p)} "
        f"$(stat -c '%U:%G %a' {shlex.quote(p)}) $( [ -f {shlex.quote(p)} ] && "
        f"sha1sum < {shlex.quote(p)} | cut -c1-12); else echo {shlex.quote(p)} absent; fi"
        for p in PATHS))
    sysctls = _sh(vm, "; ".join(
        f"echo {k}=$(cat /proc/sys/{k.replace('.', '/')} 2>/dev/null || echo missing)"
        for k in sorted(sysctl_keys)))
    loaded = set(_sh(vm, "ls /sys/module").split())
    return {
        "files": dict(line.split(" ", 1) for line in files.splitlines()),
        "sysctls": dict(" ".join(line.split()).split("=", 1) for line in sysctls.splitlines()),
        "cmdline": _sh(vm, "cat /proc/cmdline").split(),
        "holds": sorted(_sh(vm, "apt-mark showhold").split()),
        "modules": sorted(loaded & {m.replace("-", "_") for m in modules}),
        "unit": vm.ssh(f"systemctl is-enabled {BOOT_UNIT}")[1].strip() or "not-found",
    }
