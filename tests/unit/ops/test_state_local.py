"""The record undo relies on (gpunode.ops.state) planned on a real pyinfra State for
@local: this machine's own sysctls, holds and cmdline are what a first apply would record, the
record reads back with its own fact, and a recorded node is never recorded again. The node is
read into the run's snapshot as a deploy reads it; only the record is given (a node gpunode
already applied) where a case needs one; nothing is executed."""

from __future__ import annotations

import os

import pytest
from pyinfra.api import Config, FileUploadCommand, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.context import ctx_host, ctx_state

from gpunode.facts.owned import STATE_DIR, STATE_FILE, NodeState, RecordedState
from gpunode.facts.snapshot import Needs, read_node
from gpunode.ops.state import state_forgotten, state_recorded
from gpunode.pyinfra_adapter import run_store

RECORD = NodeState(recorded="2026-11-30T09:00:00Z", sysctls={"vm.swappiness": "60"},
                   holds=["proxmox-kernel-6.8"], cmdline=["quiet"])

pytestmark = pytest.mark.skipif(os.path.exists(STATE_DIR),
                                reason=f"gpunode applied on this machine ({STATE_DIR})")


@pytest.fixture(autouse=True)
def _not_cli(monkeypatch):
    monkeypatch.setattr("pyinfra.is_cli", False)


def commands_of(op, recorded: NodeState | None = None, **kwargs) -> list:
    """The commands op yields on @local after the deploy's read (the record given when
    recorded is set)."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    needs = Needs(record=True, holds=True, folders=(STATE_DIR,),
                  sysctl_keys=tuple(kwargs.get("sysctl_keys", ())),
                  modules=tuple(kwargs.get("modules", ())), units=("gpunode-tune.service",))
    with ctx_state.use(state), ctx_host.use(host):
        snapshot = read_node(needs)
        if recorded is not None:
            held = run_store("_gpunode_snapshots")[host.name]
            held.snapshot = snapshot.model_copy(update={"recorded": recorded})
        meta = add_op(state, op, **kwargs)[host]
        return list(state.get_op_data_for_host(host, meta._hash).command_generator())


def test_a_first_apply_records_this_machines_values_in_a_file_its_fact_reads_back():
    commands = commands_of(state_recorded, sysctl_keys=["vm.swappiness", "kernel.pid_max"],
                           modules=["loop"], unit="gpunode-tune.service")
    mkdir, upload, move = commands
    assert str(mkdir) == f"mkdir -p {STATE_DIR} && chmod 700 {STATE_DIR}"
    assert isinstance(upload, FileUploadCommand)
    assert upload.dest == f"{STATE_FILE}.gpunode-new.test-run"
    temp = f"{STATE_FILE}.gpunode-new.test-run"
    # fsynced, renamed, the folder fsynced: a power cut leaves the old record or the new one
    assert str(move) == (f'sync {temp} && mv -f {temp} {STATE_FILE} && '
                         f'sync "$(dirname {STATE_FILE})"')
    text = upload.src.getvalue()
    record = NodeState.model_validate(RecordedState().process(text.splitlines()))
    with open("/proc/sys/vm/swappiness") as live:
        assert record.sysctls["vm.swappiness"] == live.read().strip()
    with open("/proc/cmdline") as cmdline:
        assert record.cmdline == cmdline.read().split()
    assert record.boot_unit_enabled is False


def test_a_recorded_node_keeps_its_first_record():
    assert commands_of(state_recorded, RECORD, sysctl_keys=["vm.swappiness"], modules=[],
                       unit="gpunode-tune.service") == []


def test_undo_forgets_a_recorded_node_and_does_nothing_where_there_is_none():
    [remove] = commands_of(state_forgotten, RECORD)
    assert str(remove) == f"rm -rf {STATE_DIR} && sync /var/lib"
    assert commands_of(state_forgotten) == []
