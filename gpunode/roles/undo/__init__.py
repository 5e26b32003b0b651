"""undo: take gpunode off a node, and the record of the node that makes it possible.

Before its first change, an apply records the node's runtime values in
/var/lib/gpunode/state.json (record_state). Undo (undo_node) then, in this order: stops and
disables the verify timer and the boot unit; puts back the recorded sysctl values at runtime;
releases the apt holds gpunode added; disables the units gpunode enabled that were disabled
before (nvidia-persistenced); puts each owned file back to its original or removes it; removes
what gpunode's units wrote (the metrics file) and the folders gpunode created, when empty;
puts each edited bootloader file back (or takes out only gpunode's parameters, when it was
changed since) and refreshes the bootloader; lists the modules gpunode loaded for unloading
once the run's connection is gone; and last removes /var/lib/gpunode (and with it, as the run
ends, /run/gpunode: gpunode.facts.lock). Each step is a
no-op on a node already back, so a second undo changes nothing. What only a reboot undoes is
reported.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger

from gpunode.facts.owned import (
    STATE_DIR,
    NodeState,
    ancestors,
    original_path,
    written_path,
)
from gpunode.facts.snapshot import Needs, node
from gpunode.ops.changes import log_wrapped
from gpunode.ops.modules import modules_unloaded
from gpunode.ops.services import unit_disabled
from gpunode.ops.state import recorded_state, state_forgotten, state_recorded
from gpunode.ops.sysctl import sysctl_values
from gpunode.ops.undo import (
    created_folder_removed,
    edited_file_restored,
    holds_released,
    owned_file_removed,
)
from gpunode.pyinfra_adapter import deploy


class UndoTargets(BaseModel):
    """What gpunode puts on a node: the deploy names them (each role owns its list)."""

    model_config = ConfigDict(frozen=True)

    owned_files: dict[str, str | None]  # path -> command to run after it changes
    edited_files: dict[str, str]  # path -> bootloader refresh command
    unit: str
    hold_patterns: list[str]
    modules: list[str] = []
    best_effort_sysctls: frozenset[str] = frozenset()
    timers: list[str] = []  # stopped and disabled first (gpunode-verify.timer)
    foreign_units: list[str] = []  # enabled by gpunode, not its own: disabled if they were
    created_files: list[str] = []  # written by gpunode's units (the metrics file): removed
    created_folders: dict[str, list[str]] = {}  # folder -> its created_files names
    gpu_runtime: bool = False  # the profile sets GPU persistence or power limits


def record_needs(sysctl_keys: list[str], modules: list[str], unit: str,
                 units: list[str] | None = None) -> Needs:
    """What record_state reads."""
    return Needs(record=True, holds=True, sysctl_keys=tuple(sysctl_keys), modules=tuple(modules),
                 units=(unit, *(units or [])))


def record_state(sysctl_keys: list[str], modules: list[str], unit: str,
                 units: list[str] | None = None) -> None:
    """Record the node's runtime values once, before gpunode's first change (units: those
    gpunode enables but does not own, whose enabled state undo puts back)."""
    state_recorded(name="Record the node's state before gpunode's first change",
                   sysctl_keys=sysctl_keys, modules=modules, unit=unit, units=units or [])


def undo_needs(targets: UndoTargets, sysctl_keys: list[str]) -> Needs:
    """What undo_node reads (sysctl_keys: the profile's; a record with more is read again
    with those, see gpunode.deploys.undo)."""
    owned, edited, created = list(targets.owned_files), list(targets.edited_files), \
        targets.created_files
    folders = [path for folder in targets.created_folders for path in ancestors(folder)]
    files = [*owned, *created, *edited, *(written_path(p) for p in edited)]
    return Needs(
        record=True, holds=True, sysctl_keys=tuple(sysctl_keys), modules=tuple(targets.modules),
        folders=(STATE_DIR, *folders),
        units=(targets.unit, *targets.timers, *targets.foreign_units),
        originals=(*owned, *edited, *created, *folders),
        files=(*files, *(original_path(p) for p in files)),
        contents=tuple(p for path in edited for p in (path, original_path(path),
                                                      written_path(path))),
        nvidia=targets.gpu_runtime,
    )


def reboot_notes(recorded: NodeState | None, targets: UndoTargets) -> list[str]:
    """What stays live until the next reboot once undo has run (nothing known without a
    record)."""
    if recorded is None:
        return []
    notes = []
    snapshot = node()
    booted = snapshot.cmdline.booted
    added = [t for t in booted if t not in recorded.cmdline]
    if added:
        notes.append(f"the booted cmdline still has {' '.join(added)}")
    notes.append(f"device and CPU values {targets.unit} set (MaxReadReq, C-states, governor) "
                 "stay until the next boot")
    if targets.gpu_runtime and snapshot.driver_loaded:
        notes.append("GPU persistence mode and power limits stay until the driver reloads")
    return notes


def foreign_units_restored(recorded: NodeState, units: list[str]) -> None:
    """Disable the units gpunode enabled that were disabled before its first apply; leave
    those it has no record of (recorded by an older gpunode), and say so."""
    for unit in units:
        before = (recorded.units_enabled or {}).get(unit)
        if before is False:
            unit_disabled(name=f"Stop and disable {unit} (disabled before gpunode)", unit=unit)
        elif before is None:
            logger.warning(f"{host.name}: no record of {unit} before gpunode: left as it is")


@deploy("gpunode: undo")
def undo_node(targets: UndoTargets) -> None:
    """Put the node back as gpunode found it (see the module docstring)."""
    recorded = recorded_state()
    for unit in [*targets.timers, targets.unit]:
        unit_disabled(name=f"Stop and disable {unit}", unit=unit)
    if recorded is not None:
        sysctl_values(name="Put back the sysctl values recorded before the first apply",
                      values=recorded.sysctls,
                      best_effort=frozenset(targets.best_effort_sysctls & set(recorded.sysctls)))
        holds_released(name="Release the apt holds gpunode added",
                       recorded_holds=recorded.holds, patterns=targets.hold_patterns)
        foreign_units_restored(recorded, targets.foreign_units)
    else:
        log_wrapped(logger.warning, f"{host.name}: no {STATE_DIR}/state.json (gpunode never "
                    "applied here, or before it kept one): runtime values and holds left as "
                    "they are")
    for path, after in targets.owned_files.items():
        owned_file_removed(name=f"Put back {path}", dest=path, after=after)
    for path in targets.created_files:
        owned_file_removed(name=f"Remove {path}", dest=path)
    for folder, gone in targets.created_folders.items():
        created_folder_removed(name=f"Remove {folder} if gpunode made it", path=folder,
                               gone=gone)
    for path, refresh in targets.edited_files.items():
        edited_file_restored(name=f"Put back {path}", dest=path, refresh=refresh)
    if recorded is not None:
        modules_unloaded(name="Unload the modules gpunode loaded", modules=targets.modules,
                         loaded_before=recorded.modules_loaded)
    state_forgotten(name=f"Remove {STATE_DIR}")
    notes = reboot_notes(recorded, targets)
    if notes:
        log_wrapped(logger.warning, f"{host.name}: after undo, a reboot is needed: "
                    f"{'; '.join(notes)}")
