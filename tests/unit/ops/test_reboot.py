"""The reboot operation: pyinfra's server.reboot with gpunode's wait (a new boot id is the
proof, the timeout a deadline, no paramiko traceback while the host is down, one line naming
the host and the fix when it never returns)."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import gevent
from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import server

from gpunode.facts.boot import BootId, parse_boot_id
from gpunode.ops import reboot as reboot_mod
from gpunode.pyinfra_adapter import inner_commands

OLD, NEW = "3a1bd8f1-4f62-4b5e-9d0a-1c2b3d4e5f60", "9c0e7d8a-2b1f-4c3d-8e7f-6a5b4c3d2e1f"


def _commands(**kwargs):
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        return list(inner_commands(reboot_mod.reboot, **kwargs))


def test_pyinfras_uptime_check_and_wait_are_replaced_by_the_boot_id_wait():
    commands = _commands(reboot_timeout=60, delay=5, interval=3)
    functions = [c.function for c in commands if isinstance(c, FunctionCommand)]
    names = [getattr(f, "__name__", "") for f in functions]
    assert functions[0] is reboot_mod.record_boot_id
    assert reboot_mod.PYINFRA_UPTIME not in names and reboot_mod.PYINFRA_WAIT not in names
    [wait] = [c for c in commands if isinstance(c, FunctionCommand)
              and c.function is reboot_mod.readable_wait]
    assert wait.args[0] is commands[0].args[0]  # the boot id recorded before is the one compared
    assert wait.args[1:] == (5, 3, 60)
    text = " ".join(str(c) for c in commands)
    assert text.index("reboot") < text.index("readable_wait")


def test_pyinfras_reboot_still_has_the_commands_gpunode_replaces():
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        names = [getattr(c.function, "__name__", "") for c in
                 inner_commands(server.reboot, delay=5, interval=3, reboot_timeout=60)
                 if isinstance(c, FunctionCommand)]
    assert reboot_mod.PYINFRA_UPTIME in names and reboot_mod.PYINFRA_WAIT in names


def test_boot_id_is_the_files_one_line():
    assert parse_boot_id([NEW]) == NEW
    assert parse_boot_id([]) == ""
    assert BootId().command() == "cat /proc/sys/kernel/random/boot_id"


class FakeClient:
    def __init__(self, closed: list) -> None:
        self.closed = closed

    def close(self) -> None:
        self.closed.append(1)


class FakeHost(SimpleNamespace):
    """A host whose attempts go by a script: None (can't connect), or the boot id it reads.
    `block` makes an attempt hang (a banner that never comes)."""

    def __init__(self, attempts, block: float = 0.0) -> None:
        closed: list = []
        super().__init__(name="gpu-07", logged=[], attempts=list(attempts), connected=True,
                         closed=closed, connector=SimpleNamespace(client=FakeClient(closed)),
                         connector_data={}, tries=0, block=block)

    def log_styled(self, message, fg=None, log_func=None):
        self.logged.append(message)

    def disconnect(self):
        self.connected = False

    def connect(self, show_errors=True):
        self.tries += 1
        if self.block:
            gevent.sleep(self.block)
        self.boot = self.attempts.pop(0) if self.attempts else None
        self.connected = self.boot is not None

    def get_fact(self, fact):
        assert fact is BootId
        return self.boot


def test_a_host_slower_to_boot_than_it_had_been_up_is_taken_back_by_its_new_boot_id():
    # pyinfra 3.10 compares uptimes: a boot longer than the uptime before it never passes.
    # Down twice, then the old boot still answering, then the new boot.
    host = FakeHost([None, None, OLD, NEW])
    assert reboot_mod.readable_wait(None, host, [OLD], 0, 0.01, 30) is True
    assert host.tries == 4 and not host.logged
    assert len(host.closed) == 4  # the old connection closed before every attempt


def test_a_host_that_never_returns_fails_in_time_with_its_name_and_the_fix():
    host = FakeHost([OLD] * 1000)
    started = time.monotonic()
    assert reboot_mod.readable_wait(None, host, [OLD], 0, 0.05, 1) is False
    assert time.monotonic() - started < 1.5
    [message] = host.logged
    assert message.startswith("gpu-07: did not reboot in time: no SSH login within 1 s")
    assert "Fix:" in message and "reboot_timeout" in message


def test_an_attempt_that_hangs_does_not_outlast_the_timeout():
    # pyinfra 3.10 counts attempts (timeout / interval), each as long as it takes.
    host = FakeHost([None] * 10, block=30)
    started = time.monotonic()
    assert reboot_mod.readable_wait(None, host, [OLD], 0, 0.05, 1) is False
    assert time.monotonic() - started < 2
    assert host.logged and host.tries == 1


def test_paramiko_is_quiet_during_the_wait_and_restored_after():
    seen = {}

    class Noisy(FakeHost):
        def connect(self, show_errors=True):
            seen["level"] = logging.getLogger("paramiko.transport").getEffectiveLevel()
            logging.getLogger("paramiko.transport").error("Error reading SSH protocol banner")
            super().connect(show_errors)

    host = Noisy([NEW])
    before = logging.getLogger("paramiko.transport").level
    assert reboot_mod.readable_wait(None, host, [OLD], 0, 0.01, 30) is True
    assert seen["level"] > logging.CRITICAL
    assert logging.getLogger("paramiko.transport").level == before


def _gpu_node(monkeypatch, **fields):
    from gpunode.facts.boot_modules import parse_kernel_trees
    from gpunode.facts.kernels import KernelPackages
    from gpunode.facts.snapshot import Snapshot
    snapshot = Snapshot(**{
        "driver_loaded": "550.54.15",
        "kernels": KernelPackages(running="6.12.57+deb13-amd64", newest="6.12.69+deb13-amd64",
                                  installed=["6.12.69+deb13-amd64", "6.12.57+deb13-amd64"]),
        "boot_modules": parse_kernel_trees(
            "kernel=6.12.57+deb13-amd64\n/lib/modules/6.12.57+deb13-amd64/updates/dkms/"
            "nvidia.ko.xz\nkernel=6.12.69+deb13-amd64\n"),
        **fields})
    monkeypatch.setattr(reboot_mod, "node", lambda: snapshot)


def test_a_reboot_into_a_kernel_without_the_nvidia_module_is_refused(monkeypatch):
    _gpu_node(monkeypatch)
    refusal = reboot_mod.gpu_reboot_refusal(None) or ""
    assert refusal.startswith("kernel 6.12.69+deb13-amd64: no NVIDIA kernel module")
    assert _commands(reboot_timeout=60, keep_gpu=True) == []  # nothing else in the step
    assert reboot_mod.gpu_reboot_refusal("6.12.57+deb13-amd64") is None  # pinned: has it
    assert _commands(reboot_timeout=60, keep_gpu=True, boot_kernel="6.12.57+deb13-amd64")


def test_no_nvidia_driver_no_check(monkeypatch):
    _gpu_node(monkeypatch, driver_loaded=None)
    assert reboot_mod.gpu_reboot_refusal(None) is None
    assert _commands(reboot_timeout=60, keep_gpu=True)
