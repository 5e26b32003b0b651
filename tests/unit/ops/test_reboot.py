"""The reboot operation: pyinfra's server.reboot with its wait made readable (no paramiko
traceback while the host is down, one line naming the host and the fix when it never returns)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.context import ctx_host, ctx_state

from gpunode.roles.ops import reboot as reboot_mod
from gpunode.roles.pyinfra_adapter import inner_commands


def test_the_wait_of_pyinfras_reboot_is_replaced_by_the_readable_one():
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        commands = list(inner_commands(reboot_mod.reboot, reboot_timeout=60))
    waits = [c for c in commands if isinstance(c, FunctionCommand)
             and c.function is reboot_mod.readable_wait]
    assert len(waits) == 1
    assert waits[0].args[0].__name__ == "wait_and_reconnect" and waits[0].args[1] == 60
    assert "reboot" in " ".join(str(c) for c in commands)


class FakeHost(SimpleNamespace):
    def log_styled(self, message, fg=None, log_func=None):
        self.logged.append(message)


def test_paramiko_is_quiet_during_the_wait_and_restored_after():
    seen = {}

    def wait(state, host):
        seen["level"] = logging.getLogger("paramiko.transport").getEffectiveLevel()
        logging.getLogger("paramiko.transport").error("Error reading SSH protocol banner")

    host = FakeHost(name="gpu-07", logged=[])
    before = logging.getLogger("paramiko.transport").level
    assert reboot_mod.readable_wait(None, host, wait, 30) is True
    assert seen["level"] > logging.CRITICAL
    assert logging.getLogger("paramiko.transport").level == before


def test_a_host_that_never_returns_fails_with_its_name_and_the_fix():
    def wait(state, host):
        raise Exception("Server did not reboot in time (reboot_timeout=30s)")

    host = FakeHost(name="gpu-07", logged=[])
    assert reboot_mod.readable_wait(None, host, wait, 30) is False
    [message] = host.logged
    assert message.startswith("gpu-07: did not reboot in time: no SSH login within 30 s")
    assert "Fix:" in message and "reboot_timeout" in message
