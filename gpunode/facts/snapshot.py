"""The snapshot: the live node read once, in one remote command, into one typed object.

Step 2 of the flow (docs/design.md): profile -> **snapshot** -> plan -> commands -> read-back.

A deploy says what its roles need (`Needs`: plain paths, units, packages and a few flags, each
role's `needs(profile)`), and `read_node()` reads all of it in one command (`NodeRead`, in
gpunode.facts.node_read: each part's own command between markers, each parsed by its own
pure parser) into a `Snapshot`.
Every operation of the run plans from that snapshot (`node()`), in the dry run and in the
apply alike, so both say the same. The node is read again only where it really changed under
the run: after an operation that installs packages or reboots (it yields `node_changed()`),
and for the final verify when anything changed.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand

from gpunode.facts.lock import LOCK_FILE
from gpunode.facts.node_read import NodeRead
from gpunode.facts.owned import PENDING_DIR
from gpunode.facts.sections import fact_data
from gpunode.facts.snapshot_model import Needs, Part, Paths, Snapshot, combined
from gpunode.pyinfra_adapter import (
    current_state,
    diff_requested,
    operation_results,
    run_store,
    unproxied,
)

__all__ = ["Needs", "Part", "Paths", "Snapshot", "combined", "lock_problems", "mark_stale",
           "node", "node_changed", "read_node", "stale_if_changed"]


# --- the run's snapshot of each host -------------------------------------------------------

_STORE = "_gpunode_snapshots"


class _Held:
    """A host's snapshot in this run, the needs it was read with, and whether it is stale."""

    def __init__(self, needs: Needs, snapshot: Snapshot) -> None:
        self.needs, self.snapshot, self.stale = needs, snapshot, False


def _store() -> dict[str, _Held]:
    """The run's snapshots by host (none kept outside a pyinfra state)."""
    return run_store(_STORE) if current_state() is not None else {}


def _held() -> _Held | None:
    return _store().get(host.name)


def _as_snapshot(value: Any) -> Snapshot:
    """NodeRead's value (operation tests give its fields as plain data)."""
    return value if isinstance(value, Snapshot) else Snapshot.model_validate(
        fact_data(value) or {})


def _read(needs: Needs) -> Snapshot:
    snapshot = _as_snapshot(host.get_fact(NodeRead, needs=needs))
    _store()[host.name] = _Held(needs, snapshot)
    return snapshot


def read_node(needs: Needs) -> Snapshot:
    """The current host's snapshot for these needs: read in one command, unless this run
    already holds one that covers them and nothing made it stale. Under --diff every owned
    file's text is read too (the diff's old side)."""
    if diff_requested():
        needs = needs | Needs(contents=needs.files)
    if needs.files:  # the commands a change of those files left to finish (owned.PENDING_DIR)
        needs = needs | Needs(folders=(PENDING_DIR,))
    held = _held()
    if held is not None and not held.stale and (held.needs | needs) == held.needs:
        return held.snapshot
    return _read(needs if held is None else held.needs | needs)


def node() -> Snapshot:
    """The current host's snapshot: the run's (read again when stale), or, outside a gpunode
    deploy (an operation test), the NodeRead fact as given."""
    held = _held()
    if held is None:
        return _as_snapshot(host.get_fact(NodeRead))
    if held.stale:
        return _read(held.needs)
    return held.snapshot


def mark_stale(state: Any, host: Any) -> bool:
    """The host's snapshot is out of date: its next node() reads the node again."""
    held = _store().get(host.name)
    if held is not None:
        held.stale = True
    return True


def node_changed() -> FunctionCommand:
    """Yield it after commands that change what the snapshot holds beyond the operation's own
    setting (a package install, a reboot): the next node() reads the node again."""
    return FunctionCommand(mark_stale, (), {})


def lock_problems(snapshot: Snapshot) -> list[str]:
    """The refusal of a run whose read asked for the node lock and did not get it."""
    if snapshot.lock is None:
        return [f"could not take {LOCK_FILE} (flock, setsid and a writable /run are needed)"]
    return [snapshot.lock.refusal] if snapshot.lock.refusal else []


def stale_if_changed() -> None:
    """At the end of a run (a verify): when any operation of it changed the current host,
    the next read of the node is a new snapshot."""
    if changed_in_this_run():
        mark_stale(current_state(), host)


def changed_in_this_run() -> bool:
    """Did any operation of this run change the current host?"""
    changed, _, _ = operation_results(current_state(), unproxied(host))
    return bool(changed)
