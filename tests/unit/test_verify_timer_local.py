"""The verify_timer role's plan on a real pyinfra State for @local, with the profile's
verify_timer on: this machine's own snapshot (CPU, files; no systemd here: the timer is not
installed), read once. Nothing is executed."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.host import Host

from gpunode.facts.node_read import NodeRead
from gpunode.facts.snapshot import read_node
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import deploy
from gpunode.roles import host_tuning
from gpunode.roles import verify_timer as verify_timer_role
from gpunode.roles.verify_timer import VERIFY_SCRIPT, VERIFY_TIMER, verify_timer
from tests.unit._planned import planned_commands

REAL_GET_FACT = Host.get_fact


@pytest.fixture(autouse=True)
def _not_cli(monkeypatch):
    monkeypatch.setattr("pyinfra.is_cli", False)


def plan(profile: NodeProfile) -> tuple[list[tuple[str, list[str]]], list[type]]:
    """(operation name, commands) in order, and the facts read (in order), when the site
    deploy's read names the role's needs (host tuning's too: the module plan)."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    read: list[type] = []

    def get_fact(self, cls, *args, **kwargs):
        read.append(cls)
        return REAL_GET_FACT(self, cls, *args, **kwargs)

    @deploy("verify timer after the site's read")
    def site_part() -> None:
        read_node(verify_timer_role.needs(profile) | host_tuning.needs(profile))
        verify_timer(profile, kernel_pin="6.8.12-9-pve")

    with patch.object(Host, "get_fact", get_fact):
        add_deploy(state, site_part)
        steps = planned_commands(state, host)
    return steps, read


def test_the_timer_off_and_never_installed_here_plans_nothing():
    """Off, it only looks whether an earlier run installed the timer (in the one read)."""
    profile = NodeProfile()
    assert profile.verify_timer is False
    steps, read = plan(profile)
    assert steps == []
    assert read == [NodeRead]


def test_the_timer_on_writes_the_script_and_units_and_enables_the_timer():
    profile = NodeProfile(verify_timer=True, metrics_dir="/var/lib/prometheus/node-exporter")
    steps, read = plan(profile)
    names = [name.split(" | ")[-1] for name, _ in steps]  # inside the test's own deploy
    assert names[0] == "Metrics directory /var/lib/prometheus/node-exporter"
    assert any(VERIFY_SCRIPT in name for name in names)
    assert any("gpunode-verify.service" in name for name in names)
    assert names[-1] == f"Enable {VERIFY_TIMER} (every {profile.verify_interval})"
    assert steps[-1][1] == [f"systemctl enable --now {VERIFY_TIMER}"]
    # The role plans from the one read, its needs and host tuning's (the module plan).
    assert read == [NodeRead]


def test_the_two_unit_files_reload_systemd_once():
    """Not booted with systemd here, so no `systemctl enable` reloads it for the files: one
    daemon-reload, after the last unit file written, not one a file (~1.7 s each on the lab
    guest). Where systemd runs, the `systemctl enable` reloads it and the files add none: the
    lab's deploy cycle converges with that and finds the units enabled and started."""
    profile = NodeProfile(verify_timer=True, metrics_dir="/var/lib/prometheus/node-exporter")
    steps, _ = plan(profile)
    reloads = [name for name, commands in steps for command in commands
               if "systemctl daemon-reload" in command]
    assert len(reloads) == 1 and reloads[0].endswith(f"Write /etc/systemd/system/{VERIFY_TIMER}")
