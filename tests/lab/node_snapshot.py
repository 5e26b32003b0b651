"""What undo must put back, read from the lab guest: every file gpunode writes or edits
(content hash, owner, mode, or absent), the verify timer's files and the metrics folders above
them, the profile's sysctls, /proc/cmdline, apt holds, the profile's modules, the boot unit and
the timer, /var/lib/gpunode."""

from __future__ import annotations

import shlex

from gpunode.deploys.undo import EDITED
from gpunode.facts.cmdline import GPUNODE_GRUB_DROPIN
from gpunode.profile.node import NodeProfile
from gpunode.roles.host_tuning import BOOT_UNIT, OWNED_FILES
from gpunode.roles.nvidia_driver import PREFERENCES_FILE
from gpunode.roles.verify_timer import METRICS_FILE_NAME, VERIFY_TIMER
from gpunode.roles.verify_timer import OWNED_FILES as TIMER_FILES
from tests.lab.guest import sh

METRICS_DIR: str = NodeProfile.model_fields["metrics_dir"].default  # the lab's metrics_dir
# What the timer's deploy writes, and the folders above the metrics file (absent on the guest
# before the first deploy with the timer: gpunode made them).
TIMER_PATHS = [*TIMER_FILES, f"{METRICS_DIR}/{METRICS_FILE_NAME}", METRICS_DIR,
               "/var/lib/prometheus"]
# Rewritten whenever the timer fires (2 min after boot, then every verify_interval): compared by
# owner and mode, not content.
VOLATILE = {f"{METRICS_DIR}/{METRICS_FILE_NAME}"}
PATHS = sorted({*OWNED_FILES, PREFERENCES_FILE, *EDITED, GPUNODE_GRUB_DROPIN, *TIMER_PATHS,
                "/var/lib/gpunode"})


def _file_line(path: str) -> str:
    """A shell command printing "PATH owner:group mode [hash]" or "PATH absent"."""
    q = shlex.quote(path)
    content = "echo file" if path in VOLATILE else f"sha1sum < {q} | cut -c1-12"
    return (f"if [ -e {q} ]; then echo {q} $(stat -c '%U:%G %a' {q}) "
            f"$( [ -f {q} ] && {content}); else echo {q} absent; fi")


def snapshot(vm, sysctl_keys: list[str], modules: list[str]) -> dict:
    """The guest's state as a comparable mapping."""
    files = sh(vm, "; ".join(_file_line(p) for p in PATHS))
    sysctls = sh(vm, "; ".join(
        f"echo {k}=$(cat /proc/sys/{k.replace('.', '/')} 2>/dev/null || echo missing)"
        for k in sorted(sysctl_keys)))
    loaded = set(sh(vm, "ls /sys/module").split())
    return {
        "files": dict(line.split(" ", 1) for line in files.splitlines()),
        "sysctls": dict(" ".join(line.split()).split("=", 1) for line in sysctls.splitlines()),
        "cmdline": sh(vm, "cat /proc/cmdline").split(),
        "holds": sorted(sh(vm, "apt-mark showhold").split()),
        "modules": sorted(loaded & {m.replace("-", "_") for m in modules}),
        "unit": vm.ssh(f"systemctl is-enabled {BOOT_UNIT}")[1].strip() or "not-found",
        "timer": vm.ssh(f"systemctl is-enabled {VERIFY_TIMER}")[1].strip() or "not-found",
    }
