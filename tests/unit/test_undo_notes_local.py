"""What undo says stays live until a reboot (gpunode.roles.undo.reboot_notes), read from this
machine's own booted cmdline on a real pyinfra State for @local."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.context import ctx_host, ctx_state

from gpunode.deploys.undo import undo_targets
from gpunode.facts.owned import NodeState
from gpunode.profile.node import NodeProfile
from gpunode.roles.undo import reboot_notes

with open("/proc/cmdline") as _cmdline:
    BOOTED = _cmdline.read().split()


@pytest.fixture()
def on_local():
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    with ctx_state.use(state), ctx_host.use(state.inventory.get_host("@local")):
        yield


def test_without_a_record_nothing_is_known():
    assert reboot_notes(None, undo_targets(NodeProfile())) == []


def test_cmdline_tokens_added_since_the_record_stay_until_the_reboot(on_local):
    targets = undo_targets(NodeProfile())
    notes = reboot_notes(NodeState(cmdline=BOOTED[1:]), targets)
    assert notes[0] == f"the booted cmdline still has {BOOTED[0]}"
    assert notes[-1].startswith(f"device and CPU values {targets.unit} set")
    # Booted as recorded, and none of gpunode's modules loaded here (no NVIDIA driver).
    assert reboot_notes(NodeState(cmdline=BOOTED), targets) == notes[-1:]

