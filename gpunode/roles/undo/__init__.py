"""undo: take gpunode off a node, and the record of the node that makes it possible.

Before its first change, an apply records the node's runtime values in
/var/lib/gpunode/state.json (record_state). Undo (undo_node) then, in this order: stops and
disables the boot unit; puts back the recorded sysctl values at runtime; releases the apt holds
gpunode added; puts each owned file back to its original or removes it; puts each edited
bootloader file back (or takes out only gpunode's parameters, when it was changed since) and
refreshes the bootloader; and last removes /var/lib/gpunode. Each step is a no-op on a node
already back, so a second undo changes nothing. What only a reboot undoes is reported.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host, logger
from pyinfra.facts.files import Directory
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.roles.facts.apt import AptHolds
from gpunode.roles.facts.bundle import FactRead
from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.facts.cmdline import CmdlineState, KernelCmdline
from gpunode.roles.facts.kernel_params import KernelParams, KernelParamsState
from gpunode.roles.facts.owned import (
    STATE_DIR,
    KeptOriginals,
    NodeState,
    OwnedFiles,
    RecordedState,
    original_path,
    written_path,
)
from gpunode.roles.facts.sections import as_model
from gpunode.roles.ops.changes import log_wrapped
from gpunode.roles.ops.services import unit_disabled
from gpunode.roles.ops.state import recorded_state, state_forgotten, state_recorded
from gpunode.roles.ops.sysctl import sysctl_values
from gpunode.roles.ops.undo import edited_file_restored, holds_released, owned_file_removed
from gpunode.roles.pyinfra_adapter import deploy


class UndoTargets(BaseModel):
    """What gpunode puts on a node: the deploy names them (each role owns its list)."""

    model_config = ConfigDict(frozen=True)

    owned_files: dict[str, str | None]  # path -> command to run after it changes
    edited_files: dict[str, str]  # path -> bootloader refresh command
    unit: str
    hold_patterns: list[str]
    modules: list[str] = []
    best_effort_sysctls: frozenset[str] = frozenset()


def record_reads(sysctl_keys: list[str], modules: list[str], unit: str) -> list[FactRead]:
    """The facts record_state reads (for prefetch)."""
    return [FactRead(RecordedState), FactRead(AptHolds), FactRead(KernelCmdline),
            FactRead(KernelParams, {"sysctl_keys": sorted(sysctl_keys),
                                    "modules": sorted(modules)}),
            FactRead(SystemdEnabled, {"services": [unit]})]


def record_state(sysctl_keys: list[str], modules: list[str], unit: str) -> None:
    """Record the node's runtime values once, before gpunode's first change."""
    state_recorded(name="Record the node's state before gpunode's first change",
                   sysctl_keys=sysctl_keys, modules=modules, unit=unit)


def undo_reads(targets: UndoTargets) -> list[FactRead]:
    """Every fact undo_node reads (for prefetch)."""
    owned = list(targets.owned_files)
    edited = list(targets.edited_files)
    reads = [FactRead(RecordedState), FactRead(AptHolds), FactRead(KernelCmdline),
             FactRead(Directory, {"path": STATE_DIR}),
             FactRead(SystemdStatus, {"services": [targets.unit]}),
             FactRead(SystemdEnabled, {"services": [targets.unit]}),
             FactRead(KeptOriginals, {"paths": owned + edited})]
    reads += [FactRead(OwnedFiles, {"paths": [p, original_path(p)]}) for p in owned]
    reads += [FactRead(OwnedFiles, {"paths": [p, original_path(p), written_path(p)]})
              for p in edited]
    return reads


def reboot_notes(recorded: NodeState | None, targets: UndoTargets) -> list[str]:
    """What stays live until the next reboot once undo has run (nothing known without a
    record)."""
    if recorded is None:
        return []
    notes = []
    booted = as_model(CmdlineState, cached_fact(KernelCmdline)).booted
    added = [t for t in booted if t not in recorded.cmdline]
    if added:
        notes.append(f"the booted cmdline still has {' '.join(added)}")
    live = as_model(KernelParamsState, cached_fact(
        KernelParams, sysctl_keys=sorted(recorded.sysctls), modules=sorted(targets.modules)))
    loaded = sorted(m for m in live.loaded_modules if m in targets.modules
                    and m not in recorded.modules_loaded)
    if loaded:
        notes.append(f"modules gpunode loaded stay loaded: {' '.join(loaded)}")
    notes.append(f"device and CPU values {targets.unit} set (MaxReadReq, C-states, governor) "
                 "stay until the next boot")
    return notes


@deploy("gpunode: undo")
def undo_node(targets: UndoTargets) -> None:
    """Put the node back as gpunode found it (see the module docstring)."""
    recorded = recorded_state()
    unit_disabled(name=f"Stop and disable {targets.unit}", unit=targets.unit)
    if recorded is not None:
        sysctl_values(name="Put back the sysctl values recorded before the first apply",
                      values=recorded.sysctls,
                      best_effort=frozenset(targets.best_effort_sysctls & set(recorded.sysctls)))
        holds_released(name="Release the apt holds gpunode added",
                       recorded_holds=recorded.holds, patterns=targets.hold_patterns)
    else:
        log_wrapped(logger.warning, f"{host.name}: no {STATE_DIR}/state.json (gpunode never "
                    "applied here, or before it kept one): runtime values and holds left as "
                    "they are")
    for path, after in targets.owned_files.items():
        owned_file_removed(name=f"Put back {path}", dest=path, after=after)
    for path, refresh in targets.edited_files.items():
        edited_file_restored(name=f"Put back {path}", dest=path, refresh=refresh)
    state_forgotten(name=f"Remove {STATE_DIR}")
    notes = reboot_notes(recorded, targets)
    if notes:
        log_wrapped(logger.warning, f"{host.name}: after undo, a reboot is needed: "
                    f"{'; '.join(notes)}")
