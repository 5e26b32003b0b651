"""Undo: take gpunode off a node, as it found it (gpunode.roles.undo).

    pyinfra INVENTORY deploy/undo.py --dry     # what would be put back, value by value
    pyinfra INVENTORY deploy/undo.py -y

Removes the files gpunode owns (or puts back what was there), puts /etc/default/grub and
/etc/kernel/cmdline back from the originals the first change kept (or takes out only
gpunode's parameters where you changed the file since), puts back the sysctl values recorded
before the first apply, releases the holds gpunode added, disables and removes the boot unit,
the verify timer (its script, units, metrics file, and the metrics folder when gpunode
made it) and gpunode-nvidia-nodes.service, removes /etc/modprobe.d/gpunode-nvidia.conf (the
initramfs refreshed where it holds the NVIDIA module), disables nvidia-persistenced when
gpunode enabled it, then removes /var/lib/gpunode.
It reports what needs a reboot. First, on a Proxmox host, each container's config loses
exactly the lines gpunode added (gpunode.deploys.containers.containers_undo): the user's
lines, devN keys, [pve:pending] and snapshot sections stay, the old file is kept.
"""

from pyinfra import host, state

from gpunode.deploys.containers import containers_undo
from gpunode.facts.cmdline import GPUNODE_GRUB_DROPIN
from gpunode.facts.snapshot import Needs, lock_problems, read_node
from gpunode.ops.preflight import refuse_host
from gpunode.ops.state import state_problems
from gpunode.profile.loader import profiles_of_run
from gpunode.profile.node import NodeProfile
from gpunode.profile.sysctls import BEST_EFFORT_SYSCTLS
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles.gpu_runtime import PERSISTENCED_UNIT
from gpunode.roles.gpu_runtime.driver_boot import (
    INITRAMFS_REFRESH,
    MODPROBE_FILE,
    NODES_UNIT,
    NODES_UNIT_FILE,
)
from gpunode.roles.gpu_runtime.driver_boot import OWNED_FILES as DRIVER_BOOT_FILES
from gpunode.roles.host_tuning import BOOT_UNIT, BOOT_UNIT_FILE, OWNED_FILES, SYSTEMD_MEMLOCK_FILE
from gpunode.roles.lxc_gpu.record import record_needs as lxc_record_needs
from gpunode.roles.nvidia_driver import NVIDIA_PATTERNS, PREFERENCES_FILE
from gpunode.roles.undo import UndoTargets, undo_needs, undo_node
from gpunode.roles.verify_timer import METRICS_FILE_NAME, UNIT_DIR, VERIFY_TIMER
from gpunode.roles.verify_timer import OWNED_FILES as VERIFY_FILES

RELOAD = "systemctl daemon-reload"
AFTER = {BOOT_UNIT_FILE: RELOAD, SYSTEMD_MEMLOCK_FILE: RELOAD,
         NODES_UNIT_FILE: RELOAD, MODPROBE_FILE: INITRAMFS_REFRESH,
         GPUNODE_GRUB_DROPIN: "update-grub",
         **{path: RELOAD for path in VERIFY_FILES if path.startswith(UNIT_DIR)}}
KERNEL_HOLD_PATTERNS = ["linux-image-*", "proxmox-kernel-*", "pve-kernel-*"]
EDITED = {"/etc/default/grub": "update-grub", "/etc/kernel/cmdline": "proxmox-boot-tool refresh"}


def undo_targets(profile: NodeProfile) -> UndoTargets:
    """What gpunode puts on a node with this profile."""
    return UndoTargets(
        owned_files={path: AFTER.get(path) for path in (*OWNED_FILES, PREFERENCES_FILE,
                                                        GPUNODE_GRUB_DROPIN, *VERIFY_FILES,
                                                        *DRIVER_BOOT_FILES)},
        edited_files=EDITED,
        unit=BOOT_UNIT,
        timers=[VERIFY_TIMER, NODES_UNIT],  # stopped and disabled before their files go
        foreign_units=[PERSISTENCED_UNIT],
        created_files=[f"{profile.metrics_dir}/{METRICS_FILE_NAME}"],
        created_folders={profile.metrics_dir: [METRICS_FILE_NAME]},
        gpu_runtime=profile.gpu_persistence or profile.gpu_power_limit is not None,
        hold_patterns=[*KERNEL_HOLD_PATTERNS, *NVIDIA_PATTERNS],
        modules=sorted(m.replace("-", "_") for m in profile.modules),
        best_effort_sysctls=BEST_EFFORT_SYSCTLS,
    )


def undo() -> None:
    """Put this host back as gpunode found it: its containers' GPU lines first (their
    records live under /var/lib/gpunode, which the host's undo removes last)."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    targets = undo_targets(profile)
    needs = undo_needs(targets, sorted(profile.sysctls)) | lxc_record_needs() | Needs(lock=True)
    snapshot = read_node(needs)
    if refuse_host([*lock_problems(snapshot), *state_problems()]):  # nothing is undone
        return
    if snapshot.recorded is not None:  # a record of keys the profile no longer sets: read them
        read_node(needs | Needs(sysctl_keys=tuple(snapshot.recorded.sysctls)))
    containers_undo()
    undo_node(targets)
