"""The verify_timer role's plan on a real pyinfra State for @local, with the profile's
verify_timer on: this machine's own facts (CPU, files), except systemd's, which this machine
may not run (its two facts say: the timer is not installed). Nothing is executed."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.host import Host
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.profile.node import NodeProfile
from gpunode.roles.host_tuning import host_tuning_reads
from gpunode.roles.verify_timer import (
    VERIFY_SCRIPT,
    VERIFY_TIMER,
    verify_timer,
    verify_timer_reads,
)
from tests.unit._planned import planned_commands

REAL_GET_FACT = Host.get_fact


@pytest.fixture(autouse=True)
def _not_cli(monkeypatch):
    monkeypatch.setattr("pyinfra.is_cli", False)


def plan(profile: NodeProfile) -> tuple[list[tuple[str, list[str]]], set[type]]:
    """(operation name, commands) in order, and the fact classes the role read."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    read: set[type] = set()

    def get_fact(self, cls, *args, **kwargs):
        read.add(cls)
        if cls in (SystemdStatus, SystemdEnabled):
            return {}
        return REAL_GET_FACT(self, cls, *args, **kwargs)

    with patch.object(Host, "get_fact", get_fact):
        add_deploy(state, verify_timer, profile, kernel_pin="6.8.12-9-pve")
        steps = planned_commands(state, host)
    return steps, read


def test_the_timer_off_and_never_installed_here_plans_nothing():
    """Off, it only looks whether an earlier run installed the timer (its prefetch reads)."""
    profile = NodeProfile()
    assert profile.verify_timer is False
    steps, read = plan(profile)
    assert steps == []
    assert read and read <= {r.fact for r in verify_timer_reads(profile)}


def test_the_timer_on_writes_the_script_and_units_and_enables_the_timer():
    profile = NodeProfile(verify_timer=True, metrics_dir="/var/lib/prometheus/node-exporter")
    steps, read = plan(profile)
    names = [name for name, _ in steps]
    assert names[0] == "Metrics directory /var/lib/prometheus/node-exporter"
    assert any(VERIFY_SCRIPT in name for name in names)
    assert any("gpunode-verify.service" in name for name in names)
    assert names[-1] == f"Enable {VERIFY_TIMER} (every {profile.verify_interval})"
    assert steps[-1][1] == [f"systemctl enable --now {VERIFY_TIMER}"]
    # The site deploy's prefetch names every fact the role reads (one remote read on a real
    # node): its own list, and host tuning's for the module plan (KernelParams).
    prefetched = [*verify_timer_reads(profile), *host_tuning_reads(profile)]
    assert read <= {r.fact for r in prefetched}
