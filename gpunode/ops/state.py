"""The node's state before gpunode's first apply, recorded once in /var/lib/gpunode/state.json
(the runtime values undo puts back), and the end of undo that forgets it."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation
from pyinfra.facts.files import Directory
from pyinfra.facts.systemd import SystemdEnabled

from gpunode.facts.apt import AptHolds
from gpunode.facts.cache import cached_fact, changes_fact
from gpunode.facts.cmdline import CmdlineState, KernelCmdline
from gpunode.facts.kernel_params import KernelParams, KernelParamsState
from gpunode.facts.owned import STATE_DIR, STATE_FILE, NodeState, RecordedState
from gpunode.facts.sections import as_model, fact_data
from gpunode.ops.changes import report_change
from gpunode.ops.files import temp_path
from gpunode.ops.services import systemd_booted


def unit_enabled(unit: str) -> bool:
    """The unit is enabled (cached SystemdEnabled; False without systemd)."""
    if not systemd_booted():
        return False
    return bool((fact_data(cached_fact(SystemdEnabled, services=[unit])) or {}).get(unit))


def node_state(sysctl_keys: list[str], modules: list[str], unit: str,
               units: list[str] | None = None) -> NodeState:
    """What the node is like now, from the cached facts."""
    params = as_model(KernelParamsState, cached_fact(KernelParams, sysctl_keys=sysctl_keys,
                                                     modules=modules))
    return NodeState(
        recorded=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        sysctls=dict(sorted(params.sysctls.items())),
        modules_loaded=sorted(m.replace("-", "_") for m in modules
                              if m.replace("-", "_") in params.loaded_modules),
        holds=sorted(fact_data(cached_fact(AptHolds)) or []),
        boot_unit_enabled=unit_enabled(unit),
        cmdline=as_model(CmdlineState, cached_fact(KernelCmdline)).booted,
        units_enabled={u: unit_enabled(u) for u in units or []},
    )


def damaged_record_message(why: str) -> str:
    """The refusal for a state.json that is there but not valid: the file, why, the fix."""
    return (f"{STATE_FILE} is damaged ({why}); gpunode won't take it for \"never applied\" "
            "(it would record tuned values as the originals). Fix: put back a good copy, or "
            f"if the node is as it was before gpunode, remove {STATE_FILE} and run again")


def state_problems() -> list[str]:
    """Preflight: a damaged state.json, refused before any change (see recorded_state)."""
    raw = fact_data(cached_fact(RecordedState))
    if isinstance(raw, dict) and "damaged" in raw:
        return [damaged_record_message(str(raw["damaged"]))]
    return []


def recorded_state() -> NodeState | None:
    """state.json validated again by NodeState (never trusted as read); OperationError naming
    the file and the fix when it is damaged."""
    raw = fact_data(cached_fact(RecordedState))
    if isinstance(raw, dict) and "damaged" in raw:
        raise OperationError(f"{host.name}: {damaged_record_message(str(raw['damaged']))}")
    return NodeState.model_validate(raw) if raw else None


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
    changes_fact(RecordedState)
    changes_fact(Directory, path=STATE_DIR)
    text = json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n"
    temp = temp_path(STATE_FILE)
    yield StringCommand(f"mkdir -p {STATE_DIR} && chmod 700 {STATE_DIR}")
    yield FileUploadCommand(StringIO(text), temp)
    yield StringCommand(f"mv -f {shlex.quote(temp)} {shlex.quote(STATE_FILE)}")


@operation()
def state_forgotten():
    """
    Remove /var/lib/gpunode (state.json, originals, backups): the last step of undo, run only
    when every restore before it succeeded.
    """
    recorded = recorded_state()
    present = recorded is not None or bool(cached_fact(Directory, path=STATE_DIR))
    if not present:
        host.noop(f"{STATE_DIR} absent")
        return
    report_change(STATE_DIR, "present", "(removed)", where="originals, backups, state.json")
    changes_fact(RecordedState)
    changes_fact(Directory, path=STATE_DIR)
    yield StringCommand(f"rm -rf {STATE_DIR}")

