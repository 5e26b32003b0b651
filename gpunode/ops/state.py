"""The node's state before gpunode's first apply, recorded once in /var/lib/gpunode/state.json
(the runtime values undo puts back), and the end of undo that forgets it."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from gpunode.facts.lock import LOCK_DIR
from gpunode.facts.owned import STATE_DIR, STATE_FILE, NodeState
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.files import durable_rename, temp_path
from gpunode.ops.services import systemd_booted


def unit_enabled(unit: str) -> bool:
    """The unit is enabled (False without systemd)."""
    return systemd_booted() and node().unit(unit).enabled


def node_state(sysctl_keys: list[str], modules: list[str], unit: str,
               units: list[str] | None = None) -> NodeState:
    """What the node is like now, from the snapshot."""
    snapshot = node()
    params = snapshot.kernel
    return NodeState(
        recorded=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        sysctls={key: params.sysctls[key] for key in sorted(sysctl_keys)
                 if key in params.sysctls},
        modules_loaded=sorted(m.replace("-", "_") for m in modules
                              if m.replace("-", "_") in params.loaded_modules),
        holds=sorted(snapshot.holds),
        boot_unit_enabled=unit_enabled(unit),
        cmdline=snapshot.cmdline.booted,
        units_enabled={u: unit_enabled(u) for u in units or []},
    )


def damaged_record_message(why: str) -> str:
    """The refusal for a state.json that is there but not valid: the file, why, the fix."""
    return (f"{STATE_FILE} is damaged ({why}); gpunode won't take it for \"never applied\" "
            "(it would record tuned values as the originals). Fix: put back a good copy, or "
            f"if the node is as it was before gpunode, remove {STATE_FILE} and run again")


def state_problems() -> list[str]:
    """Preflight: a damaged state.json, refused before any change (see recorded_state)."""
    why = node().record_damaged
    return [damaged_record_message(why)] if why else []


def recorded_state() -> NodeState | None:
    """state.json validated again by NodeState (never trusted as read); OperationError naming
    the file and the fix when it is damaged."""
    snapshot = node()
    if snapshot.record_damaged:
        raise OperationError(f"{host.name}: {damaged_record_message(snapshot.record_damaged)}")
    return snapshot.recorded


@operation()
def state_recorded(sysctl_keys: list[str], modules: list[str], unit: str,
                   units: list[str] | None = None):
    """
    Record the node's runtime values in /var/lib/gpunode/state.json, once (before the first
    change gpunode makes; later runs keep that record).

    + sysctl_keys: the sysctls gpunode sets
    + modules: the modules gpunode loads
    + unit: gpunode's boot unit
    + units: units gpunode enables but does not own (nvidia-persistenced)
    """
    recorded = recorded_state()
    if recorded is not None:
        host.noop(f"{STATE_FILE} recorded {recorded.recorded}")
        return
    state = node_state(sorted(sysctl_keys), sorted(modules), unit, units)
    report_change(STATE_FILE, "(absent)",
                  f"{len(state.sysctls)} sysctls, {len(state.modules_loaded)} modules loaded, "
                  f"{len(state.holds)} holds", where="what undo restores")
    text = json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n"
    temp = temp_path(STATE_FILE)
    yield StringCommand(f"mkdir -p {STATE_DIR} && chmod 700 {STATE_DIR}")
    yield FileUploadCommand(StringIO(text), temp)
    yield StringCommand(durable_rename(shlex.quote(temp), shlex.quote(STATE_FILE)))


@operation()
def state_forgotten():
    """
    Remove /var/lib/gpunode (state.json, originals, backups): the last step of undo, run only
    when every restore before it succeeded.
    """
    recorded = recorded_state()
    present = recorded is not None or node().folder_exists(STATE_DIR)
    if not present:
        host.noop(f"{STATE_DIR} absent")
        return
    report_change(STATE_DIR, "present", "(removed)", where="originals, backups, state.json")
    report_change(LOCK_DIR, "present", "(removed)", where="as this run's connection closes")
    yield StringCommand(f"rm -rf {STATE_DIR} && sync {shlex.quote(str(Path(STATE_DIR).parent))}")

