"""Undo: take gpunode off a node, as it found it (gpunode.roles.undo).

    pyinfra INVENTORY deploy/undo.py --dry     # what would be put back, value by value
    pyinfra INVENTORY deploy/undo.py -y

Removes the files gpunode owns (or puts back what was there), puts /etc/default/grub and
/etc/kernel/cmdline back from the originals the first change kept (or takes out only
gpunode's parameters where you changed the file since), puts back the sysctl values recorded
before the first apply, releases the holds gpunode added, disables and removes the boot unit,
then removes /var/lib/gpunode. It reports what needs a reboot. Containers: not handled here
(their GPU lines stay; deploy/containers.py owns them).
"""

from pyinfra import host, state

from gpunode.roles.facts.cache import prefetch
from gpunode.roles.facts.cmdline import GPUNODE_GRUB_DROPIN
from gpunode.roles.host_tuning import BOOT_UNIT, BOOT_UNIT_FILE, OWNED_FILES, SYSTEMD_MEMLOCK_FILE
from gpunode.roles.nvidia_driver import NVIDIA_PATTERNS, PREFERENCES_FILE
from gpunode.roles.ops.state import recorded_state
from gpunode.roles.profile.loader import profiles_of_run
from gpunode.roles.profile.node import NodeProfile
from gpunode.roles.profile.sysctls import BEST_EFFORT_SYSCTLS
from gpunode.roles.pyinfra_adapter import fit_cli_tables
from gpunode.roles.undo import UndoTargets, undo_node, undo_reads

AFTER = {BOOT_UNIT_FILE: "systemctl daemon-reload", SYSTEMD_MEMLOCK_FILE: "systemctl daemon-reexec",
         GPUNODE_GRUB_DROPIN: "update-grub"}
KERNEL_HOLD_PATTERNS = ["linux-image-*", "proxmox-kernel-*", "pve-kernel-*"]
EDITED = {"/etc/default/grub": "update-grub", "/etc/kernel/cmdline": "proxmox-boot-tool refresh"}


def undo_targets(profile: NodeProfile) -> UndoTargets:
    """What gpunode puts on a node with this profile."""
    return UndoTargets(
        owned_files={path: AFTER.get(path)
                     for path in (*OWNED_FILES, PREFERENCES_FILE, GPUNODE_GRUB_DROPIN)},
        edited_files=EDITED,
        unit=BOOT_UNIT,
        hold_patterns=[*KERNEL_HOLD_PATTERNS, *NVIDIA_PATTERNS],
        modules=sorted(m.replace("-", "_") for m in profile.modules),
        best_effort_sysctls=BEST_EFFORT_SYSCTLS,
    )


def undo() -> None:
    """Put this host back as gpunode found it."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state.inventory)[host.name]
    targets = undo_targets(profile)
    recorded_state()  # read first: its sysctl keys name the next reads
    prefetch(undo_reads(targets))
    undo_node(targets)
